"""A Lambda Runtime API on loopback that runs the real ``bootstrap`` binary.

It serves the runtime side of the protocol the binary speaks in AWS
(``/2018-06-01/runtime/invocation/next``, ``.../response``, ``.../error``, ``/runtime/init/error``),
one invocation at a time, as a function with ``ReservedConcurrentExecutions: 1`` runs. A function
process that dies or hangs fails its invocation and is started again, as Lambda would.
"""

from __future__ import annotations

import json
import os
import queue
import random
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import procs

PREFIX = "/2018-06-01/runtime"


@dataclass
class Invocation:
    event: dict | bytes  # bytes: sent as they are, even when they are not JSON
    timeout: float
    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    done: threading.Event = field(default_factory=threading.Event)
    outcome: str = "pending"  # ok | error | crashed | timeout
    body: object = None
    # When the function took it and answered (epoch seconds), to tell whose AWS calls are whose.
    started: float = 0.0
    ended: float = 0.0


class RuntimeApi:
    def __init__(self):
        self.pending: "queue.Queue[Invocation]" = queue.Queue()
        self.current: Invocation | None = None
        self.init_errors: list[str] = []
        self.first_poll = threading.Event()
        # Bumped when the function process is replaced: a poll left blocked by a dead process
        # must not take the next invocation.
        self.generation = 0
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _reply(self, code, body=b"", headers=()):
                self.send_response(code)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if self.path != f"{PREFIX}/invocation/next":
                    return self._reply(404)
                gen = api.generation
                api.first_poll.set()
                while True:
                    try:
                        inv = api.pending.get(timeout=0.2)
                    except queue.Empty:
                        if gen != api.generation:
                            return
                        continue
                    if gen != api.generation:
                        api.pending.put(inv)
                        return
                    break
                api.current = inv
                inv.started = time.time()
                deadline_ms = int((time.time() + inv.timeout) * 1000)
                body = inv.event if isinstance(inv.event, bytes) else json.dumps(inv.event).encode()
                self._reply(
                    200,
                    body,
                    [
                        ("Lambda-Runtime-Aws-Request-Id", inv.id),
                        ("Lambda-Runtime-Deadline-Ms", str(deadline_ms)),
                        ("Lambda-Runtime-Invoked-Function-Arn",
                         "arn:aws:lambda:us-east-1:123456789012:function:etcd-asg-lifecycle"),
                        ("Lambda-Runtime-Trace-Id", "Root=1-00000000-000000000000000000000000"),
                        ("Content-Type", "application/json"),
                    ],
                )

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if self.path == f"{PREFIX}/init/error":
                    api.init_errors.append(body.decode(errors="replace"))
                    return self._reply(202)
                inv = api.current
                for outcome in ("response", "error"):
                    if inv and self.path == f"{PREFIX}/invocation/{inv.id}/{outcome}":
                        inv.outcome = "ok" if outcome == "response" else "error"
                        inv.ended = time.time()
                        try:
                            inv.body = json.loads(body or b"null")
                        except ValueError:
                            inv.body = body.decode(errors="replace")
                        api.current = None
                        inv.done.set()
                        return self._reply(202)
                self._reply(400)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.address = f"127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Function:
    """The bootstrap binary behind the runtime API; restarted when it dies."""

    def __init__(self, binary: str, env: dict, log_path: str, once: tuple[str, ...] = ()):
        self.binary = binary
        self.env = env
        # Variables dropped after the first crash: a failpoint that fires once.
        self.once = once
        self.crashes = 0
        self.log_path = log_path
        self.api = RuntimeApi()
        self.proc: subprocess.Popen | None = None
        self.lock = threading.Lock()  # one invocation at a time
        self.cold_starts: list[float] = []
        self.invocations: list[Invocation] = []
        self.peak_rss_kib = 0
        # Called with the new process's PID after each start (the fault layer kills by it).
        self.on_start = None
        # kill_inside(): (chance, longest delay, its random.Random); the kills done so far.
        self.killing: tuple[float, float, random.Random] | None = None
        self.kills = 0

    def start(self):
        self.api.generation += 1
        self.api.first_poll.clear()
        env = {
            **self.env,
            "AWS_LAMBDA_RUNTIME_API": self.api.address,
            "AWS_LAMBDA_FUNCTION_NAME": "etcd-asg-lifecycle",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "1024",
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_LOG_STREAM_NAME": "sim",
            "AWS_LAMBDA_LOG_GROUP_NAME": "/aws/lambda/etcd-asg-lifecycle",
        }
        began = time.monotonic()
        self.proc = procs.spawn([self.binary], env, self.log_path)
        while not self.api.first_poll.wait(0.05):
            # A function that fails at start (a bad setting, say) exits: show why, at once.
            if self.proc.poll() is not None or time.monotonic() - began > 30:
                with open(self.log_path, errors="replace") as log:
                    tail = "".join(log.readlines()[-5:])
                errors = "".join(self.api.init_errors)
                raise RuntimeError(f"{self.binary} did not ask for an invocation: {errors}{tail}")
        self.cold_starts.append(time.monotonic() - began)
        if self.on_start is not None:
            self.on_start(self.proc.pid)

    def kill_inside(self, chance: float, within: float = 2.0, seed: int = 11):
        """From now on, each invocation has `chance` to have its process killed (SIGKILL) at a
        moment drawn uniformly from its first `within` seconds, as Lambda's timeout, an OOM or a
        host failure would: inside a step as well as between two. ``chance=0`` stops it."""
        self.killing = (chance, within, random.Random(seed)) if chance > 0 else None

    def _sample_memory(self):
        if self.proc is not None:
            self.peak_rss_kib = max(self.peak_rss_kib, procs.peak_rss_kib(self.proc.pid))

    def kill(self):
        """Kill the function process (as a crash would), by PID."""
        if self.proc is not None:
            self._sample_memory()
            procs.stop(self.proc, kill=True)
            self.proc = None

    def restart(self):
        self.kill()
        self.start()

    def invoke(self, event: dict | bytes, timeout: float = 60.0) -> Invocation:
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self.proc = None
                self.start()
            inv = Invocation(event=event, timeout=timeout)
            kill_after = None
            if self.killing is not None:
                chance, within, rng = self.killing
                if rng.random() < chance:
                    kill_after = rng.uniform(0, within)
            self.api.pending.put(inv)
            end = time.monotonic() + timeout + 5
            while not inv.done.wait(0.01 if kill_after is not None else 0.05):
                if kill_after is not None and inv.started and time.time() - inv.started >= kill_after:
                    kill_after = None
                    self.kills += 1
                    procs.stop(self.proc, kill=True)
                died = self.proc is None or self.proc.poll() is not None
                if died or time.monotonic() > end:
                    inv.outcome = "crashed" if died else "timeout"
                    self.crashes += 1
                    for key in self.once:
                        self.env.pop(key, None)
                    self.api.current = None
                    while not self.api.pending.empty():
                        self.api.pending.get_nowait()
                    self.kill()
                    break
            self._sample_memory()
            self.invocations.append(inv)
            return inv

    def close(self):
        self.kill()
        self.api.close()
