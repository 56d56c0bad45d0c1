package validate

// Writes of unknown outcome settled by a member's log: a small WAL written by etcd's own wal
// package, as a member writes it.

import (
	"path/filepath"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"

	"etcd-asg-lifecycle/tests/history/internal/history"
)

// writeWAL writes a member's data directory whose log holds these requests from index 1, all
// committed: its path.
func writeWAL(t *testing.T, reqs ...*pb.InternalRaftRequest) string {
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
