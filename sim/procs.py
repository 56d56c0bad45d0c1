"""Processes the simulation starts: each in its own process group, stopped by PID."""

from __future__ import annotations

import os
import signal
import socket
import subprocess


def spawn(argv: list[str], env: dict, log_path: str) -> subprocess.Popen:
    log = open(log_path, "ab")
    try:
        return subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        log.close()


def stop(proc: subprocess.Popen, kill: bool = False, grace: float = 5.0) -> None:
    """Stop the process and everything it started (its process group), by PID."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL if kill else signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    else:
        # The leader is gone; children in its group may not be.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def pause(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGSTOP)


def resume(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGCONT)


def peak_rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
