"""boot/etcd-boot.sh on its own: the checksum gate, the fetch-before-every-start rule, AWS errors in
the log, the service it installs, and the restore of a snapshot from S3. `aws`, `systemctl`, etcd,
etcdutl and etcdctl are stand-ins on PATH; nothing leaves the machine (downloads are file:// URLs)."""

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
# and records every call in $FAKE_AWS/calls. `s3 cp s3://B/K DEST` copies $FAKE_AWS/s3/B/K (an
# error-N file fails that call instead), noting the AWS_ENDPOINT_URL it saw in s3-endpoint.
FAKE_AWS = r"""#!/bin/bash
dir=$FAKE_AWS
echo "$*" >> "$dir/calls"
n=$(wc -l < "$dir/calls")
if [ -f "$dir/error-$n" ]; then cat "$dir/error-$n" >&2; exit 255; fi
if [ "$1" = s3 ]; then
    echo "${AWS_ENDPOINT_URL:-}" > "$dir/s3-endpoint"
    url=${*: -2:1}
    if [ -f "$dir/s3/${url#s3://}" ]; then cp "$dir/s3/${url#s3://}" "${*: -1}"; exit 0; fi
    echo "fatal error: An error occurred (404) when calling the HeadObject operation: Not Found" >&2
    exit 1
fi
if [ -f "$dir/value-$n" ]; then cat "$dir/value-$n"; exit 0; fi
echo "An error occurred (ParameterNotFound) when calling the GetParameter operation: Parameter not found." >&2
exit 254
"""

FAKE_ETCD = """#!/bin/bash
env | sort > "$ETCD_DATA_DIR/../etcd-env"
echo "$(id -un)" > "$ETCD_DATA_DIR/../etcd-user"
"""

# A stand-in etcdutl / etcdctl: records its name, ETCDCTL_API and arguments in
# $FAKE_AWS/restore-calls, and "restores" `snapshot restore FILE ... --data-dir DIR` as etcd does
# (DIR must not exist; a WAL and the db appear), refusing a FILE that says "corrupt" as etcd's own
# integrity check would. Its --help lists --bump-revision when $FAKE_AWS/bump exists (etcdutl
# 3.5.10+), and then it refuses --bump-revision without --mark-compacted, as etcdutl does.
FAKE_RESTORE = r"""#!/bin/bash
if [ "$3" = --help ]; then
    echo "      --data-dir string   Path to the output data directory"
    if [ -e "$FAKE_AWS/bump" ]; then
        echo "      --bump-revision uint   How much to increase the latest revision after restore"
        echo "      --mark-compacted       Mark the latest revision after restore as the point of scheduled compaction"
    fi
    exit 0
fi
case " $* " in *" --bump-revision "*)
    [ -e "$FAKE_AWS/bump" ] || { echo "Error: unknown flag: --bump-revision" >&2; exit 1; }
    case " $* " in *" --mark-compacted "*) ;; *) echo "Error: --mark-compacted required" >&2; exit 1;; esac;;
esac
echo "$(basename "$0") ETCDCTL_API=${ETCDCTL_API:-} $*" >> "$FAKE_AWS/restore-calls"
file=$3
while [ $# -gt 0 ]; do if [ "$1" = --data-dir ]; then dir=$2; fi; shift; done
if grep -q corrupt "$file"; then echo "Error: expected sha256 [0 0 0], got [1 2 3]" >&2; exit 1; fi
if [ -e "$dir" ]; then echo "Error: data-dir \"$dir\" exists" >&2; exit 1; fi
mkdir -p "$dir/member/wal" "$dir/member/snap"
cp "$file" "$dir/member/snap/db"
: > "$dir/member/wal/0000000000000000-0000000000000000.wal"
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
        for name in ("etcd", "etcdctl", "etcdutl"):
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
    assert (box / "opt" / "etcdutl").exists(), "etcdutl (3.5+) restores snapshots: installed too"
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


@pytest.mark.parametrize("declared,runs,starts", [
    ("3.6.17", "3.6.17", True),
    ("3.7.0", "3.7.0-rc.0", True),  # a pre-release counts as its release, as the function reads it
    ("3.6.17", "3.5.36", False),
])
def test_etcd_starts_only_if_it_is_the_release_the_config_names(box, declared, runs, starts):
    (box / "bin" / "etcd").write_text(
        f'#!/bin/bash\nif [ "$1" = --version ]; then echo "etcd Version: {runs}"; exit 0; fi\n' + FAKE_ETCD[12:])
    (box / "bin" / "etcd").chmod(0o755)
    answers(box, ("value", CONFIG + f"ETCD_ASG_ETCD_VERSION={declared}\n"))
    r = boot(box, "exec")
    if starts:
        assert r.returncode == 0, r.stderr
        assert "ETCD_ASG_ETCD_VERSION" not in (box / "etc" / "etcd.env").read_text()
    else:
        assert r.returncode == 5, r.stderr
        assert f"REFUSING to start: the config is for etcd {declared}" in r.stderr and runs in r.stderr
        assert not (box / "etcd-env").exists(), "etcd never ran"


def test_a_long_wait_polls_less_and_less_often(box):
    # A `sleep` that notes each pause it is asked for, and takes it.
    (box / "bin" / "sleep").write_text('#!/bin/bash\necho "$1" >> "$FAKE_AWS/pauses"\nexec /bin/sleep "$1"\n')
    (box / "bin" / "sleep").chmod(0o755)
    answers(box, *([None] * 40), ("value", CONFIG))
    r = boot(box, "fetch", POLL_SECONDS="0.05", POLL_MAX_SECONDS="0.3")
    assert r.returncode == 0, r.stderr
    pauses = [float(p) for p in (box / "aws" / "pauses").read_text().split()]
    # POLL_SECONDS while the wait is short, then a tenth of the wait so far (bash counts whole
    # seconds: 0.1 from 1 s, 0.2 from 2 s), never more than POLL_MAX_SECONDS.
    # (The first may be 0.1: bash's SECONDS ticks on the clock's second, maybe just after the start.)
    assert len(pauses) == 40 and pauses[0] in (0.05, 0.1), pauses
    assert pauses == sorted(pauses) and pauses[-1] == 0.3 and set(pauses) <= {0.05, 0.1, 0.2, 0.3}, pauses


DENIED = ("An error occurred (AccessDeniedException) when calling the GetParameter operation: "
          "User: arn:aws:sts::1:assumed-role/r/i-1 is not authorized to perform: ssm:GetParameter")


def test_aws_errors_are_logged_with_their_message_and_retried(box):
    answers(box, ("error", "Could not connect to the endpoint URL"), ("error", "Rate exceeded"), ("value", CONFIG))
    r = boot(box, "fetch")
    assert r.returncode == 0, r.stderr
    assert "Could not connect to the endpoint URL" in r.stderr and "Rate exceeded" in r.stderr
    assert r.stderr.count("retrying in 1s") == 2  # MAX_BACKOFF=1 here
    assert "ParameterNotFound" not in r.stderr, "waiting for the parameter is not an error"


def test_access_denied_is_a_quiet_wait_within_the_grace(box):
    # A parameter not written yet carries no tag: the tag-conditioned Allow answers AccessDenied.
    answers(box, ("error", DENIED), ("error", DENIED), ("value", CONFIG))
    r = boot(box, "fetch")
    assert r.returncode == 0, r.stderr
    assert "AccessDenied" not in r.stderr and "ERROR" not in r.stderr and "retrying" not in r.stderr, r.stderr


def test_access_denied_past_the_grace_names_the_likely_cause_and_waits_on(box):
    answers(box, *([("error", DENIED)] * 4), ("value", CONFIG))
    r = boot(box, "fetch", DENIED_GRACE_SECONDS="0", DENIED_LOG_SECONDS="3600")
    assert r.returncode == 0, r.stderr
    said = [line for line in r.stderr.splitlines() if "still denied" in line]
    assert len(said) == 1, r.stderr  # once per DENIED_LOG_SECONDS
    assert "ERROR: /etcd-asg-lifecycle/test/members/i-1 still denied" in said[0]
    assert "etcd-asg-instance-arn tag" in said[0] and "not authorized to perform: ssm:GetParameter" in said[0]
    assert "config written" in r.stderr


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


def pem(kind, body):
    return f"-----BEGIN {kind}-----\n{body}\n-----END {kind}-----\n"


@pytest.mark.parametrize("with_token_key", [True, False])
def test_a_tls_bundle_is_split_0600_and_the_token_key_makes_members_sign_tokens(box, with_token_key):
    (box / "bin" / "etcd").write_text(FAKE_ETCD)
    (box / "bin" / "etcd").chmod(0o755)
    bundle = pem("CERTIFICATE", "Y2E=") + pem("CERTIFICATE", "bWVtYmVy") + pem("PRIVATE KEY", "bWVtYmVyLWtleQ==")
    if with_token_key:
        bundle += pem("PRIVATE KEY", "dG9rZW4ta2V5")
    answers(box, ("value", CONFIG + "ETCD_CLIENT_CERT_AUTH=true\n"), ("value", bundle))
    tls = box / "pki"
    r = boot(box, "exec", TLS_DIR=str(tls))
    assert r.returncode == 0, r.stderr
    assert "--with-decryption" in aws_calls(box)[1] and "/etcd-asg-lifecycle/test/tls/i-1" in aws_calls(box)[1]
    assert "bWVtYmVyLWtleQ==" in (tls / "member.key").read_text()
    assert "dG9rZW4ta2V5" not in (tls / "member.key").read_text(), "the member key file holds one key"
    files = ["ca.crt", "member.crt", "member.key"] + (["token.key"] if with_token_key else [])
    assert sorted(p.name for p in tls.iterdir()) == sorted(files)
    for f in files:
        assert (tls / f).stat().st_mode & 0o077 == 0, f
    auth = etcd_env(box)["ETCD_AUTH_TOKEN"]
    if with_token_key:
        # Members sign: the leader's lease revokes and password logins need it (etcd-io/etcd#14616).
        assert auth == f"jwt,priv-key={tls / 'token.key'},sign-method=ES256"
        assert "dG9rZW4ta2V5" in (tls / "token.key").read_text()
    else:
        assert auth == f"jwt,pub-key={tls / 'ca.crt'},sign-method=ES256"
    assert "dG9rZW4ta2V5" not in r.stderr and "bWVtYmVyLWtleQ==" not in r.stderr, "keys never reach the log"


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



# --- restoring a snapshot (issue 8): the seed of a cluster whose every member was lost -----------

SNAPSHOT = b"etcd snapshot bytes " * 1000
BUCKET_KEY = "backups/etcd-asg-lifecycle/test/tok-1/20240101T000000Z-rev42.db"
RESTORE_URL = f"s3://{BUCKET_KEY}"


def restore_config(sha=hashlib.sha256(SNAPSHOT).hexdigest(), url=RESTORE_URL):
    lines = [f"ETCD_ASG_RESTORE_URL={url}"] if url is not None else []
    lines += [f"ETCD_ASG_RESTORE_SHA256={sha}"] if sha is not None else []
    return CONFIG + "".join(line + "\n" for line in lines)


def restore_box(box, stored=SNAPSHOT, tools=("etcdutl", "etcdctl")):
    """etcd, and the restore tools beside it; the snapshot in the stand-in bucket."""
    for name, text in (("etcd", FAKE_ETCD), *((t, FAKE_RESTORE) for t in tools)):
        (box / "bin" / name).write_text(text)
        (box / "bin" / name).chmod(0o755)
    obj = box / "aws" / "s3" / BUCKET_KEY
    obj.parent.mkdir(parents=True)
    obj.write_bytes(stored)


def restore_calls(box):
    calls = box / "aws" / "restore-calls"
    return calls.read_text().splitlines() if calls.exists() else []


def etcd_env(box):
    return dict(line.split("=", 1) for line in (box / "etcd-env").read_text().splitlines())


def assert_refused_and_nothing_left(box, r):
    assert r.returncode == 4, r.stderr
    assert "etcd not started" in r.stderr
    assert not (box / "etcd-env").exists(), "etcd must not start"
    assert list((box / "data").iterdir()) == [], "nothing left in DATA_DIR"
    assert not (box / "data.restore").exists(), "the work directory is cleaned up"
    assert not (box / "etc" / "etcd.env").exists() and not (box / "etc" / "etcd.env.tmp").exists()


def test_a_restore_is_verified_restored_with_the_configs_identity_and_never_reaches_etcd(box):
    restore_box(box)
    # A start that failed before (no WAL) left member/snap behind: the restore replaces it.
    (box / "data" / "member" / "snap").mkdir(parents=True)
    (box / "data" / "member" / "snap" / "stale").write_text("")
    answers(box, ("value", restore_config(sha=hashlib.sha256(SNAPSHOT).hexdigest().upper())))
    r = boot(box, "exec", AWS_ENDPOINT_URL="http://127.0.0.1:4566")
    assert r.returncode == 0, r.stderr
    # Downloaded with the CLI, through the endpoint the environment names (the simulation's).
    (_, s3) = aws_calls(box)
    assert s3.startswith("s3 cp ") and s3.endswith(f" {RESTORE_URL} {box / 'data.restore' / 'snapshot.db'}")
    assert (box / "aws" / "s3-endpoint").read_text() == "http://127.0.0.1:4566\n"
    # Restored with etcdutl beside ETCD_BIN, as the config's member, into a fresh directory.
    (call,) = restore_calls(box)
    assert call == ("etcdutl ETCDCTL_API=3 snapshot restore " + str(box / "data.restore" / "snapshot.db") +
                    " --name i-1 --initial-cluster i-1=http://10.0.0.1:2380 --initial-cluster-token t"
                    " --initial-advertise-peer-urls http://10.0.0.1:2380 --data-dir " + str(box / "data.restore" / "data"))
    # Moved into place; the work directory is gone.
    assert (box / "data" / "member" / "snap" / "db").read_bytes() == SNAPSHOT
    assert not (box / "data" / "member" / "snap" / "stale").exists()
    assert [p.name for p in (box / "data" / "member" / "wal").iterdir()]
    assert sorted(p.name for p in (box / "data").iterdir()) == ["member"]
    assert not (box / "data.restore").exists()
    digest = hashlib.sha256(SNAPSHOT).hexdigest()
    assert f"restored {RESTORE_URL} (revision 42, SHA-256 {digest}, {len(SNAPSHOT)} bytes)" in r.stderr
    # The restore lines reach neither the config file nor etcd's environment.
    assert "ETCD_ASG" not in (box / "etc" / "etcd.env").read_text()
    assert not [k for k in etcd_env(box) if k.startswith("ETCD_ASG")]
    assert etcd_env(box)["ETCD_NAME"] == "i-1"


@pytest.mark.parametrize("setting, bump", [({"RESTORE_BUMP_REVISION": "5000"}, "5000"),
                                           ({}, "1000000000")])  # the default: etcd's recovery guide's
def test_a_restore_moves_the_revision_forward_where_the_tool_can(box, setting, bump):
    restore_box(box)
    (box / "aws" / "bump").touch()  # this etcdutl has --bump-revision (3.5.10+)
    answers(box, ("value", restore_config()))
    r = boot(box, "exec", **setting)
    assert r.returncode == 0, r.stderr
    (call,) = restore_calls(box)
    assert call.startswith("etcdutl ETCDCTL_API=3 snapshot restore ")
    assert f" --bump-revision {bump} --mark-compacted --data-dir " in call
    assert f"revision moved {bump} forward, marked compacted" in r.stderr


def test_a_tool_without_the_bump_restores_and_says_revisions_did_not_move(box):
    restore_box(box, tools=("etcdctl",))  # 3.4: etcdctl restores, with no --bump-revision
    answers(box, ("value", restore_config()))
    r = boot(box, "exec")
    assert r.returncode == 0, r.stderr
    (call,) = restore_calls(box)
    assert call.startswith("etcdctl ") and "--bump-revision" not in call and "--mark-compacted" not in call
    assert "revision NOT moved forward" in r.stderr


def test_the_restore_is_skipped_once_the_member_has_a_wal(box):
    restore_box(box)
    answers(box, ("value", restore_config()), None, ("value", restore_config()))  # call 2 is the S3 download
    assert boot(box, "fetch").returncode == 0
    assert len(restore_calls(box)) == 1 and len(aws_calls(box)) == 2
    # Every later start: the member has data and its config; neither SSM nor S3 is asked.
    r = boot(box, "fetch")
    assert r.returncode == 0 and "keeping the config it started with" in r.stderr
    assert len(restore_calls(box)) == 1 and len(aws_calls(box)) == 2
    # The config file lost (the WAL kept): fetched again, still not restored over the data.
    (box / "etc" / "etcd.env").unlink()
    (box / "data" / "member" / "snap" / "db").write_text("newer data")
    r = boot(box, "fetch")
    assert r.returncode == 0, r.stderr
    assert f"not restoring {RESTORE_URL} again" in r.stderr
    assert len(restore_calls(box)) == 1 and [c.split()[0] for c in aws_calls(box)] == ["ssm", "s3", "ssm"]
    assert (box / "data" / "member" / "snap" / "db").read_text() == "newer data"
    assert "ETCD_ASG" not in (box / "etc" / "etcd.env").read_text()


def test_a_checksum_mismatch_refuses_with_a_clear_line_and_starts_nothing(box):
    restore_box(box, stored=SNAPSHOT.replace(b"bytes", b"bytez", 1))
    answers(box, ("value", restore_config()))
    r = boot(box, "exec")
    assert f"REFUSING to restore {RESTORE_URL}: its SHA-256 is " in r.stderr
    assert f"expected ETCD_ASG_RESTORE_SHA256={hashlib.sha256(SNAPSHOT).hexdigest()}" in r.stderr
    assert restore_calls(box) == [], "nothing is restored from a download that does not match"
    assert_refused_and_nothing_left(box, r)


def test_a_truncated_download_is_refused(box):
    restore_box(box, stored=SNAPSHOT[: len(SNAPSHOT) // 2])
    answers(box, ("value", restore_config()))
    r = boot(box, "exec")
    assert f"REFUSING to restore {RESTORE_URL}: its SHA-256 is " in r.stderr
    assert f"({len(SNAPSHOT) // 2} bytes)" in r.stderr
    assert_refused_and_nothing_left(box, r)


def test_a_snapshot_etcd_refuses_leaves_nothing_behind(box):
    """The SHA-256 matches what the function recorded, but etcd's own integrity check fails."""
    corrupt = b"corrupt " + SNAPSHOT
    restore_box(box, stored=corrupt)
    answers(box, ("value", restore_config(sha=hashlib.sha256(corrupt).hexdigest())))
    r = boot(box, "exec")
    assert "snapshot restore of " + RESTORE_URL + " failed" in r.stderr
    assert "expected sha256" in r.stderr, "etcd's own message is in the log"
    assert_refused_and_nothing_left(box, r)


@pytest.mark.parametrize("url,sha", [(RESTORE_URL, None), (None, "a" * 64), (RESTORE_URL, "a" * 63),
                                     ("https://example.com/x.db", "a" * 64)])
def test_an_incomplete_or_malformed_restore_request_is_refused(box, url, sha):
    restore_box(box)
    answers(box, ("value", restore_config(sha=sha, url=url)))
    r = boot(box, "exec")
    assert "REFUSING to restore" in r.stderr
    assert [c.split()[0] for c in aws_calls(box)] == ["ssm"], "nothing downloaded"
    assert_refused_and_nothing_left(box, r)


def test_s3_errors_are_logged_with_their_message_and_retried(box):
    restore_box(box)
    denied = ("An error occurred (AccessDenied) when calling the GetObject operation: User: "
              "arn:aws:sts::1:assumed-role/r/i-1 is not authorized to perform: s3:GetObject")
    answers(box, ("value", restore_config()), ("error", denied))
    r = boot(box, "exec")
    assert r.returncode == 0, r.stderr
    assert denied in r.stderr
    assert f"download of {RESTORE_URL} failed (try 1 of 8); retrying in 1s" in r.stderr
    assert len(restore_calls(box)) == 1


def test_an_object_that_never_downloads_is_given_up_on_and_nothing_starts(box):
    restore_box(box)
    (box / "aws" / "s3" / BUCKET_KEY).unlink()
    answers(box, ("value", restore_config()))
    r = boot(box, "exec", timeout=60)
    assert "(404) when calling the HeadObject operation" in r.stderr
    assert f"download of {RESTORE_URL} failed 8 times; giving up" in r.stderr
    assert_refused_and_nothing_left(box, r)


def test_etcdctl_restores_with_api_3_when_there_is_no_etcdutl(box):
    """etcd 3.4 has no etcdutl: `ETCDCTL_API=3 etcdctl snapshot restore` with the same flags."""
    restore_box(box, tools=("etcdctl",))
    answers(box, ("value", restore_config()))
    r = boot(box, "exec")
    assert r.returncode == 0, r.stderr
    (call,) = restore_calls(box)
    assert call.startswith("etcdctl ETCDCTL_API=3 snapshot restore ")
    assert f"with {box / 'bin' / 'etcdctl'}" in r.stderr


def test_restore_tools_can_be_named_and_the_service_keeps_them(box):
    restore_box(box, tools=())
    tools = box / "tools"
    tools.mkdir()
    (tools / "my-etcdutl").write_text(FAKE_RESTORE)
    (tools / "my-etcdutl").chmod(0o755)
    answers(box, ("value", restore_config()))
    r = boot(box, "exec", ETCDUTL_BIN=str(tools / "my-etcdutl"))
    assert r.returncode == 0, r.stderr
    assert restore_calls(box)[0].startswith("my-etcdutl ")
    r = boot(box, "systemd", ETCDUTL_BIN=str(tools / "my-etcdutl"), ETCDCTL_BIN="/opt/etcdctl")
    assert r.returncode == 0, r.stderr
    settings = (box / "etc" / "etcd-boot.env").read_text()
    assert f"ETCDUTL_BIN={tools / 'my-etcdutl'}\n" in settings and "ETCDCTL_BIN=/opt/etcdctl\n" in settings
