"""The history checker's positive controls, on real etcd (docs/clients.md): histories it must
reject, each with the right witness. A checker that passes everything proves nothing."""

import copy
import json
import os
import random
import shutil
import subprocess
import tempfile
import time

import pytest

from sim import etcd, history, procs
from sim.outside import free
from sim.world import NFT


class Cluster:
    """Three etcd members on loopback addresses of their own (plain HTTP), member 3 run as
    `nobody` so that its own packets can be told apart (nftables' skuid) and it can be cut off
    from its peers while clients still reach it."""

    def __init__(self):
        self.workdir = tempfile.mkdtemp(prefix="history-ctl-")
        os.chmod(self.workdir, 0o755)
        for _ in range(50):
            net = f"127.{random.randint(150, 250)}.{random.randint(1, 250)}"
            self.addresses = [f"{net}.{n}" for n in (1, 2, 3)]
            if all(free(a) for a in self.addresses):
                break
        self.table = f"histctl_{self.addresses[0].replace('.', '_')}"
        initial = ",".join(f"m{n}=http://{a}:2380" for n, a in enumerate(self.addresses, 1))
        token = f"ctl-{os.getpid()}-{random.randint(0, 1 << 30)}"
        self.procs = []
        for n, a in enumerate(self.addresses, 1):
            data = os.path.join(self.workdir, f"m{n}")
            os.mkdir(data, 0o700)
            argv = [etcd.binary(), "--name", f"m{n}", "--data-dir", data,
                    "--listen-client-urls", f"http://{a}:2379", "--advertise-client-urls", f"http://{a}:2379",
                    "--listen-peer-urls", f"http://{a}:2380", "--initial-advertise-peer-urls", f"http://{a}:2380",
                    "--initial-cluster", initial, "--initial-cluster-token", token, "--unsafe-no-fsync"]
            if n == 3:
                shutil.chown(data, "nobody", "nogroup")
                argv = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *argv]
            self.procs.append(procs.spawn(argv, {"PATH": "/usr/bin:/bin"}, os.path.join(self.workdir, f"m{n}.log")))
        deadline = time.monotonic() + 60
        while True:
            try:
                etcd.put(self.url(1), "/ctl/ready", "1", timeout=2)
                break
            except etcd.EtcdError:
                assert time.monotonic() < deadline, "the control cluster did not start"
                time.sleep(0.3)

    def url(self, n: int) -> str:
        return f"http://{self.addresses[n - 1]}:2379"

    def cut_off_member_3(self):
        """Member 3 loses its peers (both ways on 2380); clients still reach it."""
        script = (f"add table inet {self.table}\n"
                  f"add chain inet {self.table} out {{ type filter hook output priority 0 ; }}\n"
                  f"add rule inet {self.table} out meta skuid 65534 tcp dport 2380 drop\n"
                  f"add rule inet {self.table} out ip daddr {self.addresses[2]} tcp dport 2380 drop\n")
        subprocess.run([NFT, "-f", "-"], input=script, text=True, check=True, capture_output=True)

    def heal(self):
        subprocess.run([NFT, "delete", "table", "inet", self.table], capture_output=True)

    def close(self):
        self.heal()
        for p in self.procs:
            procs.stop(p, kill=True)
        shutil.rmtree(self.workdir, ignore_errors=True)


@pytest.fixture
def cluster():
    c = Cluster()
    yield c
    c.close()


def _lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _write(lines, path):
    with open(path, "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    return path


def _violation(path, *expected: str, **kw) -> str:
    code, summary, violations = history.check(path, **kw)
    assert code == 1, (code, summary)
    text = " ".join(violations)
    for e in expected:
        assert e in text, (e, text)
    return text


def _ok_puts(lines):
    """Acknowledged puts by revision: (key, value)."""
    return {(line["op"]["header"]["rev"], line["op"]["key"]): line["op"]["value"]
            for line in lines if "op" in line and line["op"]["kind"] == "put" and line["op"]["status"] == "ok"}


@pytest.mark.v37
def test_the_checker_passes_a_real_history_and_rejects_each_edit_with_its_witness(cluster, tmp_path):
    rec = history.Recording(str(tmp_path), cluster.url(1), members=[cluster.url(2), cluster.url(3)], rate=80)
    time.sleep(10)
    path = rec.stop()
    code, summary, violations = history.check(path)
    assert code == 0, (summary, violations)
    # What etcd's robustness traffic does, all of it answered.
    for kind in ("get", "sget", "range", "put", "delete", "txn", "grant", "revoke", "keepalive"):
        assert summary["by_kind"].get(kind, 0) > 0, (kind, summary["by_kind"])
    assert summary["watch_events"] > 100 and summary["watch_progress"] > 5, summary
    assert summary["ops"] > 500, summary  # the budget: 50 a second with 8 clients
    lines = _lines(path)
    puts = _ok_puts(lines)
    watch = [n for n, line in enumerate(lines) if "watch" in line and line["watch"].get("events")
             and line["watch"]["watcher"] == 0]
    middle = watch[len(watch) // 2:]

    # A watch event dropped: one of an acknowledged put.
    n = next(n for n in middle if len(lines[n]["watch"]["events"]) == 1
             and (lines[n]["watch"]["events"][0]["kv"]["mod"], lines[n]["watch"]["events"][0]["kv"]["key"]) in puts)
    value = lines[n]["watch"]["events"][0]["kv"]["value"]
    edited = [line for k, line in enumerate(lines) if k != n]
    _violation(_write(edited, str(tmp_path / "dropped.jsonl")), "watch 0 session 1", value)

    # Repeated.
    edited = lines[:n + 1] + [copy.deepcopy(lines[n])] + lines[n + 1:]
    _violation(_write(edited, str(tmp_path / "repeated.jsonl")), "delivered twice", value)

    # Two responses swapped (their times too: the later one arrives first).
    a, b = middle[0], middle[1]
    edited = copy.deepcopy(lines)
    edited[a]["watch"], edited[b]["watch"] = edited[b]["watch"], edited[a]["watch"]
    edited[a]["watch"]["time"], edited[b]["watch"]["time"] = lines[a]["watch"]["time"], lines[b]["watch"]["time"]
    # (Where a progress notification lies between the two, the first witness can be that one,
    # now below an event already delivered; where the later response holds a delete of unknown
    # outcome, the witness can be that event, now arriving before the delete was called: each
    # names the swap.)
    text = _violation(_write(edited, str(tmp_path / "reordered.jsonl")), "watch 0")
    assert "out of order" in text or "below the event" in text or "called after the event arrived" in text, text

    # An acknowledged write lost: the final read shows a key as it was before its last write.
    final = next(k for k, line in enumerate(lines) if "op" in line and line["op"].get("final") and line["op"]["kind"] == "range")
    kv = next(kv for kv in lines[final]["op"]["kvs"] if (kv["mod"], kv["key"]) in puts)
    before = [(rev, v) for (rev, key), v in puts.items() if key == kv["key"] and rev < kv["mod"]]
    edited = copy.deepcopy(lines)
    kvs = [x for x in edited[final]["op"]["kvs"] if x["key"] != kv["key"]]
    if before:
        rev, v = max(before)
        kvs.append({**kv, "value": v, "mod": rev})
    edited[final]["op"]["kvs"] = kvs
    _violation(_write(edited, str(tmp_path / "lost.jsonl")), "not linearizable", "range", kv["key"])

    # A stale linearizable read: a get answered with the value before the one it saw.
    def stale_candidate(line):
        op = line.get("op", {})
        if op.get("kind") != "get" or op.get("status") != "ok" or not op.get("kvs"):
            return None
        seen = op["kvs"][0]
        older = [(rev, v) for (rev, key), v in puts.items() if key == seen["key"] and rev < seen["mod"]]
        return (seen, max(older)) if older and (seen["mod"], seen["key"]) in puts else None

    k, (seen, (rev, v)) = next((k, c) for k, line in enumerate(lines) if (c := stale_candidate(line)))
    edited = copy.deepcopy(lines)
    edited[k]["op"]["kvs"][0].update(value=v, mod=rev)
    _violation(_write(edited, str(tmp_path / "stale.jsonl")), "not linearizable", f"get {seen['key']}", v)

    # A second cluster answering with no restore declared: a split.
    calls = sorted(line["op"]["call"] for line in lines if "op" in line)
    half = calls[len(calls) // 2]
    edited = copy.deepcopy(lines)
    for line in edited:
        op = line.get("op")
        if op and op.get("header") and op["call"] > half:
            op["header"]["cluster"] = "12345"
    _violation(_write(edited, str(tmp_path / "split.jsonl")), "split brain", "3039")


@pytest.mark.v37
def test_serializable_reads_of_a_member_cut_off_from_its_peers_are_reported_stale(cluster, tmp_path):
    # Writes through member 1; two clients pinned to member 3 read serializably (its own view).
    rec = history.Recording(str(tmp_path), cluster.url(1), members=[cluster.url(3)], pinned_serializable=True)
    time.sleep(2)
    cluster.cut_off_member_3()
    time.sleep(6)
    cluster.heal()
    time.sleep(3)
    path = rec.stop()
    code, summary, violations = history.check(path)
    # Stale by design, and counted: no violation of what etcd promises serializable reads.
    assert code == 0, (summary, violations)
    assert summary["stale_serializable_reads"] > 0, summary
    assert cluster.url(3) in summary["stale_witness"], summary["stale_witness"]
    # Held to linearizable reads' standard, the same history fails, naming the stale read.
    _violation(path, "serializable reads were stale", "sget", cluster.url(3), fresh_serializable=True)


@pytest.mark.long(120)
def test_a_history_through_two_members_hung_for_90_s_is_decided_from_the_members_logs(cluster, tmp_path):
    """Two of three members hung (SIGSTOP: a stuck disk, a long pause) for 90 s, then resumed:
    hundreds of writes fail with their outcome unknown, which porcupine alone cannot settle in
    time ("unknown", never a pass). Settled from what the members persisted (their WALs, read
    with etcd's own package, as etcd's robustness tests do), the check decides."""
    rec = history.Recording(str(tmp_path), cluster.url(1), members=[cluster.url(1), cluster.url(2)])
    time.sleep(3)
    for p in cluster.procs[1:]:
        procs.pause(p)
    try:
        time.sleep(90)
    finally:
        for p in cluster.procs[1:]:
            procs.resume(p)
    time.sleep(5)
    path = rec.stop()
    dirs = [os.path.join(cluster.workdir, f"m{n}") for n in (1, 2, 3)]
    code, summary, violations = history.check(path, wal_dirs=dirs, timeout="60s")
    print(f"hung members: {summary.get('ops')} operations, {summary.get('failed')} failed, "
          f"{summary.get('unresolved_writes')} left unresolved, wal {summary.get('wal')}, "
          f"checked in {summary.get('check_ms')} ms")
    assert code == 0 and summary["linearizable"] == "ok", (code, summary, violations)
    assert summary["failed"] > 0 and summary["wal"]["read"] == 3, summary
