package main

// Writes of unknown outcome, and histories the checker must refuse to judge.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// elseApplied: a multi-key transaction whose answer was lost took its Else branch (k0's mod
// revision was not the one it compared with) and deleted k1; a watch that kept up for more than
// 10 s after it delivered the delete, never the Then branch's values. Valid: the Then branch is
// ruled out, not the transaction.
func elseApplied() *fx {
	f := newFx()
	f.session(0, 1, 2)
	f.put(k0, "a", 2)
	f.put(k1, "b", 3)
	f.failed(Op{Kind: "txn", Compare: k0, Expect: 99,
		Then: []TxnOp{{Kind: "put", Key: k0, Value: "x"}, {Kind: "put", Key: k1, Value: "y"}},
		Else: []TxnOp{{Kind: "get", Key: k0}, {Kind: "delete", Key: k1}}})
	f.get(k1, 4)
	f.get(k0, 4, kv(k0, "a", 2, 2, 1))
	f.events(0, 1, cl, putEv(kv(k0, "a", 2, 2, 1)))
	f.events(0, 1, cl, putEv(kv(k1, "b", 3, 3, 1)))
	f.events(0, 1, cl, delEv(k1, 4))
	f.progress(0, 1, cl, 4, 11*time.Second)
	return f
}

func TestTransactionOfUnknownOutcomeThatTookItsElseBranch(t *testing.T) {
	s := run(t, &elseApplied().h)
	if s.Result != "ok" || s.Unresolved != 1 {
		t.Fatalf("want ok with the transaction left maybe applied: %s %v (unresolved %d)", s.Result, s.Violations, s.Unresolved)
	}
}

// Its Then branch is still ruled out: a read of what Then would have written is not linearizable.
func TestTransactionOfUnknownOutcomeThenBranchRuledOut(t *testing.T) {
	f := elseApplied()
	f.h.Ops[3].KVs = nil
	f.h.Ops[4].KVs = []KV{kv(k0, "x", 4, 2, 2)}
	rejected(t, &f.h, "read /h/k00=x (mod 4)") // x was never delivered: the watch says it is not there
}

// A write of unknown outcome whose value nobody saw, covered by a watch: not applied. A read of
// the key as if it had been is not linearizable.
func TestWriteOfUnknownOutcomeNeverSeenIsNotApplied(t *testing.T) {
	f := newFx()
	f.session(0, 1, 2)
	f.put(k0, "a", 2)
	f.failed(Op{Kind: "delete", Key: k0})
	f.get(k0, 2, kv(k0, "a", 2, 2, 1))
	f.events(0, 1, cl, putEv(kv(k0, "a", 2, 2, 1)))
	f.progress(0, 1, cl, 2, 11*time.Second)
	accepted(t, &f.h)
	f.h.Ops[2].KVs = nil // the delete applied after all: then the watch must have shown it
	rejected(t, &f.h, "not linearizable")
}

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
			_, err := readHistory(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error with %q, got %v", tc.want, err)
			}
			if code := check([]string{"-history", path, "-html", filepath.Join(t.TempDir(), "h.html")}); code != 3 {
				t.Fatalf("exit %d, want 3", code)
			}
		})
	}
}

// The command on a valid file: exit 0; on a violation: 1.
func TestCommandExitCodes(t *testing.T) {
	dir := t.TempDir()
	for name, want := range map[string]int{"valid": 0, "violation": 1} {
		f := base()
		if name == "violation" {
			f.get(k0, 5, kv(k0, "a", 2, 2, 1))
		}
		path := filepath.Join(dir, name+".jsonl")
		out, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := writeHistory(out, &f.h); err != nil {
			t.Fatal(err)
		}
		out.Close()
		if code := check([]string{"-history", path}); code != want {
			t.Fatalf("%s: exit %d, want %d", name, code, want)
		}
	}
}
