"""One simulated deployment: emulated AWS, the real function, real etcd instances, a writer.

Everything binds to loopback. Every process started here is stopped here, by PID.

Simulation is the wiring: its settings, starting and stopping everything. What it does once
running is in mixins it inherits, one concern each: the instances (sim/instances.py), the probes
of the cluster (sim/probes.py), the AWS side (sim/aws_side.py), the writer and the client history
(sim/writes.py); the event delivery is sim/delivery.py. Their public names are importable from
here as before.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import boto3

from . import etcd, history, pki, procs, warm_aws
from .aws_side import AwsSide
from .delivery import Chaos, Delivery, scheduled_event
from .instances import ADDRESS_TAG, BOOT_SCRIPT, NFT, VERSION_TAG, InstanceControl, SimInstance
from .probes import ClusterProbes, NotConverged
from .runtime import Function
from .writes import ClientHistory, Writer

__all__ = ["ADDRESS_TAG", "BOOT_SCRIPT", "CREDENTIALS", "NFT", "ROOT", "VERSION_TAG", "Chaos", "Delivery",
           "Deployment", "NotConverged", "SimInstance", "Simulation", "Writer", "default_binary",
           "scheduled_event"]

ROOT = Path(__file__).resolve().parent.parent
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


class Simulation(InstanceControl, ClusterProbes, AwsSide, ClientHistory):
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
        # Instance refresh (sim/aws_side.py): the etcd of each configuration generation a refresh
        # brought, and the etcd the group ran when the last refresh started (a rollback's).
        self.launch_bins: dict[int, str] = {}
        self.refresh_from: str | None = None
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
