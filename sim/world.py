"""One simulated deployment: emulated AWS, the real function, real etcd instances, a writer.

Everything binds to loopback. Every process started here is stopped here, by PID.
"""

from __future__ import annotations

import heapq
import itertools
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import boto3

from . import etcd, history, pki, procs, warm_aws
from .runtime import Function

# nftables' command: in /usr/sbin, which a PATH for unprivileged users may leave out.
NFT = shutil.which("nft") or "/usr/sbin/nft"
ROOT = Path(__file__).resolve().parent.parent
BOOT_SCRIPT = ROOT / "boot" / "etcd-boot.sh"
ADDRESS_TAG = "etcd-address"
VERSION_TAG = "etcd-asg-etcd-version"  # src/model.rs VERSION_TAG
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
               "AWS_DEFAULT_REGION": "us-east-1"}


def default_binary() -> str:
    target = os.environ.get("CARGO_TARGET_DIR", str(ROOT / "target"))
    return os.environ.get("BOOTSTRAP_BIN", os.path.join(target, "debug", "bootstrap"))


@dataclass
class Deployment:
    """A stack already created in an emulator (sim/stack.py): a Simulation given one runs against
    its group, hooks, parameter prefix, bucket and function environment, and boots instances with
    its launch template's user data, instead of making its own."""

    endpoint: str  # the emulator holding the stack; whoever started it stops it
    group: str
    hooks: tuple[str, str]  # the launch hook's name, the terminate hook's
    function_env: dict[str, str]  # the function's environment, as Lambda holds it
    user_data: str  # what the launch template has each instance run

    @property
    def prefix(self) -> str:
        return self.function_env["PARAMETER_PREFIX"]

    @property
    def bucket(self) -> str | None:
        return self.function_env.get("BACKUP_BUCKET")


@dataclass
class Chaos:
    """What the delivery layer does to events on purpose."""

    duplicate: float = 0.0  # chance an event is delivered twice
    drop: float = 0.0  # chance an event is lost
    delay: tuple[float, float] = (0.0, 0.0)  # seconds, uniform
    reverse: bool = False  # deliver each batch of new events in reverse order
    seed: int = 7


@dataclass
class SimInstance:
    id: str
    address: str
    data_dir: str
    proc: subprocess.Popen | None = None
    etcd_bin: str | None = None  # the etcd it booted with


@dataclass(order=True)
class _Pending:
    due: float
    seq: int
    event: dict = field(compare=False)
    attempt: int = field(compare=False, default=0)


class Delivery(threading.Thread):
    """EventBridge and Lambda's async invoke: at least once, unordered, sometimes lost; retried
    twice on failure; plus a periodic schedule."""

    def __init__(self, sim: "Simulation", chaos: Chaos, schedule_every: float):
        super().__init__(daemon=True)
        self.sim = sim
        self.chaos = chaos
        self.rng = random.Random(chaos.seed)
        self.schedule_every = schedule_every
        self.queue: list[_Pending] = []
        self.seq = itertools.count()
        self.stop_flag = threading.Event()
        self.drop_next_launches = 0  # events for the next N launches are lost
        self.dropped = 0
        self.failed = 0
        self.lock = threading.Lock()

    def push(self, event: dict, delay: float = 0.0, attempt: int = 0):
        with self.lock:
            heapq.heappush(self.queue, _Pending(time.monotonic() + delay, next(self.seq), event, attempt))

    def _intake(self):
        batch = self.sim.drain("events")
        self.sim.events_seen.extend(batch)
        if self.chaos.reverse:
            batch = list(reversed(batch))
        for e in batch:
            launch = e.get("detail-type", "").startswith("EC2 Instance-launch") and "EC2InstanceId" in e["detail"]
            if launch and self.drop_next_launches > 0:
                self.drop_next_launches -= 1
                self.dropped += 1
                continue
            if self.rng.random() < self.chaos.drop:
                self.dropped += 1
                continue
            copies = 2 if self.rng.random() < self.chaos.duplicate else 1
            # In EC2 an instance has its private address when its launch event fires; here the
            # instances loop tags one a moment after moto launches it: a launch event waits for
            # it (else a run with only events, no schedule, finds no instance to seed with).
            settle = 1.0 if launch else 0.0
            for _ in range(copies):
                self.push(e, max(settle, self.rng.uniform(*self.chaos.delay)))

    def run(self):
        next_schedule = time.monotonic() + self.schedule_every
        next_intake = 0.0
        while not self.stop_flag.is_set():
            now = time.monotonic()
            if now >= next_intake:  # moto asked for new events five times a second, not twenty
                self._intake()
                next_intake = now + 0.2
            now = time.monotonic()
            if now >= next_schedule:
                self.push(scheduled_event())
                next_schedule = now + self.schedule_every
            item = None
            with self.lock:
                if self.queue and self.queue[0].due <= now:
                    item = heapq.heappop(self.queue)
            if item is None:
                time.sleep(0.05)
                continue
            inv = self.sim.function.invoke(item.event, timeout=self.sim.invoke_timeout)
            if inv.outcome != "ok":
                self.failed += 1
                if item.attempt < 2:  # Lambda async: two more tries (after 1 and 2 minutes; scaled)
                    self.push(item.event, delay=0.5 * (item.attempt + 1), attempt=item.attempt + 1)

    def stop(self):
        self.stop_flag.set()
        self.join(timeout=self.sim.invoke_timeout + 10)


def scheduled_event() -> dict:
    return {
        "version": "0", "id": f"sched-{time.monotonic_ns()}", "detail-type": "Scheduled Event",
        "source": "aws.events", "account": "123456789012",
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "region": "us-east-1",
        "resources": ["arn:aws:events:us-east-1:123456789012:rule/etcd-reconcile"], "detail": {},
    }


class Writer(threading.Thread):
    """Writes a numbered key stream through the load balancer, retrying; remembers what was
    acknowledged."""

    PREFIX = "/sim/writes/"

    def __init__(self, sim: "Simulation"):
        super().__init__(daemon=True)
        self.sim = sim
        self.acked: list[int] = []
        self.attempts_failed = 0
        self.longest_stall = 0.0
        self.longest_stall_ended = 0.0  # monotonic time the longest stall ended
        self.stop_flag = threading.Event()

    def run(self):
        n = 0
        last_ok = None  # a stall is the gap between two acknowledged writes
        # Through the load balancer, like an application: one connection kept while it works.
        conn = etcd.Connection(self.sim.client_endpoint)
        while not self.stop_flag.is_set():
            try:
                conn.put(f"{self.PREFIX}{n:08d}", str(n), timeout=1.0)
                now = time.monotonic()
                if last_ok is not None and now - last_ok > self.longest_stall:
                    self.longest_stall, self.longest_stall_ended = now - last_ok, now
                last_ok = now
                self.acked.append(n)
                n += 1
                time.sleep(0.02)
            except etcd.EtcdError:
                self.attempts_failed += 1
                time.sleep(0.05)
        conn.close()

    def stop(self, verify: bool = True):
        """Stops writing; unless the test records through a restore (`start_writer`), the
        client history recorded alongside is stopped and checked too (a violation fails here)."""
        self.stop_flag.set()
        self.join(timeout=5)
        if verify and self.sim.recording is not None and not self.sim.history_through_restore:
            self.sim.verify_history()

    def lost(self) -> list[int]:
        """Acknowledged writes that cannot be read back."""
        for url in self.sim.running_client_urls():
            try:
                found = etcd.keys_with_prefix(url, self.PREFIX)
                return [n for n in self.acked if f"{self.PREFIX}{n:08d}" not in found]
            except etcd.EtcdError:
                continue
        return list(self.acked)


class NotConverged(AssertionError):
    pass


class Simulation:
    """Emulated AWS (moto with lifecycle hooks), the real function, real etcd instances."""

    def __init__(self, name: str = "etcd-sim", chaos: Chaos | None = None, schedule_every: float = 4.0,
                 function_env: dict | None = None, binary: str | None = None, workdir: str | None = None,
                 writer: bool = True, verbose: bool = False, crash_once_after: str | None = None,
                 hooks: tuple[str, str] = ("etcd-launch", "etcd-terminate"), etcd_bin: str | None = None,
                 backups: bool = False, tls: bool | None = None, hook_timeout: int = 120,
                 deployment: Deployment | None = None, warm_aws: bool = False, zones: int = 3,
                 s3_of: "Simulation | None" = None, before_function=None):
        self.deployment = deployment
        # Called with this simulation once its group and AWS exist, before the function starts:
        # what an operator does between deploying and the first invocation (`etcd-asg
        # adopt-secrets` for an adoption over TLS).
        self.before_function = before_function
        # Another simulation whose S3 this one uses (`AWS_ENDPOINT_URL_S3`, which the SDKs and
        # the AWS CLI read before AWS_ENDPOINT_URL): two stacks of one account and Region, each
        # with its own bucket; everything else stays this simulation's own.
        self.s3_of = s3_of
        # Instances' `aws` through one warm CLI process (sim/warm_aws.py) instead of a fresh
        # Python each call: the same CLI, at a quarter of the CPU. Off: the plain CLI on PATH.
        self.warm_aws = warm_aws
        self.warm_aws_proc = None
        self.group = deployment.group if deployment else name
        # TLS=managed: the function's CA, members that demand client certificates; the simulation
        # talks to etcd with a certificate the operator CLI issues (default: SIM_TLS, else on).
        self.tls = os.environ.get("SIM_TLS", "1") != "0" if tls is None else tls
        if deployment:  # the stack's setting
            self.tls = deployment.function_env.get("TLS") == "managed"
        self.scheme = "https" if self.tls else "http"
        # An S3 bucket in the emulator and BACKUP_BUCKET for the function.
        self.backup_bucket = f"{name}-backups" if backups else None
        if deployment:
            self.backup_bucket = deployment.bucket
        # The etcd each new instance boots with, read at its boot: change it mid-run to roll the
        # cluster to another version (default: sim.etcd.binary(), i.e. ETCD_VERSION).
        self.etcd_bin = etcd_bin or etcd.binary()
        self.hooks = deployment.hooks if deployment else hooks
        self.hook_timeout = hook_timeout  # the hooks' HeartbeatTimeout, seconds
        # The group's Availability Zones, which the emulator balances its instances across.
        self.zones = [f"us-east-1{c}" for c in "abcdef"[:zones]]
        self.chaos = chaos or Chaos()
        self.schedule_every = schedule_every
        self.binary = binary or default_binary()
        self.extra_env = dict(function_env or {})
        if crash_once_after:
            self.extra_env["FAILPOINT_CRASH_AFTER"] = crash_once_after
        self.workdir = workdir or tempfile.mkdtemp(prefix="etcd-sim-")
        self.keep_workdir = workdir is not None
        self.with_writer = writer
        self.verbose = verbose
        self.prefix = deployment.prefix if deployment else f"/etcd-asg-lifecycle/{name}"
        self.instances: dict[str, SimInstance] = {}
        self.events_seen: list[dict] = []
        self.invoke_timeout = 60.0
        net = random.Random().randrange(1, 250), random.Random().randrange(1, 250)
        # .1 is the load balancer's (sim/balancer.py), the stack's one client endpoint; instances .2 on.
        self.balancer_address = f"127.{net[0]}.{net[1]}.1"
        self.client_endpoint = f"{self.scheme}://{self.balancer_address}:2379"
        self.balancer = None
        self._addresses = (f"127.{net[0]}.{net[1]}.{n}" for n in itertools.count(2))
        self.cluster_id: int | None = None
        # The next N instances get an address but never run their boot script (a broken AMI).
        self.dead_on_arrival = 0
        self.never_booted: list[str] = []
        self.lock = threading.RLock()
        self.stop_flag = threading.Event()
        self.moto = None
        self._cut_tables: set[str] = set()  # nftables tables of cut_off(), removed at close
        self._impaired: list[str] = []  # instances of lost zones (the fault layer's impaired set)
        # The client history recorded while the writer writes (sim/history.py, docs/clients.md).
        self.recording: history.Recording | None = None
        self.history_through_restore = False
        self._history_pending = False
        self.history_summary: dict | None = None

    # --- lifecycle -------------------------------------------------------------------------

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def start(self):
        if not os.path.exists(self.binary):
            raise FileNotFoundError(f"{self.binary} not built (make build)")
        if self.deployment:
            self.endpoint = self.deployment.endpoint
        else:
            self._start_moto()
        kw = dict(endpoint_url=self.endpoint, region_name="us-east-1", aws_access_key_id="testing",
                  aws_secret_access_key="testing")
        self.ec2 = boto3.client("ec2", **kw)
        self.asg = boto3.client("autoscaling", **kw)
        self.ssm = boto3.client("ssm", **kw)
        self.aws_env = {**CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint}
        if self.s3_of is not None:
            self.aws_env["AWS_ENDPOINT_URL_S3"] = self.s3_of.endpoint
            kw = {**kw, "endpoint_url": self.s3_of.endpoint}
        self.s3 = boto3.client("s3", **kw)
        if self.backup_bucket and not self.deployment:
            self.s3.create_bucket(Bucket=self.backup_bucket)
            self.extra_env.setdefault("BACKUP_BUCKET", self.backup_bucket)
        settings = self._function_settings()
        self.function = Function(self.binary, {
            **self.aws_env,
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            **settings,
            **self.extra_env,
        }, os.path.join(self.workdir, "function.log"), once=("FAILPOINT_CRASH_AFTER",))
        # The fault layer kills the function by its PID (`crash`): it learns each new one.
        self.function.on_start = lambda pid: self.faults(pid=pid)
        # The group and its hooks exist before the function's cold start, which checks them.
        if not self.deployment:
            self.create_group(self.group, 0)
        self._start_balancer()
        if self.warm_aws:
            self.warm_aws_proc, self.aws_bin = warm_aws.start(self.workdir)
        if self.before_function:
            self.before_function(self)
        self.function.start()
        if self.tls:
            self._tls_clients()
        self.threads = [threading.Thread(target=self._instances_loop, daemon=True)]
        for t in self.threads:
            t.start()
        self.delivery = Delivery(self, self.chaos, self.schedule_every)
        self.delivery.start()
        self.writer = Writer(self) if self.with_writer else None

    def _function_settings(self) -> dict:
        """The function's settings: the stack's, or the simulation's own. With TLS, the names
        the members' certificates carry besides their own go into extra_env."""
        if self.deployment:
            # What the stack gives the function; the caller's function_env overrides some.
            settings = dict(self.deployment.function_env)
        else:
            settings = {
                "ASG_NAME": self.group,
                "LAUNCH_HOOK_NAME": self.hooks[0],
                "TERMINATE_HOOK_NAME": self.hooks[1],
                "PARAMETER_PREFIX": self.prefix,
                "ADDRESS_SOURCE": f"tag:{ADDRESS_TAG}",
                "WAIT_BUDGET_SECS": "20",
                "POLL_INTERVAL_MS": "250",
                "ETCD_REQUEST_TIMEOUT_MS": "2000",
                "LEARNER_START_TIMEOUT_SECS": "60",
                "DEADLINE_MARGIN_MS": "2000",
                "AWS_LAMBDA_LOG_FORMAT": "JSON",
                "RUST_LOG": "info",
            }
            if self.tls:
                settings["TLS"] = "managed"
        if self.tls:
            # On loopback a peer connects from 127.0.0.1, not its own address: etcd checks a
            # peer's certificate against the address it connects from. Clients come through the
            # load balancer, whose name members' certificates carry, as the stack's do (a
            # stack's own names are kept).
            names = [settings.get("MEMBER_CERT_EXTRA_SANS"), "127.0.0.1", self.balancer_address]
            self.extra_env.setdefault("MEMBER_CERT_EXTRA_SANS", ",".join(n for n in names if n))
        return settings

    def _tls_clients(self):
        """The clients' TLS, once the function has made the CA: a root certificate from the CLI
        (for etcdctl, which speaks gRPC), and the simulation's own gateway credentials made from
        the CA the function keeps (sim/pki.py)."""
        self.client_cert_dir = os.path.join(self.workdir, "client")
        r = self.cli("client-cert", "root", "--days", "1", "--out", self.client_cert_dir)
        if r.returncode != 0:
            raise RuntimeError(f"etcd-asg client-cert failed: {r.stderr}")
        ca = self.ssm.get_parameter(Name=f"{self.prefix}/pki/ca", WithDecryption=True)
        token_key = self.ssm.get_parameter(Name=f"{self.prefix}/pki/token-key", WithDecryption=True)
        self.credentials = pki.Credentials(ca["Parameter"]["Value"], token_key["Parameter"]["Value"],
                                           self.client_cert_dir)
        c, d = self.credentials, self.client_cert_dir
        ctl = os.path.join(os.path.dirname(self.etcd_bin), "etcdctl")
        reader = [ctl, "--cacert", c.ca, "--cert", f"{d}/root.crt", "--key", f"{d}/root.key"]
        etcd.use_tls(self.balancer_address, c.ca, c.cert, c.key, token=c.token, reader=reader)

    def close(self):
        self.stop_flag.set()
        for table in list(self._cut_tables):
            subprocess.run([NFT, "delete", "table", "inet", table], capture_output=True)
        if getattr(self, "writer", None) and self.writer.is_alive():
            self.writer.stop(verify=False)
        if getattr(self, "recording", None) is not None:
            self.recording.kill()
        if getattr(self, "delivery", None):
            self.delivery.stop()
        for t in getattr(self, "threads", []):
            t.join(timeout=5)
        with self.lock:
            for inst in self.instances.values():
                if inst.proc is not None:
                    procs.stop(inst.proc, kill=True)
        if getattr(self, "function", None):
            self.function.close()
        if self.balancer is not None:
            procs.stop(self.balancer)
        if self.warm_aws_proc is not None:
            procs.stop(self.warm_aws_proc, kill=True)
        if self.tls:
            etcd.use_tls(self.balancer_address, None)
        if self.moto is not None:  # not a deployment's emulator: its owner stops that
            procs.stop(self.moto)
        if not self.keep_workdir and os.environ.get("SIM_KEEP") != "1":
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _start_moto(self):
        port_file = os.path.join(self.workdir, "moto.port")
        self.moto = procs.spawn([sys.executable, str(ROOT / "sim" / "moto_lifecycle.py"), "--port-file", port_file],
                                dict(os.environ), os.path.join(self.workdir, "moto.log"))
        deadline = time.monotonic() + 60
        while not os.path.exists(port_file):
            if self.moto.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"moto did not start; see {self.workdir}/moto.log")
            time.sleep(0.1)
        self.endpoint = f"http://127.0.0.1:{open(port_file).read().strip()}"

    def _start_balancer(self):
        """The stack's network load balancer: self.client_endpoint forwards to InService instances
        that pass the health check (sim/balancer.py)."""
        ready = os.path.join(self.workdir, "balancer.ready")
        self.balancer_state = os.path.join(self.workdir, "balancer.json")
        self.balancer = procs.spawn(
            [sys.executable, "-m", "sim.balancer", "--aws", self.endpoint, "--group", self.group,
             "--listen", self.balancer_address, "--health-port", "2381" if self.tls else "2379",
             "--address-tag", ADDRESS_TAG, "--state", self.balancer_state, "--ready", ready],
            {**os.environ, "PYTHONPATH": str(ROOT)}, os.path.join(self.workdir, "balancer.log"))
        deadline = time.monotonic() + 30
        while not os.path.exists(ready):
            if self.balancer.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the load balancer did not start; see {self.workdir}/balancer.log")
            time.sleep(0.05)

    def balancer_targets(self) -> dict:
        """What the load balancer forwards to: ``{"registered": {id: address}, "healthy": [id]}``."""
        try:
            with open(self.balancer_state) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {"registered": {}, "healthy": [], "connections": {}}

    # --- AWS side ----------------------------------------------------------------------------

    def drain(self, feed: str) -> list:
        with urllib.request.urlopen(f"{self.endpoint}/_sim/{feed}", timeout=5) as r:
            return json.loads(r.read())

    def zone_of(self) -> dict[str, str]:
        """Each of the group's instances' Availability Zone."""
        return {i["InstanceId"]: i["AvailabilityZone"] for i in self.group_instances()}

    def _zones(self, spec: dict) -> dict:
        req = urllib.request.Request(f"{self.endpoint}/_sim/zones", data=json.dumps(spec).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.loads(r.read())

    def lose_zone(self, zone: str) -> list[str]:
        """A zone's outage: every instance there gone at once (its etcd killed; Auto Scaling
        still lists it, as it does until its health check fails), EC2 failing every
        DescribeInstances that names one of them, the group's launches there failing (it
        launches elsewhere). The instances it took."""
        lost = [iid for iid, z in self.zone_of().items() if z == zone]
        impaired = set(self._zones({})["impaired"]) | {zone}
        self._zones({"impaired": sorted(impaired)})
        self.faults(impaired=sorted(set(self._impaired) | set(lost)))
        self._impaired = sorted(set(self._impaired) | set(lost))
        for iid in lost:
            self.kill_instance(iid)
        return lost

    def restore_zone(self, zone: str):
        """The zone back: launches there succeed again (its lost instances stay lost)."""
        impaired = set(self._zones({})["impaired"]) - {zone}
        self._zones({"impaired": sorted(impaired)})

    def rebalance(self) -> str | None:
        """One AZRebalance step, launch before terminate (the emulator's `rebalance`): the
        instance it launched, or None when the zones are balanced."""
        return self._zones({"rebalance": self.group})["launched"]

    def zone_counts(self) -> dict[str, int]:
        return self._zones({"group": self.group})["zones"]

    def global_timeout_cap(self, seconds: float):
        """Lowers the most a held lifecycle action lasts (AWS: 48 h) for the actions held from
        now on."""
        self._zones({"global_timeout_cap": seconds})

    def global_timeout_scale(self, factor: float):
        """Every global timeout of the actions held from now on times `factor`: hours of AWS's
        in minutes of a test (heartbeat timeouts keep their real length)."""
        self._zones({"global_timeout_scale": factor})

    def faults(self, rules: list[dict] | None = None, **settings):
        """Sets the fault layer between the function (and the CLI) and the emulator
        (sim/faults.py): its `rules`, which replace the ones before, and any of `seed`,
        `impaired`, `unknown_for`. ``sim.faults([])`` ends every fault."""
        body = dict(settings)
        if rules is not None:
            body["rules"] = rules
        req = urllib.request.Request(f"{self.endpoint}/_sim/faults", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=5) as r:
            r.read()

    def fault_report(self, clear: bool = False) -> dict:
        """What the fault layer did: ``{"faults": {"ssm.PutParameter.lose": n, ...}, "calls":
        {"function.ssm.PutParameter": n, ...}, "kills": n}``."""
        url = f"{self.endpoint}/_sim/faults" + ("?clear=1" if clear else "")
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.loads(r.read())

    def create_group(self, name: str, desired: int):
        lt = f"{name}-lt"
        self.ec2.create_launch_template(LaunchTemplateName=lt, LaunchTemplateData={
            "ImageId": "ami-12c6146b", "InstanceType": "t3.small"})
        self.asg.create_auto_scaling_group(
            AutoScalingGroupName=name, LaunchTemplate={"LaunchTemplateName": lt},
            MinSize=0, MaxSize=20, DesiredCapacity=0, AvailabilityZones=self.zones)
        self.asg.put_lifecycle_hook(AutoScalingGroupName=name, LifecycleHookName=self.hooks[0],
                                    LifecycleTransition="autoscaling:EC2_INSTANCE_LAUNCHING",
                                    HeartbeatTimeout=self.hook_timeout, DefaultResult="ABANDON")
        self.asg.put_lifecycle_hook(AutoScalingGroupName=name, LifecycleHookName=self.hooks[1],
                                    LifecycleTransition="autoscaling:EC2_INSTANCE_TERMINATING",
                                    HeartbeatTimeout=self.hook_timeout, DefaultResult="CONTINUE")
        if desired:
            self.scale(desired, group=name)

    def scale(self, desired: int, group: str | None = None):
        self.asg.set_desired_capacity(AutoScalingGroupName=group or self.group, DesiredCapacity=desired)

    def terminate(self, instance_id: str, decrement: bool = False):
        self.asg.terminate_instance_in_auto_scaling_group(InstanceId=instance_id,
                                                          ShouldDecrementDesiredCapacity=decrement)

    def detach(self, instance_id: str):
        """Take an instance out of the group with no hook and no event, and kill its etcd."""
        self.asg.detach_instances(AutoScalingGroupName=self.group, InstanceIds=[instance_id],
                                  ShouldDecrementDesiredCapacity=True)
        self.kill_instance(instance_id)

    def describe_group(self, group: str | None = None) -> dict:
        g = self.asg.describe_auto_scaling_groups(AutoScalingGroupNames=[group or self.group])
        return g["AutoScalingGroups"][0]

    def group_instances(self, group: str | None = None) -> list[dict]:
        return self.describe_group(group)["Instances"]

    def parameters(self) -> dict[str, str]:
        out = {}
        for page in self.ssm.get_paginator("get_parameters_by_path").paginate(Path="/", Recursive=True):
            for p in page["Parameters"]:
                out[p["Name"]] = p["Value"]
        return out

    # --- instances ---------------------------------------------------------------------------

    def _instances_loop(self):
        while not self.stop_flag.wait(0.2):
            try:
                for iid in self.drain("terminated"):
                    self.kill_instance(iid)
                for i in self.group_instances():
                    if i["InstanceId"] not in self.instances:
                        self._boot(i["InstanceId"])
            except Exception as e:  # moto going away at shutdown
                if not self.stop_flag.is_set():
                    print(f"instances loop: {e!r}", file=sys.stderr)

    def _boot(self, iid: str):
        """An instance starting: it gets an address, then runs the boot script of the template
        (with a deployment: the user data of its launch template, which sets PARAMETER_PREFIX)."""
        address = next(self._addresses)
        # The address and the etcd release it runs, as the stack's launch template and group
        # tags declare them (`etcd-asg-etcd-version`, propagated at launch from EtcdVersion).
        # The version first: in AWS the group's tag is on the instance from its launch, so the
        # function never sees an address without it.
        etcd_bin = self.etcd_bin
        self.ec2.create_tags(Resources=[iid], Tags=[{"Key": VERSION_TAG, "Value": etcd.version_of(etcd_bin)}])
        self.ec2.create_tags(Resources=[iid], Tags=[{"Key": ADDRESS_TAG, "Value": address}])
        data_dir = os.path.join(self.workdir, iid)
        os.makedirs(data_dir, exist_ok=True)
        if self.dead_on_arrival > 0:
            self.dead_on_arrival -= 1
            self.never_booted.append(iid)
            with self.lock:
                self.instances[iid] = SimInstance(iid, address, data_dir, None)
            return
        path = os.environ.get("PATH", "/usr/bin:/bin")
        env = {
            **self.aws_env,
            "PATH": f"{self.aws_bin}:{path}" if self.warm_aws else path,
            "PARAMETER_PREFIX": self.prefix,
            "INSTANCE_ID": iid,
            "DATA_DIR": os.path.join(data_dir, "data"),
            "CONFIG_FILE": os.path.join(data_dir, "etcd.env"),
            "BOOT_MODE": "exec",
            "ETCD_BIN": etcd_bin,
            "POLL_SECONDS": "0.5",
            "POLL_MAX_SECONDS": "3",
            "TLS_DIR": os.path.join(data_dir, "pki"),
        }
        script = str(BOOT_SCRIPT)
        if self.deployment:
            script = os.path.join(data_dir, "user-data")
            with open(script, "w") as f:
                f.write(self.deployment.user_data)
            del env["PARAMETER_PREFIX"]
        proc = procs.spawn(["bash", script], env, os.path.join(data_dir, "boot.log"))
        with self.lock:
            self.instances[iid] = SimInstance(iid, address, data_dir, proc, env["ETCD_BIN"])

    def member_data_dirs(self) -> list[str]:
        """Every etcd data directory this simulation's instances had, terminated and replaced
        ones too (an instance's directory stays until close()): those holding a WAL, for the
        history checker to settle the writes of unknown outcome from what the members
        persisted."""
        with self.lock:
            dirs = [os.path.join(i.data_dir, "data") for i in self.instances.values()]
        return [d for d in dirs if os.path.isdir(os.path.join(d, "member", "wal"))]

    def kill_instance(self, iid: str):
        with self.lock:
            inst = self.instances.get(iid)
            if inst and inst.proc is not None:
                procs.stop(inst.proc, kill=True)
                inst.proc = None

    def cut_off(self, iid: str):
        """A context in which only clients cannot reach `iid`'s etcd (its client port, as a route
        or an ACL would): its peers (2380) and the load balancer's health check (2381) still
        can. An nftables table of the simulation's own, removed on the way out."""
        address = self.instances[iid].address
        table = f"etcdsim_{address.replace('.', '_')}"
        sim = self

        class _CutOff:
            def __enter__(self):
                script = (f"add table inet {table}\n"
                          f"add chain inet {table} out {{ type filter hook output priority 0 ; }}\n"
                          f"add rule inet {table} out ip daddr {address} tcp dport 2379 reject with tcp reset\n")
                subprocess.run([NFT, "-f", "-"], input=script, text=True, check=True, capture_output=True)
                sim._cut_tables.add(table)
                return self

            def __exit__(self, *exc):
                subprocess.run([NFT, "delete", "table", "inet", table], capture_output=True)
                sim._cut_tables.discard(table)

        return _CutOff()

    def pause_instance(self, iid: str):
        procs.pause(self.instances[iid].proc)

    def resume_instance(self, iid: str):
        procs.resume(self.instances[iid].proc)

    def client_url(self, iid: str) -> str:
        return f"{self.scheme}://{self.instances[iid].address}:2379"

    def running_client_urls(self) -> list[str]:
        with self.lock:
            return [f"{self.scheme}://{i.address}:2379" for i in self.instances.values()
                    if i.proc is not None and i.proc.poll() is None]

    # --- observation and checks ---------------------------------------------------------------

    def member_list(self) -> tuple[int, list[dict]] | None:
        # A second pass with more patience: on a loaded machine (end-to-end tests side by side)
        # one second can pass before a member answers, which is not a problem of the cluster.
        for timeout in (1.0, 3.0):
            for url in self.running_client_urls():
                try:
                    cid, members = etcd.members(url, timeout=timeout)
                    if any(m.get("isLearner") and url in m.get("clientURLs", []) for m in members):
                        continue
                    return cid, members
                except etcd.EtcdError:
                    continue
        return None

    def cluster_version(self) -> str | None:
        """The cluster version (``etcdcluster`` of ``GET /version``) the first running member that
        knows one reports."""
        for url in self.running_client_urls():
            try:
                found = etcd.versions(url).get("etcdcluster")
            except etcd.EtcdError:
                continue
            if found and found != "not_decided":
                return found
        return None

    def leader_id(self) -> int | None:
        """The leader's member id, as the first running member that knows one sees it."""
        for url in self.running_client_urls():
            try:
                lead = int(etcd.status(url).get("leader", 0))
            except etcd.EtcdError:
                continue
            if lead:
                return lead
        return None

    def leader(self) -> str | None:
        """The instance id of the current leader."""
        listed = self.member_list()
        lead = self.leader_id()
        names = {int(m["ID"]): m.get("name", "") for m in listed[1]} if listed else {}
        return names.get(lead) or None

    def problems(self, desired: int | None = None) -> list[str]:
        found = []
        group = self.describe_group()
        instances = group["Instances"]
        want = group["DesiredCapacity"] if desired is None else desired
        if len(instances) != want:
            found.append(f"group has {len(instances)} instances, desired {want}")
        for i in instances:
            if i["LifecycleState"] != "InService":
                found.append(f"{i['InstanceId']} is {i['LifecycleState']}")
        listed = self.member_list()
        if listed is None:
            return found + ["no member answers"]
        cid, members = listed
        if self.cluster_id is None:
            self.cluster_id = cid
        elif cid != self.cluster_id:
            found.append(f"cluster id changed from {self.cluster_id:x} to {cid:x}")
        names = sorted(m.get("name", "") for m in members)
        ids = sorted(i["InstanceId"] for i in instances)
        if names != ids:
            found.append(f"members {names} != instances {ids}")
        for m in members:
            if m.get("isLearner"):
                found.append(f"learner {int(m['ID']):x} ({m.get('name') or 'unstarted'}) left")
        params = self.parameters()
        if f"{self.prefix}/cluster" not in params:
            found.append("no cluster record")
        configs = sorted(k.rsplit("/", 1)[1] for k in params if k.startswith(f"{self.prefix}/members/"))
        if configs != ids:
            found.append(f"published configs {configs} != instances {ids}")
        return found

    def wait_converged(self, desired: int | None = None, timeout: float = 120.0, label: str = "") -> float:
        """Wait until the member set equals the group's live instances and nothing is held."""
        began = time.monotonic()
        last_report = began
        while True:
            found = self.problems(desired)
            if not found:
                if self._history_pending:
                    self.start_history()
                return time.monotonic() - began
            now = time.monotonic()
            if now - began > timeout:
                raise NotConverged(f"{label}: not converged after {timeout:.0f}s: {found}\n{self.table()}")
            if self.verbose and now - last_report > 5:
                print(f"    … {label} {now - began:.0f}s: {found[0]}" + (f" (+{len(found) - 1})" if len(found) > 1 else ""),
                      flush=True)
                last_report = now
            time.sleep(0.3)

    def backups(self) -> list[dict]:
        """Complete backups in the bucket (their manifest written), oldest first, with the
        manifest's fields and the key."""
        if not self.backup_bucket:
            return []
        keys = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.backup_bucket):
            keys += [o["Key"] for o in page.get("Contents", [])]
        out = []
        for key in sorted(k for k in keys if k.endswith(".db") and f"{k}.json" in keys):
            try:
                body = self.s3.get_object(Bucket=self.backup_bucket, Key=f"{key}.json")["Body"].read()
            except self.s3.exceptions.NoSuchKey:
                continue  # pruned between the listing and now
            out.append({**json.loads(body), "key": key})
        return sorted(out, key=lambda b: (b["taken_at"], b["revision"]))

    def cli(self, *args: str, timeout: float = 60, extra_env: dict | None = None) -> subprocess.CompletedProcess:
        """Runs the operator CLI (``etcd-asg``, built beside the function) with the function's
        settings and emulated AWS."""
        binary = os.path.join(os.path.dirname(self.binary), "etcd-asg")
        env = {k: v for k, v in self.function.env.items() if not k.startswith(("AWS_LAMBDA", "RUST_LOG"))}
        env.update(extra_env or {})
        return subprocess.run([binary, *args], env=env, capture_output=True, text=True, timeout=timeout)

    def etcdctl(self, url: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        """etcdctl (gRPC) at `url` as root, with the CLI's root certificate once TLS is on."""
        ctl = os.path.join(os.path.dirname(self.etcd_bin), "etcdctl")
        cmd = [ctl, "--endpoints", url, "--command-timeout", "5s"]
        if self.tls:
            c = self.client_cert_dir
            cmd += ["--cacert", f"{c}/ca.crt", "--cert", f"{c}/root.crt", "--key", f"{c}/root.key"]
        return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout,
                              env={"ETCDCTL_API": "3"})

    def status_table(self) -> str:
        """What an operator sees: ``etcd-asg status``."""
        r = self.cli("status")
        return r.stdout if r.returncode == 0 else f"etcd-asg status failed: {r.stderr.strip()}"

    def table(self) -> str:
        listed = self.member_list()
        members = {}
        if listed:
            for m in listed[1]:
                for u in m.get("peerURLs", []):
                    members[u] = m
        lead = self.leader_id()
        rows = []
        for i in sorted(self.group_instances(), key=lambda i: i["InstanceId"]):
            iid = i["InstanceId"]
            addr = self.instances[iid].address if iid in self.instances else "-"
            m = members.get(f"{self.scheme}://{addr}:2380")
            if m is None:
                mid, role = "-", "-"
            else:
                mid = f"{int(m['ID']):x}"
                role = "learner" if m.get("isLearner") else ("leader" if int(m["ID"]) == lead else "voter")
            try:
                etcd.status(f"{self.scheme}://{addr}:2379", timeout=0.5)
                healthy = "yes"
            except etcd.EtcdError:
                healthy = "no"
            rows.append((iid, i["LifecycleState"], addr, mid, role, healthy))
        head = ("instance", "lifecycle", "address", "member id", "role", "healthy")
        widths = [max(len(str(r[c])) for r in rows + [head]) for c in range(len(head))]
        fmt = "  ".join(f"{{:<{w}}}" for w in widths)
        return "\n".join(["  " + fmt.format(*head)] + ["  " + fmt.format(*r) for r in rows])

    def start_writer(self, history_through_restore: bool = False, history: bool = True):
        """The writer, and a client history recorded alongside (unless SIM_HISTORY=0, or
        `history` is False: the test starts it later with `start_history`): checked when the
        writer stops, or, `history_through_restore`, when the test says which restores it went
        through (`verify_history`)."""
        if self.writer and not self.writer.is_alive():
            self.writer.start()
        self.history_through_restore = history_through_restore
        if history:
            self.start_history()

    def start_history(self):
        """The Go recorder (tests/history) through the load balancer, as an application: eight
        clientv3 clients (two pinned to members that run now) and two watches, under /history/,
        with a certificate of its own where TLS is on."""
        if self.recording is not None or os.environ.get("SIM_HISTORY", "1") == "0":
            return
        # Before the cluster exists (a writer started before the scale-up): once it converges.
        self._history_pending = self.member_list() is None
        if self._history_pending:
            return
        self.recording = history.Recording(self.workdir, self.client_endpoint, certs=self.history_certs(),
                                           members=self.running_client_urls()[:2], rate=50)
        # What the test does next is what the history is for: it starts once the recording has.
        self.recording.wait_ready()

    def history_certs(self) -> tuple[str, str, str] | None:
        """The recorder's certificate (ca, cert, key) where TLS is on, its etcd user granted
        /history/ (`etcd-asg client-cert`), made once. A test that restores from a backup makes
        it before that backup: the user is in etcd's data, which a restore takes back."""
        if not self.tls:
            return None
        out = os.path.join(self.workdir, "certs-history")
        # Tried again as an operator would: a test's fault layer refuses the CLI's calls too.
        for attempt in range(8):
            if os.path.exists(f"{out}/history.key"):
                break
            r = self.cli("client-cert", "history", "--prefix", "/history/", "--out", out)
            if r.returncode != 0:
                if attempt == 7:
                    raise RuntimeError(f"etcd-asg client-cert history failed: {r.stderr}")
                time.sleep(1)
        return (f"{out}/ca.crt", f"{out}/history.crt", f"{out}/history.key")

    def restores_declared(self) -> list[tuple[int, str]]:
        """Every restore this simulation's function made, oldest first: (the backup's revision,
        "backup"), from the restore fences (`<prefix>/restored/<fence>`, each the new record
        with the snapshot it came from)."""
        records = [json.loads(v) for k, v in self.parameters().items() if k.startswith(f"{self.prefix}/restored/")]
        records.sort(key=lambda r: r["created_at"])
        out = []
        for r in records:
            m = re.search(r"-rev(\d+)", r["restored_from"]["snapshot"]["key"])
            out.append((int(m.group(1)), "backup"))
        return out

    def verify_history(self, restores: list[tuple[int, str]] | None = None) -> dict:
        """Stops the recording and checks it (sim/history.py): the checker's summary; a
        violation, or a check that could not finish, fails with its witness. `restores` are
        the declared cuts; None: none unless the test started it `history_through_restore`,
        then every restore the function made."""
        rec, self.recording = self.recording, None
        if rec is None:
            raise AssertionError("no history is being recorded")
        if restores is None:
            restores = self.restores_declared() if self.history_through_restore else []
        self.history_summary = history.verified(rec.stop(), restores, label=self.group,
                                                wal_dirs=self.member_data_dirs())
        s = self.history_summary
        history.note(s, etcd.version_of(self.etcd_bin))
        print(f"history: {s['ops']} operations ({s['failed']} failed, {s['unresolved_writes']} of unknown outcome), "
              f"{s['watch_events']} watch events, {s['watch_compacted']} watches compacted; linearizable, "
              f"watches as promised; longest without success {s['longest_without_success_ms']} ms; "
              f"restores {s.get('restores', [])}; members' logs {s.get('wal')}; checked in {s['check_ms']} ms")
        return s
