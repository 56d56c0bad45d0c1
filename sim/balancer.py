"""The stack's network load balancer, for the simulation: one stable loopback endpoint that
forwards TCP to the group's InService instances that pass a health check.

What it copies from an NLB target group attached to an Auto Scaling group (template.yaml,
ClientTargetGroup):

- Auto Scaling registers an instance when it enters InService and deregisters it when it leaves
  (Terminating:Wait included: the instance is deregistered before the terminate hook's wait)
  https://docs.aws.amazon.com/autoscaling/ec2/userguide/attach-load-balancer-asg.html
  https://docs.aws.amazon.com/autoscaling/ec2/userguide/lifecycle-hooks-overview.html
- Health checks: HTTP GET /health on the health-check port (2381, etcd's plain metrics listener,
  with TLS managed; 2379 without), healthy on 200-399, a target healthy after
  HEALTHY_THRESHOLD passes in a row and unhealthy after UNHEALTHY_THRESHOLD failures; if no
  registered target is healthy, the load balancer fails open and routes to all of them
  https://docs.aws.amazon.com/elasticloadbalancing/latest/network/target-group-health-checks.html
- A TCP listener: each connection goes to one healthy target and stays there (the client's TLS
  passes through; members' certificates carry the load balancer's name). A connection already
  open to a deregistered target is not cut; it ends when the target does.

The intervals are shorter than AWS's (10 or 30 s) so that tests take seconds, not minutes.
`--state` names a JSON file rewritten on every change: the registered and the healthy targets.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import time

import boto3

HEALTHY_THRESHOLD = 2
UNHEALTHY_THRESHOLD = 2


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} balancer: {message}", flush=True)


class Balancer:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        kw = dict(endpoint_url=args.aws, region_name="us-east-1", aws_access_key_id="testing",
                  aws_secret_access_key="testing")
        self.asg = boto3.client("autoscaling", **kw)
        self.ec2 = boto3.client("ec2", **kw)
        self.registered: dict[str, str] = {}  # instance id -> address
        self.streak: dict[str, int] = {}  # > 0: checks passed in a row; < 0: failed in a row
        self.healthy: set[str] = set()
        self.connections: dict[str, int] = {}  # instance id -> connections forwarded
        self.rng = random.Random()

    # --- registration and health ----------------------------------------------------------

    def _in_service(self) -> dict[str, str]:
        groups = self.asg.describe_auto_scaling_groups(AutoScalingGroupNames=[self.args.group])
        groups = groups["AutoScalingGroups"]
        ids = [i["InstanceId"] for i in groups[0]["Instances"] if i["LifecycleState"] == "InService"] if groups else []
        if not ids:
            return {}
        tags = self.ec2.describe_tags(Filters=[{"Name": "key", "Values": [self.args.address_tag]},
                                               {"Name": "resource-id", "Values": ids}])["Tags"]
        return {t["ResourceId"]: t["Value"] for t in tags}

    async def _check(self, address: str) -> bool:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(address, self.args.health_port), self.args.check_timeout)
        except (OSError, asyncio.TimeoutError):
            return False
        try:
            writer.write(f"GET /health HTTP/1.0\r\nHost: {address}\r\n\r\n".encode())
            line = await asyncio.wait_for(reader.readline(), self.args.check_timeout)
            parts = line.split()
            return len(parts) >= 2 and parts[1].isdigit() and 200 <= int(parts[1]) < 400
        except (OSError, asyncio.TimeoutError):
            return False
        finally:
            writer.close()

    async def refresh_forever(self):
        while True:
            try:
                found = await asyncio.to_thread(self._in_service)
            except Exception as e:  # the emulator going away at shutdown, or busy
                log(f"describe failed: {e!r}")
                found = self.registered
            for iid in sorted(set(self.registered) - set(found)):
                log(f"deregistered {iid} ({self.registered[iid]})")
                self.streak.pop(iid, None)
                self.healthy.discard(iid)
            for iid in sorted(set(found) - set(self.registered)):
                log(f"registered {iid} ({found[iid]})")
            self.registered = found
            results = await asyncio.gather(*(self._check(a) for a in found.values()))
            for iid, ok in zip(list(found), results):
                before = self.streak.get(iid, 0)
                self.streak[iid] = max(before, 0) + 1 if ok else min(before, 0) - 1
                if self.streak[iid] >= HEALTHY_THRESHOLD and iid not in self.healthy:
                    self.healthy.add(iid)
                    log(f"{iid} healthy")
                elif self.streak[iid] <= -UNHEALTHY_THRESHOLD and iid in self.healthy:
                    self.healthy.discard(iid)
                    log(f"{iid} unhealthy")
            self._write_state()
            await asyncio.sleep(self.args.interval)

    def _write_state(self):
        if not self.args.state:
            return
        state = {"registered": self.registered, "healthy": sorted(self.healthy),
                 "connections": self.connections}
        tmp = f"{self.args.state}.tmp"
        with open(tmp, "w") as f:
            json.dump(state, f)
        os.replace(tmp, self.args.state)

    # --- forwarding ---------------------------------------------------------------------------

    def _pick(self) -> tuple[str, str] | None:
        healthy = [iid for iid in self.registered if iid in self.healthy]
        choices = healthy or list(self.registered)  # fail open
        if not choices:
            return None
        iid = self.rng.choice(choices)
        return iid, self.registered[iid]

    async def serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter):
        picked = self._pick()
        if picked is None:
            client_w.close()
            return
        iid, address = picked
        try:
            target_r, target_w = await asyncio.wait_for(
                asyncio.open_connection(address, self.args.target_port), self.args.check_timeout)
        except (OSError, asyncio.TimeoutError):
            client_w.close()
            return
        self.connections[iid] = self.connections.get(iid, 0) + 1
        await asyncio.gather(_pipe(client_r, target_w), _pipe(target_r, client_w))

    async def run(self):
        server = await asyncio.start_server(self.serve, self.args.listen, self.args.port)
        log(f"listening on {self.args.listen}:{self.args.port} for group {self.args.group}")
        if self.args.ready:
            with open(self.args.ready, "w") as f:
                f.write(f"{self.args.listen}:{self.args.port}\n")
        async with server:
            await self.refresh_forever()


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter):
    try:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        sink.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--aws", required=True, help="the emulator's endpoint URL")
    p.add_argument("--group", required=True)
    p.add_argument("--listen", required=True, help="loopback address to listen on")
    p.add_argument("--port", type=int, default=2379)
    p.add_argument("--target-port", type=int, default=2379)
    p.add_argument("--health-port", type=int, default=2381)
    p.add_argument("--address-tag", default="etcd-address")
    p.add_argument("--interval", type=float, default=0.5)
    p.add_argument("--check-timeout", type=float, default=1.0)
    p.add_argument("--state", help="JSON file of the registered and healthy targets")
    p.add_argument("--ready", help="file written once listening")
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        asyncio.run(Balancer(args).run())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
