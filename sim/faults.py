"""AWS as it really fails, between the function (and the operator CLI) and the emulator.

A WSGI layer that ``sim/emulator/routes.py`` puts in front of moto, so every simulation has it and
every test may turn it on while the simulation runs: ``POST /_sim/faults`` with a JSON object
(``Simulation.faults(...)``), ``GET /_sim/faults`` for what it did (``?clear=1`` drains it).
Nothing is faulted until a test asks. The facts it follows, with AWS's pages:
``shared/reference/aws-failures.md``.

    {"seed": 7,              every draw comes from one random.Random(seed): a run replays
     "rules": [              tried in order; the first that matches a call and wins its draw acts
        {"fault": "throttle", "service": "ssm", "rate": 1.0, "seconds": 180},
        {"fault": "refuse", "rate": 0.2},
        {"fault": "lose", "writes": true, "rate": 0.1}],
     "impaired": ["i-1"],    DescribeInstances fails whenever it names one of these, or names none
                             ("If you specify instance IDs that are in an affected zone, or do not
                             specify any instance IDs at all, the call fails": API_DescribeInstances)
     "unknown_for": 8,       DescribeInstances naming an instance launched less than 8 s ago fails
                             with InvalidInstanceID.NotFound (EC2's eventual consistency)
     "pid": 1234}            the function's process, which ``crash`` kills (Simulation keeps it set)

Faults, each in the service's own protocol (query XML for Auto Scaling and EC2, JSON 1.1 for SSM,
REST XML for S3):

- ``refuse``: not applied; 503 (Auto Scaling ``ServiceUnavailable``, EC2 ``Unavailable``, SSM
  ``InternalServerError``, S3 ``ServiceUnavailable``).
- ``throttle``: not applied; Auto Scaling's 400 ``Throttling``, EC2's 503 ``RequestLimitExceeded``,
  SSM's 400 ``ThrottlingException``, S3's 503 ``SlowDown``.
- ``lose``: applied, then a 500 in place of the answer (``InternalFailure``, ``InternalError``,
  ``InternalServerError``): the write is done, its caller does not know; the SDK retries it and
  meets its own first attempt.
- ``slow``: answered after ``delay`` seconds (default 3).
- ``hang``: never answered: the connection stays open, the request unanswered, until the rule's
  window ends (at most 600 s); then it is dropped.
- ``crash``: applied, then the function's process is killed (SIGKILL) before the answer goes
  back: a crash between two writes of one step. Only the function's own calls.

A rule matches on ``service`` (``autoscaling``, ``ec2``, ``ssm``, ``s3`` or ``*``), ``action`` (an
operation name, a list of them, or ``*``), ``writes`` (only calls that change something),
``clients`` (``rust``, the default: the function and the CLI; ``function``; ``cli``;
``instances``, the boot scripts' AWS CLI; ``*``), acts with chance ``rate`` (default 1), at most
``count`` times (absent: no limit), and lasts ``seconds`` from when it is set (for ever when
absent). Every fault is counted by ``service.Action.fault``, and every call by client.
"""

from __future__ import annotations

import io
import json
import os
import random
import re
import signal
import socket
import threading
import time
import uuid
from collections import Counter
from datetime import datetime, timezone
from urllib.parse import parse_qs

FAULTS = ("refuse", "throttle", "lose", "slow", "hang", "crash")
SERVICES = ("autoscaling", "ec2", "ssm", "s3")
HANG_MAX = 600.0
# Operations that change something: what `writes: true` and `crash` apply to.
WRITE = re.compile(r"^(Put|Delete|Create|Complete|Record|Set|Add|Upload|Abort|Remove|Update|Terminate|"
                   r"Detach|Attach|Start|Stop|Enter|Exit|Suspend|Resume)")
CREDENTIAL = re.compile(r"Credential=[^/]+/\d{8}/([^/]+)/([^/]+)/aws4_request")


def client_of(user_agent: str) -> str:
    """Whose call: the operator CLI (the Rust SDK with the app name ``etcd-asg-cli``), the function
    (the Rust SDK otherwise: it names itself ``etcd-asg-lifecycle``), an instance (the AWS CLI), or
    the simulation itself (boto3)."""
    if "aws-sdk-rust" in user_agent:
        return "cli" if "app/etcd-asg-cli" in user_agent else "function"
    if "aws-cli/" in user_agent:
        return "instances"
    return "sim"


# The S3 operations `s3_operation` names.
S3_OPERATIONS = {"ListObjectsV2", "ListObjects", "ListMultipartUploads", "GetObject", "GetObjectTagging", "HeadObject",
                 "HeadBucket", "UploadPart", "PutObjectTagging", "PutObject", "CreateBucket", "CreateMultipartUpload",
                 "CompleteMultipartUpload", "DeleteObjects", "PostObject", "AbortMultipartUpload", "DeleteObject",
                 "DeleteBucket"}


def s3_operation(method: str, query: dict, path: str) -> str:
    """The S3 operation a REST request is (path-style: ``/bucket/key``)."""
    has_key = path.strip("/").count("/") >= 1
    if method == "GET":
        if "list-type" in query or not has_key:
            return "ListObjectsV2" if "list-type" in query else ("ListMultipartUploads" if "uploads" in query
                                                                  else "ListObjects")
        return "GetObjectTagging" if "tagging" in query else "GetObject"
    if method == "HEAD":
        return "HeadObject" if has_key else "HeadBucket"
    if method == "PUT":
        if "partNumber" in query:
            return "UploadPart"
        if "tagging" in query:
            return "PutObjectTagging"
        return "PutObject" if has_key else "CreateBucket"
    if method == "POST":
        if "uploads" in query:
            return "CreateMultipartUpload"
        if "uploadId" in query:
            return "CompleteMultipartUpload"
        return "DeleteObjects" if "delete" in query else "PostObject"
    if method == "DELETE":
        if "uploadId" in query:
            return "AbortMultipartUpload"
        return "DeleteObject" if has_key else "DeleteBucket"
    return method


def operation(environ) -> tuple[str, str, dict]:
    """(service, operation, query-protocol parameters) of a request; the body is read and put
    back for the application."""
    match = CREDENTIAL.search(environ.get("HTTP_AUTHORIZATION", ""))
    service = match.group(2) if match else "?"
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    if target:
        return service, target.rsplit(".", 1)[-1], {}
    if service == "s3":
        query = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
        return service, s3_operation(environ.get("REQUEST_METHOD", ""), query, environ.get("PATH_INFO", "")), {}
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)
    params = parse_qs(body.decode(errors="replace"))
    return service, params.get("Action", ["?"])[0], params


def _xml_query(namespace: str, code: str, message: str, sender: bool) -> bytes:
    kind = "Sender" if sender else "Receiver"
    return (f'<ErrorResponse xmlns="{namespace}"><Error><Type>{kind}</Type><Code>{code}</Code>'
            f"<Message>{message}</Message></Error><RequestId>{uuid.uuid4()}</RequestId></ErrorResponse>").encode()


def error_response(service: str, fault: str) -> tuple[str, list, bytes]:
    """(status, headers, body) of `fault` in `service`'s protocol."""
    rid = str(uuid.uuid4())
    if service == "ssm":
        code, status = {"throttle": ("ThrottlingException", "400 Bad Request"),
                        "lose": ("InternalServerError", "500 Internal Server Error")}.get(
            fault, ("InternalServerError", "503 Service Unavailable"))
        body = json.dumps({"__type": code, "message": "Rate exceeded" if fault == "throttle" else
                           "An internal error occurred"}).encode()
        return status, [("Content-Type", "application/x-amz-json-1.1"), ("x-amzn-RequestId", rid)], body
    if service == "ec2":
        code, status, message = {
            "throttle": ("RequestLimitExceeded", "503 Service Unavailable", "Request limit exceeded."),
            "lose": ("InternalError", "500 Internal Server Error", "An internal error has occurred."),
        }.get(fault, ("Unavailable", "503 Service Unavailable", "The server is overloaded and can't handle the request."))
        return status, [("Content-Type", "text/xml")], ec2_error(code, message)
    if service == "s3":
        code, status, message = {
            "throttle": ("SlowDown", "503 Slow Down", "Please reduce your request rate."),
            "lose": ("InternalError", "500 Internal Server Error", "We encountered an internal error. Please try again."),
        }.get(fault, ("ServiceUnavailable", "503 Service Unavailable", "Service is unable to handle request."))
        body = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Message>{message}</Message>"
                f"<RequestId>{rid[:16]}</RequestId></Error>").encode()
        return status, [("Content-Type", "application/xml"), ("x-amz-request-id", rid[:16])], body
    # Auto Scaling (and any other query service)
    code, status, sender = {"throttle": ("Throttling", "400 Bad Request", True),
                            "lose": ("InternalFailure", "500 Internal Server Error", False)}.get(
        fault, ("ServiceUnavailable", "503 Service Unavailable", False))
    message = "Rate exceeded" if fault == "throttle" else "Service unavailable"
    body = _xml_query("http://autoscaling.amazonaws.com/doc/2011-01-01/", code, message, sender)
    return status, [("Content-Type", "text/xml")], body


def ec2_error(code: str, message: str) -> bytes:
    return (f'<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>{code}</Code>'
            f"<Message>{message}</Message></Error></Errors><RequestID>{uuid.uuid4()}</RequestID></Response>").encode()


class Rule:
    def __init__(self, spec: dict, now: float):
        self.fault = spec["fault"]
        if self.fault not in FAULTS:
            raise ValueError(f"fault {self.fault!r} is not one of {FAULTS}")
        self.service = spec.get("service", "*")
        if self.service != "*" and self.service not in SERVICES:
            raise ValueError(f"service {self.service!r} is not one of {SERVICES} or '*'")
        action = spec.get("action", "*")
        self.actions = None if action == "*" else ({action} if isinstance(action, str) else set(action))
        self.writes = bool(spec.get("writes", False))
        clients = spec.get("clients", "rust")
        self.clients = {"function", "cli"} if clients == "rust" else (
            None if clients == "*" else ({clients} if isinstance(clients, str) else set(clients)))
        if self.fault == "crash":
            self.clients = {"function"}
        self.rate = float(spec.get("rate", 1.0))
        # At most this many times (absent: no limit): "lose the first answer", then let the
        # SDK's retry through.
        self.left = spec.get("count")
        self.delay = float(spec.get("delay", 3.0))
        seconds = spec.get("seconds")
        self.until = now + float(seconds) if seconds is not None else None

    def matches(self, service: str, action: str, client: str, now: float) -> bool:
        return ((self.until is None or now < self.until)
                and (self.service == "*" or self.service == service)
                and (self.actions is None or action in self.actions)
                and (not (self.writes or self.fault == "crash") or bool(WRITE.match(action)))
                and (self.clients is None or client in self.clients))


class Faults:
    """The layer's state: rules, the impaired and not-yet-known instances, the counts."""

    def __init__(self):
        self.lock = threading.Lock()
        self.rng = random.Random(0)
        self.rules: list[Rule] = []
        self.impaired: set[str] = set()
        self.unknown_for = 0.0
        self.pid: int | None = None
        self.counts: Counter = Counter()
        self.calls: Counter = Counter()
        self.kills = 0

    def configure(self, spec: dict):
        now = time.monotonic()
        with self.lock:
            if "seed" in spec:
                self.rng = random.Random(spec["seed"])
            if "rules" in spec:
                self.rules = [Rule(r, now) for r in spec["rules"]]
            if "impaired" in spec:
                self.impaired = set(spec["impaired"])
            if "unknown_for" in spec:
                self.unknown_for = float(spec["unknown_for"])
            if "pid" in spec:
                self.pid = spec["pid"]

    def report(self, clear: bool) -> dict:
        with self.lock:
            out = {"faults": dict(self.counts), "calls": dict(self.calls), "kills": self.kills}
            if clear:
                self.counts.clear()
                self.calls.clear()
                self.kills = 0
        return out

    def decide(self, service: str, action: str, client: str) -> Rule | None:
        now = time.monotonic()
        with self.lock:
            self.calls[f"{client}.{service}.{action}"] += 1
            for rule in self.rules:
                if rule.left is not None and rule.left <= 0:
                    continue
                if rule.matches(service, action, client, now) and self.rng.random() < rule.rate:
                    if rule.left is not None:
                        rule.left -= 1
                    self.counts[f"{service}.{action}.{rule.fault}"] += 1
                    return rule
        return None

    def instances_refused(self, params: dict, launched_at) -> tuple[str, str] | None:
        """DescribeInstances' failure, if any, as EC2 gives it: (code, message)."""
        ids = [v[0] for k, v in params.items() if k.startswith("InstanceId.")]
        with self.lock:
            impaired = (not ids and self.impaired) or [i for i in ids if i in self.impaired]
            unknown_for = self.unknown_for
        if impaired:
            with self.lock:
                self.counts["ec2.DescribeInstances.impaired"] += 1
            return "Unavailable", "The service is unavailable in an affected Availability Zone."
        if unknown_for > 0:
            now = datetime.now(timezone.utc)
            for i in ids:
                at = launched_at(i)
                if at is not None and (now - at).total_seconds() < unknown_for:
                    with self.lock:
                        self.counts["ec2.DescribeInstances.not-yet-known"] += 1
                    return "InvalidInstanceID.NotFound", f"The instance ID '{i}' does not exist"
        return None

    def kill(self):
        with self.lock:
            pid = self.pid
            self.kills += 1
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _drop(environ, start_response):
    """Close the connection without an answer (a reset, as a dead peer or a killed process
    leaves it)."""
    sock = environ.get("werkzeug.socket")
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    start_response("500 Internal Server Error", [("Content-Length", "0")])
    return [b""]


def layer(inner, faults: Faults, launched_at, serve):
    """`inner` (moto, its lock taken by `serve(inner, environ, start_response)`) behind the faults."""

    def app(environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path == "/_sim/faults":
            if environ.get("REQUEST_METHOD") == "POST":
                length = int(environ.get("CONTENT_LENGTH") or 0)
                try:
                    faults.configure(json.loads(environ["wsgi.input"].read(length) or b"{}"))
                except (ValueError, KeyError) as e:
                    start_response("400 Bad Request", [("Content-Type", "text/plain")])
                    return [str(e).encode()]
                body = b"{}"
            else:
                body = json.dumps(faults.report("clear=1" in environ.get("QUERY_STRING", ""))).encode()
            start_response("200 OK", [("Content-Type", "application/json")])
            return [body]
        if path.startswith("/_sim/") or "HTTP_AUTHORIZATION" not in environ:
            return serve(inner, environ, start_response)
        service, action, params = operation(environ)
        client = client_of(environ.get("HTTP_USER_AGENT", ""))
        environ["sim.operation"] = (service, action, client)
        rule = faults.decide(service, action, client)
        if action == "DescribeInstances" and client in ("function", "cli"):
            refused = faults.instances_refused(params, launched_at)
            if refused:
                code, message = refused
                status = "503 Service Unavailable" if code == "Unavailable" else "400 Bad Request"
                start_response(status, [("Content-Type", "text/xml")])
                return [ec2_error(code, message)]
        if rule is None:
            return serve(inner, environ, start_response)
        if rule.fault in ("refuse", "throttle"):
            status, headers, body = error_response(service, rule.fault)
            start_response(status, headers)
            return [body]
        if rule.fault == "slow":
            time.sleep(rule.delay)
            return serve(inner, environ, start_response)
        if rule.fault == "hang":
            end = time.monotonic() + HANG_MAX
            if rule.until is not None:
                end = min(end, rule.until)
            while time.monotonic() < end:
                time.sleep(0.2)
            return _drop(environ, start_response)
        # lose, crash: applied first.
        captured = {}

        def capture(status, headers, exc_info=None):
            captured["status"] = status

        b"".join(serve(inner, environ, capture))
        if rule.fault == "crash":
            faults.kill()
            return _drop(environ, start_response)
        status, headers, body = error_response(service, "lose")
        start_response(status, headers)
        return [body]

    return app
