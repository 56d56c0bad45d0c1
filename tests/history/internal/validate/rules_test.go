package validate

// Each rule: a history only it rejects is rejected with its witness, and accepted with that
// rule off (so the rule, not another, is what catches it). The valid histories pass.

import (
	"testing"
	"time"

	"etcd-asg-lifecycle/tests/history/internal/history"
)

func TestValidHistoriesPass(t *testing.T) {
	accepted(t, &base().h)
}

// ruleCase is a history one rule rejects: built from the base (or from scratch).
type ruleCase struct {
	name  string
	rule  string
	want  string // in the witness
	build func() *fx
}

var ruleCases = []ruleCase{
	// 1. Watch DELETE events nobody caused.
	{"a delete of an absent key", ruleWatchCause, "a key already absent", func() *fx {
		f := base()
		f.failed(history.Op{Kind: "delete", Key: k1}) // something that could delete k1, had it been there
		for w := 0; w < 2; w++ {
			f.events(w, 1, cl, delEv(k1, 6))
		}
		return f
	}},
	{"an acknowledged put delivered as a delete", ruleWatchCause, "which did not delete it", func() *fx {
		f := base()
		f.put(k2, "d", 6)
		f.failed(history.Op{Kind: "delete", Key: k2})
		for w := 0; w < 2; w++ {
			f.events(w, 1, cl, delEv(k2, 6))
		}
		return f
	}},
	{"a delete at a revision no write used", ruleWatchCause, "no client's write can have done", func() *fx {
		f := base()
		f.del(k2, 5, 0) // deleted nothing: k2 was not there
		f.put(k2, "e", 6)
		for w := 0; w < 2; w++ {
			f.events(w, 1, cl, putEv(kv(k2, "e", 6, 6, 1)))
			f.events(w, 1, cl, delEv(k2, 7))
		}
		return f
	}},
	{"a delete delivered before the only write that could cause it was called", ruleWatchCause, "the only write that could was called after the event arrived", func() *fx {
		f := base()
		f.put(k2, "e", 6)
		for w := 0; w < 2; w++ {
			f.events(w, 1, cl, putEv(kv(k2, "e", 6, 6, 1)))
			f.events(w, 1, cl, delEv(k2, 7))
		}
		f.failed(history.Op{Kind: "delete", Key: k2}) // could have deleted k2 at 7, but too late
		return f
	}},
	// 2. Two acknowledged writes at one revision, in two key groups (porcupine sees each alone).
	{"two acknowledged writes at one revision", ruleOneWrite, "two writes at revision 2", func() *fx {
		f := newFx()
		f.put(k0, "a", 2)
		f.put(k2, "x", 2)
		f.get(k2, 2, kv(k2, "x", 2, 2, 1))
		return f
	}},
	{"a write of unknown outcome shown at an acknowledged write's revision", ruleOneWrite, "two writes at revision 2", func() *fx {
		f := newFx()
		f.put(k0, "a", 2)
		f.failed(history.Op{Kind: "put", Key: k2, Value: "y"})
		f.session(0, 1, 2)
		f.events(0, 1, cl, putEv(kv(k0, "a", 2, 2, 1)), putEv(kv(k2, "y", 2, 2, 1)))
		return f
	}},
	// 3. A split brain only a watch saw.
	{"a watch answered by a cluster no operation saw", ruleWatchCluster, "split brain: watch 1", func() *fx {
		f := newFx()
		f.put(k0, "a", 2)
		f.put(k1, "b", 3)
		for w := 0; w < 2; w++ {
			f.session(w, 1, 2)
		}
		other := map[int]uint64{0: cl, 1: 0xbad}
		for w := 0; w < 2; w++ {
			f.events(w, 1, other[w], putEv(kv(k0, "a", 2, 2, 1)), putEv(kv(k1, "b", 3, 3, 1)))
			f.progress(w, 1, other[w], 3, time.Millisecond)
		}
		return f
	}},
	// 4. What reads returned.
	{"a serializable read of a value never written", ruleSerializable, "a value no client wrote there", func() *fx {
		f := base()
		f.sget(k0, 5, kv(k0, "zzz", 4, 2, 2))
		return f
	}},
	{"a serializable read with a mod revision above its own", ruleSerializable, "above the read's own revision 3", func() *fx {
		f := base()
		f.sget(k0, 3, kv(k0, "c", 4, 2, 2))
		return f
	}},
	{"a serializable read that missed a write at its own revision", ruleSerializable, "but it changed at revision 4", func() *fx {
		f := base()
		f.sget(k0, 5, kv(k0, "a", 2, 2, 1))
		return f
	}},
	{"a serializable read of nothing where nothing deleted the key", ruleSerializable, "nothing can have deleted it", func() *fx {
		f := base()
		f.sget(k0, 5)
		return f
	}},
	{"a read with the wrong version", ruleVersions, "not linearizable", func() *fx {
		f := base()
		f.get(k0, 5, kv(k0, "c", 4, 4, 1))
		return f
	}},
	{"a watch event with the wrong version", ruleVersions, "after version 1 created at 2", func() *fx {
		f := newFx()
		f.put(k0, "a", 2)
		f.put(k0, "c", 3)
		f.session(0, 1, 2)
		f.events(0, 1, cl, putEv(kv(k0, "a", 2, 2, 1)), putEv(kv(k0, "c", 3, 2, 3)))
		return f
	}},
	{"a get that returned another key", ruleReadBounds, "which it did not ask for", func() *fx {
		f := base()
		f.get(k1, 5, kv(k0, "c", 4, 2, 2))
		return f
	}},
	{"a range that returned a key outside it", ruleReadBounds, "outside [/h/k00, /h/k02)", func() *fx {
		f := base()
		f.put(k2, "e", 6)
		f.op(history.Op{Kind: "range", Key: k0, End: k2, KVs: []history.KV{kv(k0, "c", 4, 2, 2), kv(k2, "e", 6, 6, 1)}}, 6)
		return f
	}},
	{"a progress notification that went back", ruleProgress, "it went back", func() *fx {
		f := base()
		f.progress(0, 1, cl, 4, time.Millisecond)
		return f
	}},
	{"a progress notification below an event delivered", ruleProgress, "below the event at revision 5", func() *fx {
		f := newFx()
		f.put(k0, "a", 2)
		f.del(k0, 5, 1)
		f.session(0, 1, 2)
		f.events(0, 1, cl, putEv(kv(k0, "a", 2, 2, 1)))
		f.events(0, 1, cl, delEv(k0, 5))
		f.progress(0, 1, cl, 4, time.Millisecond)
		return f
	}},
	{"two watches that disagree on a revision", ruleWatchesAgree, "another watch", func() *fx {
		f := newFx()
		f.put(k0, "a", 2)
		for w := 0; w < 2; w++ {
			f.session(w, 1, 2)
			e := putEv(kv(k0, "a", 2, 2, 1))
			e.KV.Lease = int64(w)
			f.events(w, 1, cl, e)
		}
		return f
	}},
}

func TestEachRuleRejectsItsFixtureAndMatters(t *testing.T) {
	for _, rc := range append(append([]ruleCase{}, ruleCases...), leaseCases...) {
		t.Run(rc.name, func(t *testing.T) {
			rejected(t, &rc.build().h, rc.want)
			accepted(t, &rc.build().h, rc.rule)
		})
	}
}

// The rules that were there before: each rejects its fixture (they cannot be switched off).
func TestStandingRules(t *testing.T) {
	cases := []struct {
		name, want string
		build      func() *fx
	}{
		{"a stale linearizable read", "not linearizable", func() *fx {
			f := base()
			f.get(k0, 5, kv(k0, "a", 2, 2, 1))
			return f
		}},
		{"an acknowledged write lost", "not linearizable", func() *fx {
			f := base()
			f.put(k2, "e", 6)
			f.get(k2, 6)
			return f
		}},
		{"a watch event missed", "before the event of /h/k01=b at revision 3 was delivered", func() *fx {
			f := base()
			f.h.Watches = append(f.h.Watches[:1], f.h.Watches[2:]...) // watch 0 loses k1=b
			return f
		}},
		{"a watch event repeated", "delivered twice", func() *fx {
			f := base()
			f.events(0, 1, cl, delEv(k1, 5))
			return f
		}},
		{"watch events out of order", "out of order", func() *fx {
			f := base()
			f.h.Watches[0].Time, f.h.Watches[1].Time = f.h.Watches[1].Time, f.h.Watches[0].Time
			return f
		}},
		{"a second cluster with no restore", "split brain", func() *fx {
			f := base()
			f.op(history.Op{Kind: "get", Key: k0, KVs: []history.KV{kv(k0, "c", 4, 2, 2)}, Header: &history.Header{Cluster: 0xbad, Revision: 5}}, 0)
			return f
		}},
		{"a revision that went back", "revision went back", func() *fx {
			f := base()
			f.get(k3, 3)
			return f
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { rejected(t, &tc.build().h, tc.want) })
	}
}
