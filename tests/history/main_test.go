package main

// The command: input it must refuse, its exit codes, its flags.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"

	"etcd-asg-lifecycle/tests/history/internal/history"
)

func writeLines(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "h.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

const metaLine = `{"meta":{"prefix":"/h/","keys":4,"clients":1,"started":"2026-01-01T00:00:00Z"}}`

// Input the recorder cannot have written is refused (exit 3, the line named), never judged and
// never a panic.
func TestMalformedHistoriesAreRefused(t *testing.T) {
	cases := []struct{ name, line, want string }{
		{"an operation returning before its call",
			`{"op":{"stream":1,"worker":0,"endpoint":"lb","kind":"put","key":"/h/k00","value":"a","call":50,"return":10,"status":"ok","header":{"cluster":"1","member":"1","rev":2}}}`,
			"line 3: stream 1 (worker 0 via lb) put /h/k00=a at 0.000s-0.000s: at revision 2 from member 1 of cluster 1: returns before its call (call 50, return 10)"},
		{"an operation of an unknown kind",
			`{"op":{"stream":1,"worker":0,"endpoint":"lb","kind":"compact","key":"/h/k00","call":1,"return":2,"status":"ok","header":{"cluster":"1","member":"1","rev":2}}}`,
			`line 3: operation of unknown kind "compact"`},
		{"an unknown status",
			`{"op":{"stream":1,"worker":0,"endpoint":"lb","kind":"get","key":"/h/k00","call":1,"return":2,"status":"maybe"}}`,
			`line 3: `},
		{"an answer with no header",
			`{"op":{"stream":1,"worker":0,"endpoint":"lb","kind":"sget","key":"/h/k00","call":1,"return":2,"status":"ok"}}`,
			"line 3: stream 1 (worker 0 via lb) sget /h/k00 at 0.000s-0.000s: read nothing : answered with no response header"},
		{"a transaction operation of an unknown kind",
			`{"op":{"stream":1,"worker":0,"endpoint":"lb","kind":"txn","compare":"/h/k00","then":[{"kind":"lease","key":"/h/k00"}],"call":1,"return":2,"status":"fail"}}`,
			`line 3: `},
		{"a watch event of an unknown type",
			`{"watch":{"watcher":0,"session":1,"time":5,"header":{"cluster":"1","member":"1","rev":2},"events":[{"type":"EXPIRE","kv":{"key":"/h/k00"}}]}}`,
			`line 3: watch 0 session 1: event type "EXPIRE"`},
	}
	ok := `{"op":{"stream":1,"worker":0,"endpoint":"lb","kind":"put","key":"/h/k00","value":"z","call":1,"return":2,"status":"ok","header":{"cluster":"1","member":"1","rev":2}}}`
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := writeLines(t, metaLine, ok, tc.line)
			_, err := history.Read(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error with %q, got %v", tc.want, err)
			}
			if code := check([]string{"-history", path, "-html", filepath.Join(t.TempDir(), "h.html")}); code != 3 {
				t.Fatalf("exit %d, want 3", code)
			}
		})
	}
}

// The command on a valid file: exit 0; on a violation: 1. The files are internal/validate's
// fixtures (its base history, and the base with a stale read), written by its
// TestCommandFixtures.
func TestCommandExitCodes(t *testing.T) {
	for name, want := range map[string]int{"valid": 0, "violation": 1} {
		if code := check([]string{"-history", filepath.Join("testdata", name+".jsonl"),
			"-html", filepath.Join(t.TempDir(), "h.html")}); code != want {
			t.Fatalf("%s: exit %d, want %d", name, code, want)
		}
	}
}

// writeWAL writes a member's data directory whose log holds these puts (key, value, key, value,
// …) from index 2, all committed, as internal/validate's tests write one: its path.
func writeWAL(t *testing.T, kvs ...string) string {
	t.Helper()
	dir := t.TempDir()
	md, err := (&pb.Metadata{NodeID: 1, ClusterID: 0xc1}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	w, err := wal.Create(zap.NewNop(), filepath.Join(dir, "member", "wal"), md)
	if err != nil {
		t.Fatal(err)
	}
	ents := []raftpb.Entry{{Index: 1, Term: 1, Type: raftpb.EntryNormal}} // a new leader's empty entry
	for i := 0; i+1 < len(kvs); i += 2 {
		data, err := (&pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte(kvs[i]), Value: []byte(kvs[i+1])}}).Marshal()
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

// The command takes the data directories (comma-separated): k0=x's lost answer is settled as
// applied, k1=y's as not, and the history passes.
func TestCommandWALFlag(t *testing.T) {
	dir := writeWAL(t, "/h/k00", "a", "/h/k00", "x", "/h/k01", "b")
	missing := filepath.Join(t.TempDir(), "missing")
	if code := check([]string{"-history", filepath.Join("testdata", "unknown-writes.jsonl"),
		"-html", filepath.Join(t.TempDir(), "h.html"), "-wal", dir + "," + missing}); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if code := check([]string{"-history", filepath.Join("testdata", "unknown-writes.jsonl"),
		"-html", filepath.Join(t.TempDir(), "h.html"), "-wal", dir}); code != 0 {
		t.Fatalf("exit %d", code)
	}
}
