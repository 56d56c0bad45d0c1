"""Just enough of etcd's v3 JSON gateway for checks and the writer."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request


class EtcdError(Exception):
    pass


def call(client_url: str, path: str, body: dict, timeout: float = 1.0) -> dict:
    req = urllib.request.Request(
        f"{client_url}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        raise EtcdError(f"{client_url}{path}: HTTP {e.code} {e.read()[:200]!r}") from None
    except (OSError, ValueError) as e:
        raise EtcdError(f"{client_url}{path}: {e}") from None


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
