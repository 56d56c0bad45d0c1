"""The application's side of a simulation: the writer (a numbered key stream through the load
balancer) and the client history recorded alongside it and checked (sim/history.py,
docs/clients.md).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from typing import TYPE_CHECKING

from . import etcd, history

if TYPE_CHECKING:
    from .world import Simulation


class Writer(threading.Thread):
    """Writes a numbered key stream through the load balancer, retrying; remembers what was
    acknowledged."""

    PREFIX = "/sim/writes/"

    def __init__(self, sim: "Simulation"):
        super().__init__(daemon=True)
        self.sim = sim
        self.acked: list[int] = []
        self.attempts_failed = 0
        self.longest_stall = 0.0
        self.longest_stall_ended = 0.0  # monotonic time the longest stall ended
        self.stop_flag = threading.Event()

    def run(self):
        n = 0
        last_ok = None  # a stall is the gap between two acknowledged writes
        # Through the load balancer, like an application: one connection kept while it works.
        conn = etcd.Connection(self.sim.client_endpoint)
        while not self.stop_flag.is_set():
            try:
                conn.put(f"{self.PREFIX}{n:08d}", str(n), timeout=1.0)
                now = time.monotonic()
                if last_ok is not None and now - last_ok > self.longest_stall:
                    self.longest_stall, self.longest_stall_ended = now - last_ok, now
                last_ok = now
                self.acked.append(n)
                n += 1
                time.sleep(0.02)
            except etcd.EtcdError:
                self.attempts_failed += 1
                time.sleep(0.05)
        conn.close()

    def stop(self, verify: bool = True):
        """Stops writing; unless the test records through a restore (`start_writer`), the
        client history recorded alongside is stopped and checked too (a violation fails here)."""
        self.stop_flag.set()
        self.join(timeout=5)
        if verify and self.sim.recording is not None and not self.sim.history_through_restore:
            self.sim.verify_history()

    def lost(self) -> list[int]:
        """Acknowledged writes that cannot be read back."""
        for url in self.sim.running_client_urls():
            try:
                found = etcd.keys_with_prefix(url, self.PREFIX)
                return [n for n in self.acked if f"{self.PREFIX}{n:08d}" not in found]
            except etcd.EtcdError:
                continue
        return list(self.acked)


class ClientHistory:
    """Simulation's client history: the writer started with a recording beside it, and its
    check. Uses the simulation's workdir, client endpoint, TLS and CLI (sim/world.py), its
    running members (sim/instances.py) and parameters (sim/aws_side.py)."""

    def start_writer(self, history_through_restore: bool = False, history: bool = True):
        """The writer, and a client history recorded alongside (unless SIM_HISTORY=0, or
        `history` is False: the test starts it later with `start_history`): checked when the
        writer stops, or, `history_through_restore`, when the test says which restores it went
        through (`verify_history`)."""
        if self.writer and not self.writer.is_alive():
            self.writer.start()
        self.history_through_restore = history_through_restore
        if history:
            self.start_history()

    def start_history(self):
        """The Go recorder (tests/history) through the load balancer, as an application: eight
        clientv3 clients (two pinned to members that run now) and two watches, under /history/,
        with a certificate of its own where TLS is on."""
        if self.recording is not None or os.environ.get("SIM_HISTORY", "1") == "0":
            return
        # Before the cluster exists (a writer started before the scale-up): once it converges.
        self._history_pending = self.member_list() is None
        if self._history_pending:
            return
        self.recording = history.Recording(self.workdir, self.client_endpoint, certs=self.history_certs(),
                                           members=self.running_client_urls()[:2], rate=50)
        # What the test does next is what the history is for: it starts once the recording has.
        self.recording.wait_ready()

    def history_certs(self) -> tuple[str, str, str] | None:
        """The recorder's certificate (ca, cert, key) where TLS is on, its etcd user granted
        /history/ (`etcd-asg client-cert`), made once. A test that restores from a backup makes
        it before that backup: the user is in etcd's data, which a restore takes back."""
        if not self.tls:
            return None
        out = os.path.join(self.workdir, "certs-history")
        # Tried again as an operator would: a test's fault layer refuses the CLI's calls too.
        for attempt in range(8):
            if os.path.exists(f"{out}/history.key"):
                break
            r = self.cli("client-cert", "history", "--prefix", "/history/", "--out", out)
            if r.returncode != 0:
                if attempt == 7:
                    raise RuntimeError(f"etcd-asg client-cert history failed: {r.stderr}")
                time.sleep(1)
        return (f"{out}/ca.crt", f"{out}/history.crt", f"{out}/history.key")

    def restores_declared(self) -> list[tuple[int, str]]:
        """Every restore this simulation's function made, oldest first: (the backup's revision,
        "backup"), from the restore fences (`<prefix>/restored/<fence>`, each the new record
        with the snapshot it came from)."""
        records = [json.loads(v) for k, v in self.parameters().items() if k.startswith(f"{self.prefix}/restored/")]
        records.sort(key=lambda r: r["created_at"])
        out = []
        for r in records:
            key = r["restored_from"]["snapshot"]["key"]
            out.append((self.snapshot_holds(key), "backup"))
        return out

    def snapshot_holds(self, key: str) -> int:
        """The revision the backup `key` holds: its manifest's (read from the snapshot's own
        database as it streamed), else the one its key names, read before it streamed (a lower
        bound: a cut declared there lets writes go that the restore kept)."""
        manifest = self.manifest(key)
        if manifest is not None:
            return int(manifest["revision"])
        return int(re.search(r"-rev(\d+)", key).group(1))

    def snapshot_revisions_unread(self) -> list[str]:
        """The function's warnings that a snapshot's own revision could not be read from it (or
        read below the one read before it): the simulation's snapshots are etcd's, whole, so
        each is a defect of the reading (`src/snapshot/bolt.rs`)."""
        out = []
        try:
            with open(os.path.join(self.workdir, "function.log")) as f:
                for line in f:
                    if "the manifest keeps the one read before" in line:
                        out.append(line.strip()[:400])
        except OSError:
            pass
        return out

    def verify_history(self, restores: list[tuple[int, str]] | None = None) -> dict:
        """Stops the recording and checks it (sim/history.py): the checker's summary; a
        violation, or a check that could not finish, fails with its witness. `restores` are
        the declared cuts; None: none unless the test started it `history_through_restore`,
        then every restore the function made."""
        rec, self.recording = self.recording, None
        if rec is None:
            raise AssertionError("no history is being recorded")
        if restores is None:
            restores = self.restores_declared() if self.history_through_restore else []
        # The members' logs settle writes of unknown outcome (`history check -wal`): every data
        # directory the simulation's instances had, replaced and restored members' too. (Once
        # off here: the checker took a committed write for an applied one, and etcd refuses some
        # it committed, under NOSPACE (the hibernation fence, the nemesis's `nospace`) or for an
        # auth revision gone by; tests/history/internal/wal `judge`.)
        wal_dirs = self.member_data_dirs()
        self.history_summary = history.verified(rec.stop(), restores, label=self.group, wal_dirs=wal_dirs)
        s = self.history_summary
        history.note(s, etcd.version_of(self.etcd_bin))
        print(f"history: {s['ops']} operations ({s['failed']} failed, {s['unresolved_writes']} of unknown outcome), "
              f"{s['watch_events']} watch events, {s['watch_compacted']} watches compacted; linearizable, "
              f"watches as promised; longest without success {s['longest_without_success_ms']} ms; "
              f"restores {s.get('restores', [])}; members' logs {s.get('wal')}; checked in {s['check_ms']} ms")
        return s
