"""An etcd cluster that ran before the stack, outside any group (plain HTTP, on loopback
addresses of its own): what `ADOPT_ENDPOINTS` adopts (docs/adopting.md), started as a team's
boot scripts would have started it (static `--initial-cluster`, names of their own)."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import tempfile
import time

from sim import etcd, procs


def free(address: str) -> bool:
    """Whether etcd's two ports are free on `address`."""
    for port in (2379, 2380):
        with socket.socket() as s:
            try:
                s.bind((address, port))
            except OSError:
                return False
    return True


class OutsideCluster:
    """`n` members `old-1`…`old-n` of one cluster; each stopped and started by its PID."""

    def __init__(self, n: int = 3, etcd_bin: str | None = None):
        self.etcd_bin = etcd_bin or etcd.binary()
        self.workdir = tempfile.mkdtemp(prefix="outside-")
        for _ in range(50):
            net = f"127.{random.randint(150, 250)}.{random.randint(1, 250)}"
            self.addresses = [f"{net}.{k}" for k in range(200, 200 + n)]
            if all(free(a) for a in self.addresses):
                break
        self.initial = ",".join(f"old-{k}=http://{a}:2380" for k, a in enumerate(self.addresses, 1))
        self.token = f"outside-{os.getpid()}-{random.randint(0, 1 << 30)}"
        self.procs: dict[int, subprocess.Popen] = {}
        for k in range(1, n + 1):
            self.start(k)
        deadline = time.monotonic() + 60
        while True:
            try:
                etcd.put(self.url(1), "/outside/ready", "1", timeout=2)
                break
            except etcd.EtcdError:
                assert time.monotonic() < deadline, f"the outside cluster did not start; see {self.workdir}"
                time.sleep(0.3)

    def url(self, k: int) -> str:
        return f"http://{self.addresses[k - 1]}:2379"

    def endpoints(self) -> str:
        """ADOPT_ENDPOINTS: every member's client URL, comma-separated."""
        return ",".join(self.url(k) for k in range(1, len(self.addresses) + 1))

    def start(self, k: int):
        """Member k, on its data (`new` the first time: its data directory is then empty)."""
        a = self.addresses[k - 1]
        data = os.path.join(self.workdir, f"old-{k}")
        os.makedirs(data, mode=0o700, exist_ok=True)
        argv = [self.etcd_bin, "--name", f"old-{k}", "--data-dir", data,
                "--listen-client-urls", f"http://{a}:2379", "--advertise-client-urls", f"http://{a}:2379",
                "--listen-peer-urls", f"http://{a}:2380", "--initial-advertise-peer-urls", f"http://{a}:2380",
                "--initial-cluster", self.initial, "--initial-cluster-token", self.token,
                "--initial-cluster-state", "new", "--unsafe-no-fsync"]
        self.procs[k] = procs.spawn(argv, {"PATH": "/usr/bin:/bin"}, os.path.join(self.workdir, f"old-{k}.log"))

    def stop(self, k: int):
        procs.stop(self.procs[k], kill=True)

    def running(self, k: int) -> bool:
        return self.procs[k].poll() is None

    def etcdctl(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        ctl = os.path.join(os.path.dirname(self.etcd_bin), "etcdctl")
        return subprocess.run([ctl, "--endpoints", self.endpoints(), "--command-timeout", "5s", *args],
                              capture_output=True, text=True, timeout=timeout, env={})

    def cluster_id(self) -> int:
        return int(etcd.status(self.url(1))["header"]["cluster_id"])

    def close(self):
        for p in self.procs.values():
            procs.stop(p, kill=True)
        if os.environ.get("SIM_KEEP") != "1":
            shutil.rmtree(self.workdir, ignore_errors=True)
