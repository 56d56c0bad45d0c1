"""Which etcd binary to run, and just enough of etcd's v3 JSON gateway for checks and the writer.

The etcd versions at hand (`make deps` provides them all):

- 3.5, 3.6, 3.7: built from etcd's own Go modules by ``tools/build-etcd.sh`` (pinned by
  ``tools/etcd/<minor>/go.mod`` and ``go.sum``) into ``$CACHE/etcd-<minor>/bin``, with
  ``etcdctl`` and ``etcdutl`` beside ``etcd``;
- 3.4: Debian's ``etcd-server`` package (bookworm, 3.4.23), ``/usr/bin/etcd``: the first leg of
  the upgrade chain only;
- 3.5.30: Debian's ``sid`` packages, unpacked by ``tools/install-etcd.sh``: a 3.5 below etcd's
  floor for leaving 3.5 (3.5.32), for the upgrade chain's version gate.

``ETCD_VERSION`` (default 3.6, the stack's) picks the simulation's; ``python -m sim.etcd 3.7``
prints a version's path (the Makefile hands it to the Rust adapter tests as ``ETCD_BIN``).
"""

from __future__ import annotations

import base64
import functools
import http.client
import json
import os
import re
import ssl
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

VERSIONS = ("3.4", "3.5.30", "3.5", "3.6", "3.7")
DEFAULT_VERSION = "3.6"
CACHE = os.environ.get("CACHE", "/var/tmp/etcd-asg-lifecycle")
# The exact releases the tests are pinned to (tools/etcd/*/go.mod, the Makefile's Debian pins).
EXACT = {"3.4": "3.4.23", "3.5.30": "3.5.30", "3.5": "3.5.36", "3.6": "3.6.17", "3.7": "3.7.4"}


def binary(version: str | None = None) -> str:
    """The path of etcd `version` (default: ``ETCD_VERSION``, else 3.6), checked to be that version."""
    version = version or os.environ.get("ETCD_VERSION") or DEFAULT_VERSION
    if version == "3.4":
        path, install = "/usr/bin/etcd", "apt-get install etcd-server (make deps)"
    elif version == "3.5.30":
        path = os.environ.get("ETCD35_BIN") or f"{CACHE}/etcd-3.5.30-2/usr/bin/etcd"
        install = "make etcd35 (tools/install-etcd.sh; part of make deps)"
    elif version in VERSIONS:
        path = f"{os.environ.get('ETCD_BUILDS') or CACHE}/etcd-{version}/bin/etcd"
        install = f"make etcd-builds (tools/build-etcd.sh {version}; part of make deps)"
    else:
        raise ValueError(f"ETCD_VERSION must be one of {', '.join(VERSIONS)}, not {version!r}")
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"etcd {version}: {path} is missing; {install}")
    found = version_of(path)
    if found != EXACT[version]:
        raise RuntimeError(f"etcd {version}: {path} is etcd {found}, the tests want {EXACT[version]}")
    return path


def minor(version: str | None = None) -> str:
    """The minor of the simulation's etcd (``3.6`` for ETCD_VERSION 3.6)."""
    return ".".join(EXACT[version or os.environ.get("ETCD_VERSION") or DEFAULT_VERSION].split(".")[:2])


@functools.lru_cache(maxsize=None)
def version_of(path: str) -> str:
    """The server version an etcd binary reports (``etcd --version``), e.g. ``3.5.30``."""
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10).stdout
    m = re.search(r"etcd Version:\s*(\S+)", out)
    if not m:
        raise RuntimeError(f"{path} --version said {out!r}")
    return m.group(1)


class EtcdError(Exception):
    pass


@dataclass
class Credentials:
    """What https:// calls to one simulation's members present: its CA trusted, a client
    certificate, the token they carry once etcd authentication is on (sim/pki.py), and reads
    through etcdctl with a root certificate (a gateway read demands a token of the auth store's
    exact revision, which root tokens do not carry, and etcd 3.4 cannot tell; over gRPC etcd
    takes the user, root, from the certificate instead)."""

    tls: ssl.SSLContext
    token: object = None
    reader: list[str] | None = None


# By simulation: each has a loopback network of its own (127.x.y.0/24), and a process may run
# several at once (a module-long one beside a test's own).
_credentials: dict[str, Credentials] = {}


def network(host: str) -> str:
    """`127.12.34` of `127.12.34.5`: the simulation a host belongs to."""
    return host.rsplit(".", 1)[0]


def use_tls(network_of: str, ca: str | None, cert: str | None = None, key: str | None = None,
            token=None, reader: list[str] | None = None) -> None:
    """From now on, https:// calls to hosts of the simulation `network_of` (a host or the
    network) trust `ca`, present `cert`/`key`, carry `token()` and read through `reader`;
    `ca` None: forget them."""
    net = network(network_of) if network_of.count(".") == 3 else network_of
    if ca is None:
        _credentials.pop(net, None)
        return
    ctx = ssl.create_default_context(cafile=ca)
    if cert:
        ctx.load_cert_chain(cert, key)
    _credentials[net] = Credentials(ctx, token, reader)


def _for(client_url: str) -> Credentials | None:
    """The credentials of the simulation `client_url` is in, for https:// (None for http)."""
    url = urllib.parse.urlsplit(client_url)
    if url.scheme != "https" or not url.hostname:
        return None
    return _credentials.get(network(url.hostname))


def _read(client_url: str, body: dict, timeout: float, reader: list[str]) -> dict:
    """A /v3/kv/range through etcdctl (`Credentials.reader`): the same answer, as etcdctl -w
    json gives it."""
    if set(body) - {"key", "range_end", "keys_only"}:
        raise ValueError(f"etcdctl reads support key, range_end, keys_only, not {sorted(body)}")
    args = [*reader, "--endpoints", client_url, "--command-timeout", f"{max(timeout, 1.0)}s",
            "-w", "json", "get", base64.b64decode(body["key"]).decode()]
    if "range_end" in body:
        args.append(base64.b64decode(body["range_end"]).decode())
    if body.get("keys_only"):
        args.append("--keys-only")
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=timeout + 10,
                           env={"ETCDCTL_API": "3"})
    except subprocess.TimeoutExpired:
        raise EtcdError(f"{client_url} etcdctl get: timed out") from None
    if r.returncode != 0:
        raise EtcdError(f"{client_url} etcdctl get: {r.stderr.strip()[:200]}")
    return json.loads(r.stdout)


def call(client_url: str, path: str, body: dict, timeout: float = 1.0) -> dict:
    creds = _for(client_url)
    context = creds.tls if creds else None
    if creds is not None and creds.reader is not None and path == "/v3/kv/range":
        return _read(client_url, body, timeout, creds.reader)
    headers = {"Content-Type": "application/json"}
    if creds is not None and creds.token is not None:
        headers["Authorization"] = creds.token()
    req = urllib.request.Request(
        f"{client_url}{path}",
        data=json.dumps(body).encode(),
        headers=headers,
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as r:
            return json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        raise EtcdError(f"{client_url}{path}: HTTP {e.code} {e.read()[:200]!r}") from None
    except (OSError, ValueError) as e:
        raise EtcdError(f"{client_url}{path}: {e}") from None


class Connection:
    """One kept-open HTTP connection to `client_url` (the load balancer's endpoint), as a gRPC
    client keeps one: it stays on the member the balancer picked until that member stops
    answering, then the next call opens a new one (and the balancer picks again)."""

    def __init__(self, client_url: str):
        self.url = urllib.parse.urlsplit(client_url)
        self.conn: http.client.HTTPConnection | None = None

    def put(self, key: str, value: str, timeout: float = 1.0) -> None:
        self.call("/v3/kv/put", {"key": b64(key), "value": b64(value)}, timeout)

    def call(self, path: str, body: dict, timeout: float = 1.0) -> dict:
        https = self.url.scheme == "https"
        creds = _for(self.url.geturl())
        headers = {"Content-Type": "application/json"}
        if creds is not None and creds.token is not None:
            headers["Authorization"] = creds.token()
        try:
            if self.conn is None:
                if https:
                    self.conn = http.client.HTTPSConnection(self.url.hostname, self.url.port, timeout=timeout,
                                                            context=creds.tls if creds else None)
                else:
                    self.conn = http.client.HTTPConnection(self.url.hostname, self.url.port, timeout=timeout)
            if self.conn.sock is not None:
                self.conn.sock.settimeout(timeout)
            self.conn.request("POST", path, json.dumps(body), headers)
            r = self.conn.getresponse()
            data = r.read()
            if r.status != 200:
                raise EtcdError(f"{self.url.netloc}{path}: HTTP {r.status} {data[:200]!r}")
            return json.loads(data or b"{}")
        except EtcdError:
            self.close()
            raise
        except (OSError, ValueError, http.client.HTTPException) as e:
            self.close()
            raise EtcdError(f"{self.url.netloc}{path}: {e!r}") from None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def open_snapshot(client_url: str, timeout: float = 5.0):
    """A snapshot stream of the member at `client_url`, its first bytes read and the rest left
    unread: etcd holds the stream's read transaction open (and with it every page it can see)
    until the response is closed. Close it when done."""
    creds = _for(client_url)
    headers = {"Content-Type": "application/json"}
    if creds is not None and creds.token is not None:
        headers["Authorization"] = creds.token()
    req = urllib.request.Request(f"{client_url}/v3/maintenance/snapshot", data=b"{}", headers=headers,
                                 method="POST")
    try:
        r = urllib.request.urlopen(req, timeout=timeout, context=creds.tls if creds else None)
        r.read(1024)
    except (OSError, ValueError) as e:
        raise EtcdError(f"{client_url} snapshot: {e}") from None
    return r


def b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def members(client_url: str, timeout: float = 1.0) -> tuple[int, list[dict]]:
    r = call(client_url, "/v3/cluster/member/list", {}, timeout)
    return int(r["header"]["cluster_id"]), r.get("members", [])


def status(client_url: str, timeout: float = 0.5) -> dict:
    return call(client_url, "/v3/maintenance/status", {}, timeout)


def put(client_url: str, key: str, value: str, timeout: float = 1.0) -> None:
    call(client_url, "/v3/kv/put", {"key": b64(key), "value": b64(value)}, timeout)


def keys_with_prefix(client_url: str, prefix: str, timeout: float = 5.0) -> set[str]:
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    r = call(
        client_url,
        "/v3/kv/range",
        {"key": b64(prefix), "range_end": b64(end), "keys_only": True},
        timeout,
    )
    return {base64.b64decode(kv["key"]).decode() for kv in r.get("kvs", [])}


def versions(client_url: str, timeout: float = 1.0) -> dict:
    """``GET /version``: this member's server version and the cluster version it sees,
    ``{"etcdserver": "3.5.30", "etcdcluster": "3.5.0"}``."""
    try:
        creds = _for(client_url)
        context = creds.tls if creds else None
        with urllib.request.urlopen(f"{client_url}/version", timeout=timeout, context=context) as r:
            return json.loads(r.read())
    except (OSError, ValueError) as e:
        raise EtcdError(f"{client_url}/version: {e}") from None


if __name__ == "__main__":
    try:
        print(binary(sys.argv[1] if len(sys.argv) > 1 else None))
    except (OSError, ValueError, RuntimeError) as e:
        sys.exit(f"sim.etcd: {e}")
