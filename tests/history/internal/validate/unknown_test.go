package validate

// Writes of unknown outcome, and histories the checker must refuse to judge.

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"etcd-asg-lifecycle/tests/history/internal/history"
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
	f.failed(history.Op{Kind: "txn", Compare: k0, Expect: 99,
		Then: []history.TxnOp{{Kind: "put", Key: k0, Value: "x"}, {Kind: "put", Key: k1, Value: "y"}},
		Else: []history.TxnOp{{Kind: "get", Key: k0}, {Kind: "delete", Key: k1}}})
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
	f.h.Ops[4].KVs = []history.KV{kv(k0, "x", 4, 2, 2)}
	rejected(t, &f.h, "read /h/k00=x (mod 4)") // x was never delivered: the watch says it is not there
}

// A write of unknown outcome whose value nobody saw, covered by a watch: not applied. A read of
// the key as if it had been is not linearizable.
func TestWriteOfUnknownOutcomeNeverSeenIsNotApplied(t *testing.T) {
	f := newFx()
	f.session(0, 1, 2)
	f.put(k0, "a", 2)
	f.failed(history.Op{Kind: "delete", Key: k0})
	f.get(k0, 2, kv(k0, "a", 2, 2, 1))
	f.events(0, 1, cl, putEv(kv(k0, "a", 2, 2, 1)))
	f.progress(0, 1, cl, 2, 11*time.Second)
	accepted(t, &f.h)
	f.h.Ops[2].KVs = nil // the delete applied after all: then the watch must have shown it
	rejected(t, &f.h, "not linearizable")
}

// The command's tests (main_test.go) run on these fixtures, written to ../../testdata: the base
// history, the base with a stale read, and unknownWrites. They are written as the fixtures stand
// (UPDATE_TESTDATA=1) or checked to match them.
func TestCommandFixtures(t *testing.T) {
	stale := base()
	stale.get(k0, 5, kv(k0, "a", 2, 2, 1))
	for name, h := range map[string]*history.History{"valid": &base().h, "violation": &stale.h, "unknown-writes": &unknownWrites().h} {
		var b bytes.Buffer
		if err := history.Write(&b, h); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("..", "..", "testdata", name+".jsonl")
		if os.Getenv("UPDATE_TESTDATA") != "" {
			if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, b.Bytes()) {
			t.Fatalf("%s differs from its fixture (%v): run with UPDATE_TESTDATA=1", path, err)
		}
	}
}
