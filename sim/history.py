"""A recorded client history and its check (tests/history, docs/clients.md): the Go recorder
runs clientv3 clients and watches against an endpoint while a test changes the cluster; the
checker verifies the file for linearizability, the watch guarantees, revisions, declared
restores and split brain."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

from sim import procs

CACHE = os.environ.get("ETCD_BUILDS", "/var/tmp/etcd-asg-lifecycle")


def binary() -> str:
    path = os.environ.get("HISTORY_BIN") or os.path.join(CACHE, "history", "history")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"no history recorder at {path}: make history-tool")
    return path


class CheckFailed(AssertionError):
    pass


class Recording:
    """One recorder process, writing `path` when it stops."""

    def __init__(self, workdir: str, endpoint: str, *, certs: tuple[str, str, str] | None = None,
                 members: list[str] | None = None, prefix: str = "/history/", clients: int = 8,
                 rate: float = 60, pinned_serializable: bool = False, name: str = "history"):
        self.path = os.path.join(workdir, f"{name}.jsonl")
        self.stop_file = f"{self.path}.stop"
        self.ready_file = f"{self.path}.ready"
        self.log = os.path.join(workdir, f"{name}.log")
        argv = [binary(), "record", "-endpoint", endpoint, "-out", self.path, "-stop-file", self.stop_file,
                "-ready-file", self.ready_file, "-prefix", prefix, "-clients", str(clients), "-rate", str(rate)]
        if certs:
            argv += ["-cacert", certs[0], "-cert", certs[1], "-key", certs[2]]
        if members:
            argv += ["-members", ",".join(members)]
        if pinned_serializable:
            argv += ["-pinned-serializable"]
        self.started = time.monotonic()
        self.proc = procs.spawn(argv, {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, self.log)

    def wait_ready(self, timeout: float = 60) -> None:
        """Waits until the recorder's first read has been answered (its watches start there): a
        test that changes the cluster at once would otherwise record nothing of it, or nothing at
        all where no member can answer until the change is over (a cluster of one replaced)."""
        deadline = time.monotonic() + timeout
        while not os.path.exists(self.ready_file):
            if self.proc.poll() is not None:
                raise CheckFailed(f"the recorder ended ({self.proc.returncode}): {open(self.log).read()[-1500:]}")
            if time.monotonic() > deadline:
                raise CheckFailed(f"the cluster did not answer the recorder within {timeout:.0f}s; see {self.log}")
            time.sleep(0.1)

    def stop(self, timeout: float = 120) -> str:
        """Stops the recorder (it makes its final write and read, up to a minute each, then
        writes the file): the history's path."""
        open(self.stop_file, "w").close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            procs.stop(self.proc, kill=True)
            raise CheckFailed(f"the recorder did not stop within {timeout}s; see {self.log}")
        if self.proc.returncode != 0 or not os.path.exists(self.path):
            raise CheckFailed(f"the recorder failed ({self.proc.returncode}): {open(self.log).read()[-1500:]}")
        return self.path

    def kill(self):
        procs.stop(self.proc, kill=True)


def check(path: str, restores: list[tuple[int, str]] = (), fresh_serializable: bool = False,
          timeout: str = "10s", wal_dirs: list[str] = ()) -> tuple[int, dict, list[str]]:
    """Runs the checker: (exit code, its summary, its violation lines). `wal_dirs`: the members'
    data directories (every one the cluster had, replaced members' too), whose logs settle the
    writes of unknown outcome."""
    argv = [binary(), "check", "-history", path, "-timeout", timeout]
    if wal_dirs:
        argv += ["-wal", ",".join(wal_dirs)]
    for rev, kind in restores:
        argv += ["-restore", f"{rev}:{kind}"]
    if fresh_serializable:
        argv.append("-serializable-must-be-fresh")
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    lines = r.stdout.strip().splitlines()
    summary = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
    violations = [line for line in lines if line.startswith("VIOLATION:")]
    if r.returncode == 3:
        raise CheckFailed(f"the checker could not read {path}: {r.stderr.strip()}")
    return r.returncode, summary, violations


def keep(path: str, why: str) -> str:
    """Copies a history (and its visualization) where it outlives the test: its folder."""
    dest = os.path.join(CACHE, "histories", f"{time.strftime('%Y%m%d-%H%M%S')}-{why}")
    os.makedirs(dest, exist_ok=True)
    for p in (path, path.replace(".jsonl", ".html")):
        if os.path.exists(p):
            shutil.copy(p, dest)
    return dest


def verified(path: str, restores: list[tuple[int, str]] = (), label: str = "history",
             wal_dirs: list[str] = ()) -> dict:
    """Checks a history and fails with the checker's witness if it is not what etcd promises
    (or the check could not finish: "unknown" is never a pass). The summary."""
    code, summary, violations = check(path, restores, wal_dirs=wal_dirs)
    if code != 0:
        kept = keep(path, label)
        what = "; ".join(v.removeprefix("VIOLATION: ") for v in violations) or summary.get("result", "no summary")
        raise CheckFailed(f"{label}: {what} (history and visualization kept in {kept})")
    return summary


def note(summary: dict, version: str):
    """Appends a checked history's figures to $CACHE/histories/summaries.jsonl, by test and etcd
    version: what docs/clients.md's table is measured from."""
    dest = os.path.join(CACHE, "histories")
    os.makedirs(dest, exist_ok=True)
    test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
    keep_keys = ("ops", "failed", "unresolved_writes", "watch_events", "watch_compacted", "watch_sessions",
                 "longest_ok_op_ms", "longest_without_success_ms", "restores", "check_ms", "clusters", "wal")
    line = {"test": test, "etcd": version, "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            **{k: summary.get(k) for k in keep_keys}}
    with open(os.path.join(dest, "summaries.jsonl"), "a") as f:
        f.write(json.dumps(line) + "\n")
