"""The emulator's WSGI application: moto behind the fault layer (sim/faults.py), one request at
a time under the lock, and the routes for the simulation only (EventBridge does not exist here):

  GET /_sim/events      drain the EventBridge events produced so far (JSON list)
  GET /_sim/terminated  drain the ids of instances whose termination finished (JSON list)
  GET /_sim/requests    drain the count of API calls made by the Rust SDK (the function), by action
  GET /_sim/request-log drain the same calls one by one: [[epoch seconds, action], ...]
  GET /_sim/health      drain the SetInstanceHealth calls so far (JSON list of
                        {"InstanceId", "HealthStatus", "ShouldRespectGracePeriod", "sdk", "error"})
  GET /_sim/lapsed      drain the held actions whose heartbeat timeout passed (JSON list of
                        {"InstanceId", "Hook", "Result", "Global"}: the hook's DefaultResult
                        applied; Global: at the action's global timeout)
  POST /_sim/zones      zones whose launches fail, one AZRebalance step, the global timeout's cap
  GET /_sim/launch-failures drain the launches no zone could take
  GET /_sim/holds       drain the held actions that ended: {"InstanceId", "Hook", "HeartbeatTimeout",
                        "Started", "Beats" (each heartbeat's epoch seconds), "Ended", "Result", "Lapsed"}
  GET /_sim/generations each launch's configuration generation, the groups' current ones and the
                        next refresh's (refresh.py; not drained)
  GET/POST /_sim/faults the fault layer in front of all of it (sim/faults.py)

S3's CompleteMultipartUpload answer gets S3's root element name (moto's differs; the Rust SDK
checks it).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import datetime, timezone

from moto.autoscaling import models as asg

from .. import faults
from . import lifecycle, refresh, zones

# The fault layer's state (sim/faults.py): rules set by tests over /_sim/faults.
FAULTS = faults.Faults()
SDK_REQUESTS: Counter = Counter()
SDK_LOG: list = []


def _count_sdk_request(environ):
    """Counts the function's own calls (the Rust SDK's), apart from the simulation's (boto3)."""
    if "aws-sdk-rust" not in environ.get("HTTP_USER_AGENT", ""):
        return
    op = environ.get("sim.operation")
    action = op[1] if op else faults.operation(environ)[1]
    SDK_REQUESTS[action] += 1
    SDK_LOG.append([time.time(), action])


FEEDS = {"/_sim/events": lambda: lifecycle.EVENTS, "/_sim/terminated": lambda: lifecycle.TERMINATED,
         "/_sim/health": lambda: lifecycle.HEALTH, "/_sim/lapsed": lambda: lifecycle.LAPSED,
         "/_sim/request-log": lambda: SDK_LOG, "/_sim/holds": lambda: lifecycle.HOLDS,
         "/_sim/launch-failures": lambda: zones.LAUNCH_FAILURES}


def _zones_route(environ, start_response):
    """POST /_sim/zones: {"impaired": [zone, ...]} (launches there fail), {"rebalance": group}
    (one AZRebalance step), {"global_timeout_cap": seconds}. Answers the group's zone counts
    for {"group": name}."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    spec = json.loads(environ["wsgi.input"].read(length) or b"{}")
    out = {}
    with lifecycle.LOCK:
        if "impaired" in spec:
            zones.ZONES_IMPAIRED.clear()
            zones.ZONES_IMPAIRED.update(spec["impaired"])
        if "global_timeout_cap" in spec:
            lifecycle.GLOBAL_TIMEOUT_CAP[0] = float(spec["global_timeout_cap"])
        if "global_timeout_scale" in spec:
            lifecycle.GLOBAL_TIMEOUT_SCALE[0] = float(spec["global_timeout_scale"])
        if "rebalance" in spec:
            out["launched"] = zones.rebalance(spec["rebalance"])
        name = spec.get("group") or spec.get("rebalance")
        if name:
            group = asg.autoscaling_backends[lifecycle.ACCOUNT][lifecycle.REGION].autoscaling_groups[name]
            out["zones"] = zones.zone_counts(group)
        out["impaired"] = sorted(zones.ZONES_IMPAIRED)
    start_response("200 OK", [("Content-Type", "application/json")])
    return [json.dumps(out).encode()]


def serve(inner, environ, start_response):
    """moto (or a feed of the simulation's), one request at a time under the lock."""
    path = environ.get("PATH_INFO", "")
    if path == "/_sim/zones":
        return _zones_route(environ, start_response)
    if path == "/_sim/generations":
        with lifecycle.LOCK:
            body = json.dumps(refresh.generations()).encode()
        start_response("200 OK", [("Content-Type", "application/json")])
        return [body]
    if path in FEEDS or path == "/_sim/requests":
        with lifecycle.LOCK:
            if path == "/_sim/requests":
                body = json.dumps(dict(SDK_REQUESTS)).encode()
                SDK_REQUESTS.clear()
            else:
                feed = FEEDS[path]()
                body = json.dumps(feed).encode()
                feed.clear()
        start_response("200 OK", [("Content-Type", "application/json")])
        return [body]
    with lifecycle.LOCK:
        _count_sdk_request(environ)
        if environ.get("REQUEST_METHOD") == "POST" and "uploadId=" in environ.get("QUERY_STRING", ""):
            return _complete_multipart_fixed(inner, environ, start_response)
        return list(inner(environ, start_response))


def _launched_at(instance_id):
    """When EC2 launched the instance (UTC), or None if it does not know it."""
    from moto.ec2.models import ec2_backends
    with lifecycle.LOCK:
        instance = ec2_backends[lifecycle.ACCOUNT][lifecycle.REGION].get_instance_by_id(instance_id)
        at = getattr(instance, "launch_time", None)
    if isinstance(at, str):
        at = datetime.fromisoformat(at.replace("Z", "+00:00"))
    if at is not None and at.tzinfo is None:
        at = at.replace(tzinfo=timezone.utc)
    return at


def app_with_lock(inner):
    """moto behind the fault layer (sim/faults.py), which does nothing until a test asks."""
    return faults.layer(inner, FAULTS, _launched_at, serve)


def _complete_multipart_fixed(inner, environ, start_response):
    """moto 5.2.1 answers CompleteMultipartUpload with the root element
    ``CompleteMultipartUploadResponse``; S3 (and the Rust SDK, which checks) uses
    ``CompleteMultipartUploadResult``. boto3 does not look at the root's name."""
    captured = {}

    def capture(status, headers, exc_info=None):
        captured["status"], captured["headers"] = status, headers

    body = b"".join(inner(environ, capture))
    body = body.replace(b"CompleteMultipartUploadResponse", b"CompleteMultipartUploadResult")
    headers = [(k, v) for k, v in captured["headers"] if k.lower() != "content-length"]
    headers.append(("Content-Length", str(len(body))))
    start_response(captured["status"], headers)
    return [body]
