"""The AWS CLI, started once: each instance's `aws` costs a fork instead of a Python start.

An instance's boot script polls `aws ssm get-parameter` until the function publishes its config;
each run of the CLI (awscli 1.x, Python) spends ~0.6 CPU-seconds importing botocore and loading
its models, and the simulations of `make test` ran hundreds of polls at once: most of the
machine's CPU. Here one server imports the CLI and loads the models it will need, and for each
call forks; the child runs the CLI's own `main()` with the caller's arguments, environment,
working directory and standard streams (passed over the socket), and its exit status goes back.
The CLI's parsing, requests, output and errors are the real ones; only the interpreter's start is
shared. `sim/instances.py` puts the `aws` client written here first on each instance's PATH.

    python -m sim.warm_aws --socket PATH --bin DIR   # serves until stopped; DIR/aws is the client
"""

from __future__ import annotations

import argparse
import array
import gc
import json
import os
import signal
import socket
import struct
import sys
import threading
import time
import traceback

# The client each instance runs as `aws`: the standard library only, no site (-S -E: ~15 ms).
CLIENT = r'''#!{python} -SE
import array, json, os, socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect({socket!r})
request = json.dumps({{"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}}).encode()
s.sendmsg([struct.pack("!I", len(request)), request],
          [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
status = b""
while len(status) < 4:
    chunk = s.recv(4 - len(status))
    if not chunk:
        sys.stderr.write("aws (sim/warm_aws.py): the server went away\n")
        sys.exit(255)
    status += chunk
sys.exit(struct.unpack("!i", status)[0])
'''


def _warm() -> None:
    """Imports the CLI and has it read, once, the files a call reads: botocore's JSON models,
    decoded once here and handed to every child (each child is a copy: what a call does to them
    stays in its own process)."""
    import awscli.clidriver
    import botocore.loaders

    decoded = {}
    load_file = botocore.loaders.JSONFileLoader.load_file

    def remembered(self, file_path):
        if file_path not in decoded:
            decoded[file_path] = load_file(self, file_path)
        return decoded[file_path]

    botocore.loaders.JSONFileLoader.load_file = remembered
    # One call of each kind the instances make, to an address that refuses at once: everything
    # read, nothing sent.
    saved = dict(os.environ)
    os.environ.update({"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_MAX_ATTEMPTS": "1",
                       "AWS_ACCESS_KEY_ID": "warm", "AWS_SECRET_ACCESS_KEY": "warm", "AWS_DEFAULT_REGION": "us-east-1"})
    devnull = os.open(os.devnull, os.O_WRONLY)
    out, err = os.dup(1), os.dup(2)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        for argv in (["ssm", "get-parameter", "--name", "/warm", "--query", "Parameter.Value", "--output", "text"],
                     ["s3", "cp", "--only-show-errors", "s3://warm-bucket/warm", os.devnull]):
            sys.argv = ["aws", "--cli-connect-timeout", "1", "--cli-read-timeout", "1", *argv]
            try:
                awscli.clidriver.main()
            except SystemExit:
                pass
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(out, 1)
        os.dup2(err, 2)
        for fd in (devnull, out, err):
            os.close(fd)
        os.environ.clear()
        os.environ.update(saved)


def _serve_one(conn: socket.socket) -> None:
    """In the forked child: one call of the CLI, as the client asked for it."""
    fds = array.array("i")
    # The streams come with the first bytes (the request's length), as ancillary data.
    data, ancillary, _, _ = conn.recvmsg(65536, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])

    def more(n: int) -> bytes:
        chunk = conn.recv(n)
        if not chunk:  # the caller went away before its request was whole
            os._exit(255)
        return chunk

    if not data:
        os._exit(255)
    while len(data) < 4:
        data += more(4 - len(data))
    (size,) = struct.unpack("!I", data[:4])
    data = data[4:]
    while len(data) < size:
        data += more(size - len(data))
    if len(fds) != 3:
        raise RuntimeError(f"the client sent {len(fds)} streams, not 3")
    request = json.loads(data)
    # The caller gone (its instance killed with its process group): this call goes with it.
    threading.Thread(target=_exit_when_closed, args=(conn,), daemon=True).start()
    for target, fd in zip((0, 1, 2), fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    # What importing awscli does to the environment (awscli/__init__.py): its data after the caller's.
    import awscli

    data = os.path.join(os.path.dirname(awscli.__file__), "data")
    os.environ["AWS_DATA_PATH"] = os.pathsep.join(p for p in (os.environ.get("AWS_DATA_PATH"), data) if p)
    if os.environ.get("LC_CTYPE", "") == "UTF-8":  # as the CLI's own `aws` script does
        os.environ["LC_CTYPE"] = "en_US.UTF-8"
    os.chdir(request["cwd"])
    sys.argv = ["aws", *request["argv"]]
    rc = 255
    try:
        import awscli.clidriver

        rc = awscli.clidriver.main()
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 255)
    except BaseException as e:  # the CLI's own handler prints AWS errors; this is anything else
        print(f"aws (sim/warm_aws.py): {e!r}", file=sys.stderr)
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
    conn.sendall(struct.pack("!i", rc))


def _exit_when_closed(conn: socket.socket) -> None:
    try:
        conn.recv(1)  # the client sends nothing more: this returns when it is gone
    except OSError:
        pass
    os._exit(255)


def _reap(*_) -> None:
    """Children are waited for (so their CPU time counts in this process's, as a shell's would)."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def start(workdir: str):
    """Starts a server for the simulation in `workdir` (sim/procs.py: stop it by PID) and waits
    until it serves: (the process, the folder whose `aws` is its client)."""
    from . import procs

    bin_dir = os.path.join(workdir, "aws-bin")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    log = os.path.join(workdir, "warm-aws.log")
    proc = procs.spawn([sys.executable, "-m", "sim.warm_aws", "--socket", os.path.join(workdir, "aws.sock"),
                        "--bin", bin_dir], {**os.environ, "PYTHONPATH": root}, log)
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(bin_dir, "aws")):
        if proc.poll() is not None or time.monotonic() > deadline:
            procs.stop(proc, kill=True)
            raise RuntimeError(f"sim/warm_aws.py did not start; see {log}")
        time.sleep(0.05)
    return proc, bin_dir


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--bin", required=True, help="where to write the `aws` client")
    args = ap.parse_args()
    _warm()
    os.makedirs(args.bin, exist_ok=True)
    client = os.path.join(args.bin, "aws")
    with open(f"{client}.tmp", "w") as f:
        f.write(CLIENT.format(python=sys.executable, socket=args.socket))
    os.chmod(f"{client}.tmp", 0o755)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(args.socket)
    server.listen(64)
    signal.signal(signal.SIGCHLD, _reap)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    os.rename(f"{client}.tmp", client)  # the client appears once the server listens
    gc.freeze()  # what was decoded stays in the pages the children share
    while True:
        conn, _ = server.accept()
        try:
            child = os.fork()
        except OSError as e:  # the caller sees "the server went away" (255) and retries
            print(f"warm_aws: fork failed: {e!r}", file=sys.stderr, flush=True)
            conn.close()
            continue
        if child == 0:
            server.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            try:
                _serve_one(conn)
            except BaseException:
                traceback.print_exc()  # the server's log, or the caller's stderr once it is theirs
                sys.stderr.flush()
            finally:
                os._exit(0)
        conn.close()


if __name__ == "__main__":
    main()
