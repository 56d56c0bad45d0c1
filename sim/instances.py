"""Simulation's instances: each of the group's instances booted as EC2 would start it (an address,
its tags, the boot script or the launch template's user data, a data directory), and what a test
does to one (kill, pause and resume, cut off from clients).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from . import etcd, procs

# nftables' command: in /usr/sbin, which a PATH for unprivileged users may leave out.
NFT = shutil.which("nft") or "/usr/sbin/nft"
STRACE = shutil.which("strace") or "/usr/bin/strace"
BOOT_SCRIPT = Path(__file__).resolve().parent.parent / "boot" / "etcd-boot.sh"
ADDRESS_TAG = "etcd-address"
VERSION_TAG = "etcd-asg-etcd-version"  # src/model/group.rs VERSION_TAG


@dataclass
class SimInstance:
    id: str
    address: str
    data_dir: str
    proc: subprocess.Popen | None = None
    etcd_bin: str | None = None  # the etcd it booted with


class InstanceControl:
    """Simulation's instances, by id in ``self.instances`` (SimInstance), under ``self.lock``;
    the loop that boots the group's new instances and kills the terminated ones runs from
    Simulation.start (sim/world.py)."""

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
        # The etcd of its launch: a refresh's instance runs the refresh's (sim/aws_side.py).
        etcd_bin = self.launch_bin(iid)
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

    def etcd_pid(self, iid: str) -> int | None:
        """The PID of the etcd an instance's boot script runs (in the script's process group)."""
        inst = self.instances.get(iid)
        if inst is None or inst.proc is None or inst.proc.poll() is not None:
            return None
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            comm, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
            if comm == "etcd" and int(rest[2]) == inst.proc.pid:  # state, ppid, pgrp
                return int(entry)
        return None

    def slow_disk(self, iid: str, delay_ms: int) -> subprocess.Popen | None:
        """A slow disk under an instance's etcd: each of its fsync and fdatasync calls (its WAL's
        and its backend's commits) held `delay_ms` before it runs, by strace's syscall delay
        injection (strace(1), `-e inject=…:delay_enter=`), until the returned tracer is stopped
        (procs.stop: strace detaches on SIGTERM). Attached by PID, strace cannot filter with
        seccomp-bpf, so every system call of that etcd stops under ptrace too: a slow disk on a
        slow host. None: no etcd runs there."""
        pid = self.etcd_pid(iid)
        if pid is None:
            return None
        argv = [STRACE, "-f", "-qq", "-o", "/dev/null", "-e", "trace=fsync,fdatasync",
                "-e", f"inject=fsync,fdatasync:delay_enter={delay_ms * 1000}", "-p", str(pid)]
        return procs.spawn(argv, {"PATH": "/usr/bin:/bin"}, os.path.join(self.workdir, f"slow-{iid}.log"))

    def client_url(self, iid: str) -> str:
        return f"{self.scheme}://{self.instances[iid].address}:2379"

    def running_client_urls(self) -> list[str]:
        with self.lock:
            return [f"{self.scheme}://{i.address}:2379" for i in self.instances.values()
                    if i.proc is not None and i.proc.poll() is None]
