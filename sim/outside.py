"""An etcd cluster that ran before the stack, outside any group (on loopback addresses of its
own): what `ADOPT_ENDPOINTS` adopts (docs/adopting.md), started as a team's boot scripts would
have started it (static `--initial-cluster`, names of their own). Plain HTTP, or mutual TLS with
a CA of its own (made here, as a team's cfssl or openssl would) and etcd's authentication on
(a `root` user with a password, etcd's default simple tokens, or JWTs: `use_jwt`)."""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

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


def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


class OwnCa:
    """The outside cluster's CA (ECDSA P-256, a subject of several parts as a team's would have),
    written as ca.crt and ca.key (PKCS#8) into `folder`, and what it issues there."""

    def __init__(self, folder: str):
        self.folder = folder
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Outside Team"),
                                  x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "platform"),
                                  x509.NameAttribute(NameOID.COMMON_NAME, "outside etcd CA")])
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(self.subject).issuer_name(self.subject)
                .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=365))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                               critical=True)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
                .sign(self.key, hashes.SHA256()))
        self.cert = cert
        self.cert_file = self._write("ca.crt", cert.public_bytes(serialization.Encoding.PEM))
        self.key_file = self._write("ca.key", _pem_key(self.key))

    def _write(self, name: str, data: bytes) -> str:
        path = os.path.join(self.folder, name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return path

    def issue(self, name: str, common_name: str, addresses: list[str] = (), server: bool = False) -> tuple[str, str]:
        """`name`.crt and `name`.key: a member's (server and client, its addresses as SANs) or a
        client's (`common_name` is its etcd user)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH] + ([ExtendedKeyUsageOID.SERVER_AUTH] if server else [])
        b = (x509.CertificateBuilder()
             .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
             .issuer_name(self.subject).public_key(key.public_key())
             .serial_number(x509.random_serial_number())
             .not_valid_before(now - datetime.timedelta(minutes=5))
             .not_valid_after(now + datetime.timedelta(days=30))
             .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
             .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                            critical=False))
        if addresses:
            b = b.add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]), critical=False)
        cert = b.sign(self.key, hashes.SHA256())
        return (self._write(f"{name}.crt", cert.public_bytes(serialization.Encoding.PEM)),
                self._write(f"{name}.key", _pem_key(key)))


class OutsideCluster:
    """`n` members `old-1`…`old-n` of one cluster; each stopped and started by its PID. With
    `tls`, mutual TLS from a CA of its own (`ca`), and with `root_password` too, authentication
    on: `root` logs in with that password (etcdctl here uses a `root` certificate of the CA)."""

    def __init__(self, n: int = 3, etcd_bin: str | None = None, tls: bool = False,
                 root_password: str | None = None):
        self.etcd_bin = etcd_bin or etcd.binary()
        self.workdir = tempfile.mkdtemp(prefix="outside-")
        self.scheme = "https" if tls else "http"
        self.ca = OwnCa(self.workdir) if tls else None
        for _ in range(50):
            net = f"127.{random.randint(150, 250)}.{random.randint(1, 250)}"
            self.addresses = [f"{net}.{k}" for k in range(200, 200 + n)]
            if all(free(a) for a in self.addresses):
                break
        if self.ca:
            # On loopback a peer connects from 127.0.0.1, which etcd checks its certificate
            # against: members carry it too (as the stack's members do in the simulation).
            self.certs = {k: self.ca.issue(f"old-{k}", f"old-{k}", [a, "127.0.0.1"], server=True)
                          for k, a in enumerate(self.addresses, 1)}
            self.root_cert = self.ca.issue("root", "root")
        self.initial = ",".join(f"old-{k}={self.scheme}://{a}:2380" for k, a in enumerate(self.addresses, 1))
        self.token = f"outside-{os.getpid()}-{random.randint(0, 1 << 30)}"
        self.procs: dict[int, subprocess.Popen] = {}
        self.auth_token: list[str] = []  # etcd's default: simple tokens
        for k in range(1, n + 1):
            self.start(k)
        deadline = time.monotonic() + 60
        while self.put("/outside/ready", "1").returncode != 0:
            assert time.monotonic() < deadline, f"the outside cluster did not start; see {self.workdir}"
            time.sleep(0.3)
        if root_password:
            for args in (["user", "add", "root", "--new-user-password", root_password], ["auth", "enable"]):
                r = self.etcdctl(*args)
                assert r.returncode == 0, r.stderr

    def url(self, k: int) -> str:
        return f"{self.scheme}://{self.addresses[k - 1]}:2379"

    def put(self, key: str, value: str) -> subprocess.CompletedProcess:
        return self.etcdctl("put", key, value)

    def grant(self, user: str, prefix: str) -> tuple[str, str]:
        """A user of the cluster's own kind: `user` reads and writes `prefix`, and a client
        certificate of the cluster's CA names it (etcd takes the user from its common name)."""
        for args in (["user", "add", user, "--no-password"], ["role", "add", user],
                     ["role", "grant-permission", user, "readwrite", prefix, "--prefix"],
                     ["user", "grant-role", user, user]):
            r = self.etcdctl(*args)
            assert r.returncode == 0, r.stderr
        return self.ca.issue(user, user)

    def endpoints(self) -> str:
        """ADOPT_ENDPOINTS: every member's client URL, comma-separated."""
        return ",".join(self.url(k) for k in range(1, len(self.addresses) + 1))

    def start(self, k: int):
        """Member k, on its data (`new` the first time: its data directory is then empty)."""
        a = self.addresses[k - 1]
        data = os.path.join(self.workdir, f"old-{k}")
        os.makedirs(data, mode=0o700, exist_ok=True)
        s = self.scheme
        argv = [self.etcd_bin, "--name", f"old-{k}", "--data-dir", data,
                "--listen-client-urls", f"{s}://{a}:2379", "--advertise-client-urls", f"{s}://{a}:2379",
                "--listen-peer-urls", f"{s}://{a}:2380", "--initial-advertise-peer-urls", f"{s}://{a}:2380",
                "--initial-cluster", self.initial, "--initial-cluster-token", self.token,
                "--initial-cluster-state", "new", "--unsafe-no-fsync", *self.auth_token]
        if self.ca:
            cert, key = self.certs[k]
            argv += ["--cert-file", cert, "--key-file", key, "--client-cert-auth",
                     "--trusted-ca-file", self.ca.cert_file,
                     "--peer-cert-file", cert, "--peer-key-file", key, "--peer-client-cert-auth",
                     "--peer-trusted-ca-file", self.ca.cert_file]
        self.procs[k] = procs.spawn(argv, {"PATH": "/usr/bin:/bin"}, os.path.join(self.workdir, f"old-{k}.log"))

    def stop(self, k: int):
        procs.stop(self.procs[k], kill=True)

    def use_jwt(self):
        """What docs/adopting.md asks of a cluster with authentication on and simple tokens before
        an adoption with TLS: its members restarted one at a time with `--auth-token jwt`, keys of
        the team's own (ES256), each back and healthy before the next."""
        key = ec.generate_private_key(ec.SECP256R1())
        priv, pub = (os.path.join(self.workdir, f"jwt.{n}") for n in ("key", "pub"))
        with open(os.open(priv, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
            f.write(_pem_key(key))
        with open(pub, "wb") as f:
            f.write(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                  serialization.PublicFormat.SubjectPublicKeyInfo))
        self.auth_token = ["--auth-token", f"jwt,pub-key={pub},priv-key={priv},sign-method=ES256,ttl=10m"]
        for k in range(1, len(self.addresses) + 1):
            self.stop(k)
            self.start(k)
            deadline = time.monotonic() + 60
            while self.etcdctl("endpoint", "health", endpoints=self.url(k)).returncode != 0:
                assert time.monotonic() < deadline, f"old-{k} did not come back; see {self.workdir}"
                time.sleep(0.3)

    def running(self, k: int) -> bool:
        return self.procs[k].poll() is None

    def etcdctl(self, *args: str, timeout: float = 30, endpoints: str | None = None) -> subprocess.CompletedProcess:
        """etcdctl as root (with TLS: the CA's `root` certificate) at every member, or at
        `endpoints`."""
        ctl = os.path.join(os.path.dirname(self.etcd_bin), "etcdctl")
        creds = []
        if self.ca:
            creds = ["--cacert", self.ca.cert_file, "--cert", self.root_cert[0], "--key", self.root_cert[1]]
        return subprocess.run([ctl, "--endpoints", endpoints or self.endpoints(), "--command-timeout", "5s", *creds,
                               *args],
                              capture_output=True, text=True, timeout=timeout, env={})

    def cluster_id(self) -> int:
        r = self.etcdctl("member", "list", "-w", "json")
        assert r.returncode == 0, r.stderr
        return int(json.loads(r.stdout)["header"]["cluster_id"])

    def close(self):
        for p in self.procs.values():
            procs.stop(p, kill=True)
        if os.environ.get("SIM_KEEP") != "1":
            shutil.rmtree(self.workdir, ignore_errors=True)
