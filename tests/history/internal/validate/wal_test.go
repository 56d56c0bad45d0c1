package validate

// Writes of unknown outcome settled by a member's log: a small WAL written by etcd's own wal
// package, as a member writes it.

import (
	"path/filepath"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"

	"etcd-asg-lifecycle/tests/history/internal/history"
)

// createWAL: a new member's data directory of cluster cl and its WAL, as etcd creates them.
func createWAL(t *testing.T) (string, *wal.WAL) {
	t.Helper()
	dir := t.TempDir()
	md, err := (&pb.Metadata{NodeID: 1, ClusterID: cl}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	w, err := wal.Create(zap.NewNop(), filepath.Join(dir, "member", "wal"), md)
	if err != nil {
		t.Fatal(err)
	}
	return dir, w
}

// writeWAL writes a member's data directory whose log holds these requests from index 1, all
// committed: its path.
func writeWAL(t *testing.T, reqs ...*pb.InternalRaftRequest) string {
	t.Helper()
	dir, w := createWAL(t)
	ents := []raftpb.Entry{{Index: 1, Term: 1, Type: raftpb.EntryNormal}} // a new leader's empty entry
	for _, r := range reqs {
		data, err := r.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		ents = append(ents, raftpb.Entry{Index: uint64(len(ents) + 1), Term: 1, Type: raftpb.EntryNormal, Data: data})
	}
	if err := w.Save(raftpb.HardState{Term: 1, Vote: 1, Commit: uint64(len(ents))}, ents); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// writeRestoredWAL writes a member's data directory as etcdutl's `snapshot restore` leaves it
// (one member: a configuration change at index 1, committed, a snapshot at 1), then the
// requests the restored member committed after it: its path.
func writeRestoredWAL(t *testing.T, reqs ...*pb.InternalRaftRequest) string {
	t.Helper()
	dir, w := createWAL(t)
	cc, err := (&raftpb.ConfChange{Type: raftpb.ConfChangeAddNode, NodeID: 1}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	ents := []raftpb.Entry{{Index: 1, Term: 1, Type: raftpb.EntryConfChange, Data: cc}}
	if err := w.Save(raftpb.HardState{Term: 1, Vote: 1, Commit: 1}, ents); err != nil {
		t.Fatal(err)
	}
	if err := w.SaveSnapshot(walpb.Snapshot{Index: 1, Term: 1, ConfState: &raftpb.ConfState{Voters: []uint64{1}}}); err != nil {
		t.Fatal(err)
	}
	ents = []raftpb.Entry{{Index: 2, Term: 2, Type: raftpb.EntryNormal}}
	for _, r := range reqs {
		data, err := r.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		ents = append(ents, raftpb.Entry{Index: uint64(len(ents) + 2), Term: 2, Type: raftpb.EntryNormal, Data: data})
	}
	if err := w.Save(raftpb.HardState{Term: 2, Vote: 1, Commit: uint64(len(ents) + 1)}, ents); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func putReq(key, value string) *pb.InternalRaftRequest {
	return &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte(key), Value: []byte(value)}}
}

// unknownWrites: k0=a acknowledged; k0=x's answer lost (the log has it: applied, at revision 3);
// k1=b acknowledged; k1=y's answer lost (no log has it: not applied). Reads agree.
func unknownWrites() *fx {
	f := newFx()
	f.put(k0, "a", 2)
	f.failed(history.Op{Kind: "put", Key: k0, Value: "x"})
	f.put(k1, "b", 4)
	f.failed(history.Op{Kind: "put", Key: k1, Value: "y"})
	f.get(k0, 4, kv(k0, "x", 3, 2, 2))
	f.get(k1, 4, kv(k1, "b", 4, 4, 1))
	return f
}

func runWAL(t *testing.T, h *history.History, dirs ...string) Summary {
	t.Helper()
	c := &checker{h: h, Options: Options{Timeout: 5 * time.Second, HTML: filepath.Join(t.TempDir(), "h.html"), WALDirs: dirs}}
	c.run()
	return c.sum
}

func TestWALSettlesWritesOfUnknownOutcome(t *testing.T) {
	dir := writeWAL(t, putReq(k0, "a"), putReq(k0, "x"), putReq(k1, "b"))
	if s := run(t, &unknownWrites().h); s.Result != "ok" || s.Unresolved != 2 {
		t.Fatalf("without the WAL: want ok with both writes maybe applied: %s %v (unresolved %d)", s.Result, s.Violations, s.Unresolved)
	}
	s := runWAL(t, &unknownWrites().h, dir)
	if s.Result != "ok" || s.Unresolved != 0 || s.WAL == nil || s.WAL.Applied != 1 || s.WAL.NotApplied != 1 {
		t.Fatalf("with the WAL: want ok, k0=x applied and k1=y not: %s %v (unresolved %d, wal %+v)", s.Result, s.Violations, s.Unresolved, s.WAL)
	}
	// k1=y not applied: a read of it is now a violation (without the log it was a maybe).
	f := unknownWrites()
	f.get(k1, 5, kv(k1, "y", 5, 4, 2))
	accepted(t, &f.h)
	if s := runWAL(t, &f.h, dir); s.Result != "violation" {
		t.Fatalf("a read of a write no member persisted: %s", s.Result)
	}
	// k0=x applied before k1=b was acknowledged: a read after that of k0=a is a violation.
	f = unknownWrites()
	f.h.Ops = f.h.Ops[:4]
	f.get(k0, 4, kv(k0, "a", 2, 2, 1))
	accepted(t, &f.h)
	if s := runWAL(t, &f.h, dir); s.Result != "violation" {
		t.Fatalf("a read that missed a write persisted before an acknowledged one: %s", s.Result)
	}
}

// A directory the checker cannot read settles nothing as not applied.
func TestUnreadableWALDirectory(t *testing.T) {
	dir := writeWAL(t, putReq(k0, "a"), putReq(k0, "x"), putReq(k1, "b"))
	s := runWAL(t, &unknownWrites().h, dir, filepath.Join(t.TempDir(), "missing"))
	if s.Result != "ok" || s.WAL.Read != 1 || s.WAL.NotApplied != 0 || s.Unresolved != 1 {
		t.Fatalf("one directory unreadable: want k0=x applied, k1=y left maybe: %s %v (unresolved %d, wal %+v)", s.Result, s.Violations, s.Unresolved, s.WAL)
	}
}

// A restored member's log is whole from index 1, but its state is the backup's: a write of
// unknown outcome sent before the restored cluster's first answer may be in that backup (a
// survivor's snapshot taken after it applied) and in no entry. Absent from the log, it stays a
// maybe; sent after an acknowledged write the log holds, it is settled as before.
func TestARestoredLogSettlesNothingFromBeforeItsFirstAnswer(t *testing.T) {
	f := newFx()
	f.failed(history.Op{Kind: "put", Key: k1, Value: "y"}) // its answer lost, before any answer
	f.put(k0, "a", 3)
	f.get(k1, 3, kv(k1, "y", 2, 2, 1)) // the backup held it
	accepted(t, &f.h)
	if s := runWAL(t, &f.h, writeWAL(t, putReq(k0, "a"))); s.Result != "violation" {
		t.Fatalf("a log whole from its first index, not restored: k1=y is settled not applied, and read: %s", s.Result)
	}
	if s := runWAL(t, &f.h, writeRestoredWAL(t, putReq(k0, "a"))); s.Result != "ok" || s.WAL.NotApplied != 0 {
		t.Fatalf("a restored log: k1=y may be the backup's: %s %v (wal %+v)", s.Result, s.Violations, s.WAL)
	}
	// Sent after k0=a's answer, which the restored log holds: absent, it was not applied.
	g := newFx()
	g.put(k0, "a", 2)
	g.failed(history.Op{Kind: "put", Key: k1, Value: "z"})
	g.put(k0, "b", 3)
	if s := runWAL(t, &g.h, writeRestoredWAL(t, putReq(k0, "a"), putReq(k0, "b"))); s.Result != "ok" || s.WAL.NotApplied != 1 {
		t.Fatalf("a restored log, a write sent after an answer it holds: want settled not applied: %s %v (wal %+v)", s.Result, s.Violations, s.WAL)
	}
}

func alarmReq(action pb.AlarmRequest_AlarmAction) *pb.InternalRaftRequest {
	return &pb.InternalRaftRequest{Alarm: &pb.AlarmRequest{Action: action, MemberID: 1, Alarm: pb.AlarmType_NOSPACE}}
}

// stamped: a request as a member stamps it with authentication on (the user's auth revision).
func stamped(r *pb.InternalRaftRequest, rev uint64) *pb.InternalRaftRequest {
	r.Header = &pb.RequestHeader{Username: "u", AuthRevision: rev}
	return r
}

// k0=a acknowledged; k0=x's answer lost; k1=b acknowledged after; k0 read as a.
func refusedWrite() *fx {
	f := newFx()
	f.put(k0, "a", 2)
	f.failed(history.Op{Kind: "put", Key: k0, Value: "x"})
	f.put(k1, "b", 3)
	f.get(k0, 3, kv(k0, "a", 2, 2, 1))
	return f
}

// Committed is not applied: etcd's applier refuses a put committed while a NOSPACE alarm stands
// (applierV3Capped), so a log that holds k0=x between the alarm's raise and its disarm settles
// it not applied; taken as applied, the read of a after b would be a violation.
func TestAWriteCommittedUnderNOSPACEWasNotApplied(t *testing.T) {
	dir := writeWAL(t, putReq(k0, "a"), alarmReq(pb.AlarmRequest_ACTIVATE), putReq(k0, "x"),
		alarmReq(pb.AlarmRequest_DEACTIVATE), putReq(k1, "b"))
	s := runWAL(t, &refusedWrite().h, dir)
	if s.Result != "ok" || s.WAL.Refused != 1 || s.WAL.NotApplied != 1 || s.Unresolved != 0 {
		t.Fatalf("k0=x refused under NOSPACE: want ok, settled not applied: %s %v (unresolved %d, wal %+v)", s.Result, s.Violations, s.Unresolved, s.WAL)
	}
	// Without the alarm, the same log says k0=x applied before b: the read of a is a violation.
	if s := runWAL(t, &refusedWrite().h, writeWAL(t, putReq(k0, "a"), putReq(k0, "x"), putReq(k1, "b"))); s.Result != "violation" {
		t.Fatalf("k0=x applied before k1=b, then k0 read as a: %s", s.Result)
	}
	// Refused, and read: a violation.
	f := refusedWrite()
	f.get(k0, 4, kv(k0, "x", 4, 2, 2))
	accepted(t, &f.h)
	if s := runWAL(t, &f.h, dir); s.Result != "violation" {
		t.Fatalf("a read of a write refused under NOSPACE: %s", s.Result)
	}
}

// A write stamped before a change of users or roles that precedes it in the log may have been
// refused for its old auth revision (ErrAuthOldRevision): a maybe, never settled applied.
func TestAWriteStampedBeforeAnAuthChangeIsAMaybe(t *testing.T) {
	roleAdd := &pb.InternalRaftRequest{AuthRoleAdd: &pb.AuthRoleAddRequest{Name: "r"}}
	enable := &pb.InternalRaftRequest{AuthEnable: &pb.AuthEnableRequest{}}
	// A fresh store is at auth revision 1; the role added moves it to 2.
	doubtful := writeWAL(t, enable, stamped(putReq(k0, "a"), 1), stamped(roleAdd, 1),
		stamped(putReq(k0, "x"), 1), stamped(putReq(k1, "b"), 2))
	s := runWAL(t, &refusedWrite().h, doubtful)
	if s.Result != "ok" || s.WAL.Doubtful != 1 || s.WAL.Applied != 0 || s.Unresolved != 1 {
		t.Fatalf("k0=x stamped 1 after the store moved to 2: want a maybe: %s %v (unresolved %d, wal %+v)", s.Result, s.Violations, s.Unresolved, s.WAL)
	}
	// Stamped after the change: checked against a store no newer, applied.
	fresh := writeWAL(t, enable, stamped(putReq(k0, "a"), 1), stamped(roleAdd, 1),
		stamped(putReq(k0, "x"), 2), stamped(putReq(k1, "b"), 2))
	if s := runWAL(t, &refusedWrite().h, fresh); s.Result != "violation" || s.WAL.Doubtful != 0 {
		t.Fatalf("k0=x stamped 2, applied before k1=b, then k0 read as a: %s (wal %+v)", s.Result, s.WAL)
	}
}
