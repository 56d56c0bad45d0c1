"""boot/etcd-boot.sh on its own: the checksum gate, the fetch-before-every-start rule, AWS errors in
the log, and the service it installs. `aws`, `systemctl` and etcd are stand-ins on PATH; nothing
leaves the machine (downloads are file:// URLs)."""

import hashlib
import io
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "boot" / "etcd-boot.sh"
CONFIG = ("ETCD_NAME=i-1\nETCD_INITIAL_CLUSTER=i-1=http://10.0.0.1:2380\nETCD_INITIAL_CLUSTER_STATE=new\n"
          "ETCD_INITIAL_CLUSTER_TOKEN=t\nETCD_INITIAL_ADVERTISE_PEER_URLS=http://10.0.0.1:2380\n"
          "ETCD_ADVERTISE_CLIENT_URLS=http://10.0.0.1:2379\nNOT_ETCD=dropped\n")

# A stand-in `aws`: answers `ssm get-parameter` from files in $FAKE_AWS, one per call, in order
# (value-N: the value; error-N: an error message and exit 255; nothing left: ParameterNotFound),
# and records every call in $FAKE_AWS/calls.
FAKE_AWS = r"""#!/bin/bash
dir=$FAKE_AWS
echo "$*" >> "$dir/calls"
n=$(wc -l < "$dir/calls")
if [ -f "$dir/error-$n" ]; then cat "$dir/error-$n" >&2; exit 255; fi
if [ -f "$dir/value-$n" ]; then cat "$dir/value-$n"; exit 0; fi
echo "An error occurred (ParameterNotFound) when calling the GetParameter operation: Parameter not found." >&2
exit 254
"""

FAKE_ETCD = """#!/bin/bash
env | sort > "$ETCD_DATA_DIR/../etcd-env"
echo "$(id -un)" > "$ETCD_DATA_DIR/../etcd-user"
"""


@pytest.fixture
def box(tmp_path):
    """A directory standing in for the instance: bin/ first on PATH with the stand-ins."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("aws", FAKE_AWS), ("systemctl", '#!/bin/bash\necho "$*" >> "$FAKE_AWS/systemctl"\n')):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "aws").mkdir()
    return tmp_path


def env(box, **extra):
    e = {
        "PATH": f"{box / 'bin'}:/usr/bin:/bin",
        "FAKE_AWS": str(box / "aws"),
        "PARAMETER_PREFIX": "/etcd-asg-lifecycle/test",
        "INSTANCE_ID": "i-1",
        "DATA_DIR": str(box / "data"),
        "CONFIG_FILE": str(box / "etc" / "etcd.env"),
        "ETCD_BIN": str(box / "bin" / "etcd"),
        "ETCD_USER": "root",
        "POLL_SECONDS": "0.05",
        "MAX_BACKOFF": "1",
        "SCRIPT_PATH": str(box / "sbin" / "etcd-boot"),
        "SETTINGS_FILE": str(box / "etc" / "etcd-boot.env"),
        "UNIT_FILE": str(box / "etcd-member.service"),
    }
    e.update(extra)
    return e


def boot(box, *args, timeout=20, **extra):
    return subprocess.run(["bash", str(SCRIPT), *args], env=env(box, **extra), capture_output=True, text=True,
                          timeout=timeout)


def answers(box, *values):
    """What the stand-in `aws` answers call after call: (kind, text) or None for not found."""
    for n, v in enumerate(values, 1):
        if v is not None:
            kind, text = v
            (box / "aws" / f"{kind}-{n}").write_text(text)


def aws_calls(box):
    calls = box / "aws" / "calls"
    return calls.read_text().splitlines() if calls.exists() else []


def tarball(box, content=b"#!/bin/sh\necho etcd\n"):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name in ("etcd", "etcdctl"):
            info = tarfile.TarInfo(f"etcd-v3.5.99-linux-arm64/{name}")
            info.size, info.mode = len(content), 0o755
            tar.addfile(info, io.BytesIO(content))
    path = box / "etcd-v3.5.99-linux-arm64.tar.gz"
    path.write_bytes(buf.getvalue())
    return f"file://{path}", hashlib.sha256(buf.getvalue()).hexdigest()


def test_a_tarball_whose_sha256_differs_is_refused_with_a_clear_line(box):
    url, _ = tarball(box)
    installed = box / "opt" / "etcd"
    r = boot(box, "exec", ETCD_BIN=str(installed), ETCD_DOWNLOAD_URL=url, ETCD_SHA256="0" * 64)
    assert r.returncode == 3, r.stderr
    assert f"REFUSING to install etcd: {url} has SHA-256" in r.stderr
    assert not installed.exists()
    assert aws_calls(box) == [], "nothing after the refusal"


def test_a_download_without_a_sha256_is_refused(box):
    url, _ = tarball(box)
    r = boot(box, "exec", ETCD_BIN=str(box / "opt" / "etcd"), ETCD_DOWNLOAD_URL=url)
    assert r.returncode != 0 and "ETCD_SHA256 is required" in r.stderr


def test_a_matching_tarball_is_installed_and_a_failing_download_is_retried_and_logged(box):
    url, digest = tarball(box)
    installed = box / "opt" / "etcd"
    answers(box, ("value", CONFIG))
    (box / "bin" / "etcd").unlink(missing_ok=True)
    r = boot(box, "exec", ETCD_BIN=str(installed), ETCD_DOWNLOAD_URL=url, ETCD_SHA256=digest.upper())
    assert installed.exists() and (box / "opt" / "etcdctl").exists(), r.stderr
    assert f"SHA-256 of {url} verified" in r.stderr
    # A URL that never answers: each try is logged, then the script gives up.
    r = boot(box, "exec", ETCD_BIN=str(box / "other" / "etcd"), ETCD_DOWNLOAD_URL=f"file://{box}/missing.tar.gz",
             ETCD_SHA256=digest, timeout=60)
    assert r.returncode != 0
    assert "failed (try 1 of 8); retrying in 1s" in r.stderr
    assert "failed 8 times; giving up" in r.stderr
    assert "missing.tar.gz" in r.stderr  # curl's own error is not hidden


def test_exec_mode_waits_for_the_parameter_and_runs_etcd_with_exactly_its_config(box):
    (box / "bin" / "etcd").write_text(FAKE_ETCD)
    (box / "bin" / "etcd").chmod(0o755)
    answers(box, None, None, ("value", CONFIG))  # not found twice, then published
    r = boot(box, "exec")
    assert r.returncode == 0, r.stderr
    assert len(aws_calls(box)) == 3
    assert "--name /etcd-asg-lifecycle/test/members/i-1" in aws_calls(box)[0]
    written = (box / "etc" / "etcd.env").read_text()
    assert "NOT_ETCD" not in written
    assert f"ETCD_LISTEN_PEER_URLS=http://10.0.0.1:2380\nETCD_LISTEN_CLIENT_URLS=http://10.0.0.1:2379\nETCD_DATA_DIR={box / 'data'}\n" in written
    seen = dict(line.split("=", 1) for line in (box / "etcd-env").read_text().splitlines())
    assert set(seen) - {"PWD", "SHLVL", "_"} == {line.split("=")[0] for line in written.splitlines()} | {"PATH"}


def test_aws_errors_are_logged_with_their_message_and_retried(box):
    denied = ("An error occurred (AccessDeniedException) when calling the GetParameter operation: "
              "User: arn:aws:sts::1:assumed-role/r/i-1 is not authorized to perform: ssm:GetParameter")
    answers(box, ("error", denied), ("error", "Could not connect to the endpoint URL"), ("value", CONFIG))
    r = boot(box, "fetch")
    assert r.returncode == 0, r.stderr
    assert "AccessDeniedException" in r.stderr and "not authorized to perform: ssm:GetParameter" in r.stderr
    assert "Could not connect to the endpoint URL" in r.stderr
    assert "retrying in 1s" in r.stderr
    assert "ParameterNotFound" not in r.stderr, "waiting for the parameter is not an error"


def test_fetch_takes_the_latest_config_before_every_start_until_the_member_has_data(box):
    config = box / "etc" / "etcd.env"
    answers(box, ("value", CONFIG), ("value", CONFIG.replace("STATE=new", "STATE=existing")),
            ("value", CONFIG.replace("i-1=", "i-9=")))
    assert boot(box, "fetch").returncode == 0
    assert "ETCD_INITIAL_CLUSTER_STATE=new" in config.read_text()
    # etcd failed before writing its WAL (it leaves member/snap behind): the next start re-fetches.
    (box / "data" / "member" / "snap").mkdir(parents=True)
    (box / "data" / "member" / "snap" / "db").write_text("")
    r = boot(box, "fetch")
    assert r.returncode == 0, r.stderr
    assert "ETCD_INITIAL_CLUSTER_STATE=existing" in config.read_text()
    # Once the member has a WAL, it keeps the config it started with; SSM is not even asked.
    (box / "data" / "member" / "wal").mkdir()
    (box / "data" / "member" / "wal" / "0000000000000000-0000000000000000.wal").write_text("")
    r = boot(box, "fetch")
    assert r.returncode == 0 and "keeping the config it started with" in r.stderr
    assert "ETCD_INITIAL_CLUSTER_STATE=existing" in config.read_text()
    assert len(aws_calls(box)) == 2


def test_run_refuses_to_start_etcd_without_a_config(box):
    r = boot(box, "run")
    assert r.returncode == 1 and "not starting etcd" in r.stderr


def test_systemd_mode_installs_a_service_that_fetches_before_every_start_and_runs_as_etcd(box):
    (box / "bin" / "etcd").write_text(FAKE_ETCD)
    (box / "bin" / "etcd").chmod(0o755)
    r = boot(box, "systemd", AWS_DEFAULT_REGION="eu-west-1")
    assert r.returncode == 0, r.stderr
    assert aws_calls(box) == [], "the service fetches, not the user data"
    unit = (box / "etcd-member.service").read_text()
    script = box / "sbin" / "etcd-boot"
    settings = box / "etc" / "etcd-boot.env"
    assert "User=root\n" in unit and "Group=root\n" in unit
    assert f"EnvironmentFile={settings}\n" in unit
    assert f"ExecStartPre=+{script} fetch\n" in unit
    assert f"ExecStart={script} run\n" in unit
    assert "TimeoutStartSec=infinity\n" in unit and "Restart=always\n" in unit
    assert script.read_bytes() == SCRIPT.read_bytes()
    assert "INSTANCE_ID=i-1\n" in settings.read_text() and "AWS_DEFAULT_REGION=eu-west-1\n" in settings.read_text()
    assert (box / "aws" / "systemctl").read_text().splitlines() == [
        "daemon-reload", "enable --now --no-block etcd-member.service"]
    assert oct((box / "data").stat().st_mode & 0o777) == "0o700"
    # What systemd would run, with the settings file as the environment:
    settings_env = dict(line.split("=", 1) for line in settings.read_text().splitlines())
    answers(box, ("value", CONFIG))
    fetch = subprocess.run([str(script), "fetch"], env={"PATH": env(box)["PATH"], "FAKE_AWS": str(box / "aws"),
                                                        **settings_env}, capture_output=True, text=True, timeout=20)
    assert fetch.returncode == 0, fetch.stderr
    config = box / "etc" / "etcd.env"
    assert oct(config.stat().st_mode & 0o777) == "0o640"
    run = subprocess.run([str(script), "run"], env={"PATH": env(box)["PATH"], **settings_env},
                         capture_output=True, text=True, timeout=20)
    assert run.returncode == 0, run.stderr
    assert "ETCD_NAME=i-1" in (box / "etcd-env").read_text()


def test_the_default_user_is_etcd_and_the_unit_names_it():
    text = SCRIPT.read_text()
    assert "ETCD_USER=${ETCD_USER:-etcd}" in text
    assert "User=$ETCD_USER" in text

