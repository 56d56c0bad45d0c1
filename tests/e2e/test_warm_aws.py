"""sim/warm_aws.py answers as the AWS CLI does: the same output, errors and exit status for every
call the boot script makes, against moto; and a call whose caller is killed ends with it."""

import os
import shutil
import socket
import subprocess
import tempfile

import boto3
import pytest

from conftest import wait_for
from sim import procs, warm_aws
from sim.world import CREDENTIALS


@pytest.fixture
def warm(moto):
    """(plain `aws`, the warm client, the environment both run with, a scratch folder)."""
    workdir = tempfile.mkdtemp(prefix="warm-aws-")
    proc = None
    try:
        proc, bin_dir = warm_aws.start(workdir)
        env = {**CREDENTIALS, "AWS_ENDPOINT_URL": moto, "PATH": os.environ["PATH"]}
        yield shutil.which("aws"), f"{bin_dir}/aws", env, workdir
    finally:
        if proc is not None:
            procs.stop(proc, kill=True)
        shutil.rmtree(workdir, ignore_errors=True)


def test_the_warm_cli_answers_as_the_cli_does(warm, moto):
    plain, client, env, workdir = warm
    kw = dict(endpoint_url=moto, region_name="us-east-1", aws_access_key_id="testing",
              aws_secret_access_key="testing")
    ssm, s3 = boto3.client("ssm", **kw), boto3.client("s3", **kw)
    ssm.put_parameter(Name="/p/plain", Value="a value\nof two lines", Type="String")
    ssm.put_parameter(Name="/p/secret", Value="-----BEGIN KEY-----", Type="SecureString")
    s3.create_bucket(Bucket="warm-test")
    s3.put_object(Bucket="warm-test", Key="snap.db", Body=b"\x00snapshot" * 1000)
    calls = [
        ["ssm", "get-parameter", "--name", "/p/plain", "--query", "Parameter.Value", "--output", "text"],
        ["ssm", "get-parameter", "--name", "/p/secret", "--with-decryption", "--query", "Parameter.Value",
         "--output", "text"],
        ["ssm", "get-parameter", "--name", "/p/missing", "--query", "Parameter.Value", "--output", "text"],
        ["ssm", "get-parameter", "--no-such-option"],
        ["s3", "cp", "--only-show-errors", "s3://warm-test/snap.db", "OUT"],
        ["s3", "cp", "--only-show-errors", "s3://warm-test/missing.db", "OUT"],
    ]
    for argv in calls:
        answers = []
        for n, aws in enumerate((plain, client)):
            out = os.path.join(workdir, f"out-{n}")
            r = subprocess.run([aws, *[out if a == "OUT" else a for a in argv]], env=env, capture_output=True,
                               text=True, timeout=60, cwd=workdir)
            answers.append((r.returncode, r.stdout, r.stderr.replace(out, "OUT"),
                            open(out, "rb").read() if os.path.exists(out) else None))
        assert answers[0] == answers[1], (argv, answers)
    assert answers[0][0] != 0  # the last: a missing object fails, in both


def test_a_call_whose_caller_is_killed_ends_with_it(warm):
    _, client, env, workdir = warm
    # A call that waits: an endpoint that accepts and never answers.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)
    env = {**env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{silent.getsockname()[1]}"}
    caller = procs.spawn([client, "--cli-read-timeout", "300", "ssm", "get-parameter", "--name", "/x"], env,
                         f"{workdir}/caller.log")

    def serving():
        # The server and, while it serves the call, its child (a fork: the same command line).
        found = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read()
            except OSError:
                continue
            if b"sim.warm_aws" in cmd and workdir.encode() in cmd:
                found.append(int(pid))
        return found

    wait_for("the warm server's child serving the call", 30, lambda: len(serving()) == 2)
    procs.stop(caller, kill=True)
    # The child gone with its caller; the server still serving.
    wait_for("the child gone with its caller", 30, lambda: len(serving()) == 1)
    silent.close()
