package main

// The watch guarantees, as etcd defines them
// (https://etcd.io/docs/v3.6/learning/api_guarantees/#watch-apis) and its robustness tests check
// them (tests/robustness/validate/watch.go): ordered, unique, atomic, reliable, resumable,
// bookmarkable; and every event is of a write some client made.

import (
	"fmt"
	"sort"
)

type evKey struct {
	rev int64
	key string
}

func (c *checker) watches(epochs []*epoch) {
	c.sum.WatchSessions = len(c.h.Sessions)
	// What the answered writes did, by revision and key, per cluster.
	want := map[uint64]map[evKey]effect{}
	for _, e := range epochs {
		m := map[evKey]effect{}
		for _, i := range e.ops {
			for _, x := range effects(&c.h.Ops[i], i) {
				m[evKey{x.rev, x.key}] = x
			}
		}
		want[e.cluster] = m
	}
	// Every value any write tried, and the keys deletes and revokes could remove.
	written := map[string]*Op{}
	canDelete := map[string]bool{}
	for i := range c.h.Ops {
		o := &c.h.Ops[i]
		switch o.Kind {
		case "put":
			written[o.Value] = o
		case "delete", "revoke":
			canDelete[o.Key] = true
		case "txn":
			for _, t := range append(append([]TxnOp{}, o.Then...), o.Else...) {
				if t.Kind == "put" {
					written[t.Value] = o
				}
				if t.Kind == "delete" {
					canDelete[t.Key] = true
				}
			}
		}
	}
	type sess struct {
		s     Session
		resps []WatchResp
	}
	sessions := map[[2]int]*sess{}
	var order [][2]int
	for _, s := range c.h.Sessions {
		k := [2]int{s.Watcher, s.Session}
		sessions[k] = &sess{s: s}
		order = append(order, k)
	}
	for _, w := range c.h.Watches {
		k := [2]int{w.Watcher, w.Session}
		s := sessions[k]
		if s == nil {
			c.violation("watch %d session %d: a response with no session start", w.Watcher, w.Session)
			return
		}
		s.resps = append(s.resps, w)
	}
	for _, k := range order {
		s := sessions[k]
		sort.SliceStable(s.resps, func(a, b int) bool { return s.resps[a].Time < s.resps[b].Time })
		name := fmt.Sprintf("watch %d session %d (from revision %d)", s.s.Watcher, s.s.Session, s.s.From)
		delivered := map[evKey]int{} // response index
		revResp := map[int64]int{}   // the response each revision came in
		var last int64               // last event revision
		var covered int64            // every revision up to this was delivered (events or progress)
		var notified int64           // the last progress notification's revision
		var cluster uint64
		for n, r := range s.resps {
			if r.Canceled || r.Compact != 0 {
				if r.Compact != 0 {
					c.sum.WatchCompacted++
				}
				break
			}
			if cluster == 0 {
				cluster = r.Header.Cluster
			}
			if r.Header.Cluster != cluster && r.Header.Cluster != 0 {
				c.violation("%s: answered by cluster %x after cluster %x, with no cancellation", name, r.Header.Cluster, cluster)
				return
			}
			if r.Progress {
				c.sum.WatchProgress++
				// Bookmarkable: everything at or before the notified revision was delivered.
				for ek, x := range want[cluster] {
					if ek.rev >= s.s.From && ek.rev <= r.Header.Revision {
						if _, ok := delivered[ek]; !ok {
							c.violation("%s: progress notification at revision %d (at %s) before the event of %s at revision %d was delivered",
								name, r.Header.Revision, secs(r.Time), describeEffect(x), ek.rev)
							return
						}
					}
				}
				if r.Header.Revision > covered {
					covered = r.Header.Revision
				}
				if r.Header.Revision > notified {
					notified = r.Header.Revision
				}
				continue
			}
			revs := map[int64]bool{}
			for _, e := range r.Events {
				c.sum.WatchEvents++
				ek := evKey{e.KV.Mod, e.KV.Key}
				if e.KV.Mod < s.s.From {
					c.violation("%s: event %s at revision %d, before the revision it was asked from", name, evText(e), e.KV.Mod)
					return
				}
				// Ordered.
				if e.KV.Mod < last {
					c.violation("%s: event %s at revision %d delivered after one at revision %d (out of order, at %s)",
						name, evText(e), e.KV.Mod, last, secs(r.Time))
					return
				}
				// Bookmarkable, the other way: nothing at or before a notified revision comes later.
				if e.KV.Mod <= notified {
					if _, dup := delivered[ek]; !dup {
						c.violation("%s: event %s at revision %d delivered after a progress notification at revision %d",
							name, evText(e), e.KV.Mod, notified)
						return
					}
				}
				// Unique.
				if prev, dup := delivered[ek]; dup {
					c.violation("%s: event %s at revision %d delivered twice (responses %d and %d, at %s)",
						name, evText(e), e.KV.Mod, prev, n, secs(r.Time))
					return
				}
				// Atomic: a revision's events come in one response.
				if prev, ok := revResp[e.KV.Mod]; ok && prev != n {
					c.violation("%s: the events of revision %d split across responses %d and %d",
						name, e.KV.Mod, prev, n)
					return
				}
				revResp[e.KV.Mod] = n
				delivered[ek] = n
				revs[e.KV.Mod] = true
				last = e.KV.Mod
				// Of a write some client made, as it made it.
				if e.Type == "PUT" {
					o, ok := written[e.KV.Value]
					if !ok || !contains(o.keysWritten(), e.KV.Key) {
						c.violation("%s: event puts %s=%s at revision %d, a value no client wrote there", name, e.KV.Key, e.KV.Value, e.KV.Mod)
						return
					}
					if o.Status == "ok" && o.Header != nil && o.Header.Cluster == r.Header.Cluster && o.Header.Revision != e.KV.Mod {
						c.violation("%s: event puts %s=%s at revision %d, but the write was acknowledged at revision %d",
							name, e.KV.Key, e.KV.Value, e.KV.Mod, o.Header.Revision)
						return
					}
				} else if !canDelete[e.KV.Key] {
					c.violation("%s: event deletes %s at revision %d, which no client deleted", name, e.KV.Key, e.KV.Mod)
					return
				}
				if x, ok := want[cluster][ek]; ok && !x.del && e.Type == "PUT" && x.value != e.KV.Value {
					c.violation("%s: event puts %s=%s at revision %d, but %s was acknowledged there",
						name, e.KV.Key, e.KV.Value, e.KV.Mod, describeEffect(x))
					return
				}
			}
			if last > covered {
				covered = last
			}
		}
		// Reliable: every acknowledged write between the session's start and what it covered.
		var missed []effect
		for ek, x := range want[cluster] {
			if ek.rev >= s.s.From && ek.rev <= covered {
				if _, ok := delivered[ek]; !ok {
					missed = append(missed, x)
				}
			}
		}
		if len(missed) > 0 {
			sort.Slice(missed, func(a, b int) bool { return missed[a].rev < missed[b].rev })
			c.violation("%s: missed %d acknowledged writes it covered (up to revision %d); the first: %s at revision %d",
				name, len(missed), covered, describeEffect(missed[0]), missed[0].rev)
			return
		}
	}
}

func describeEffect(x effect) string {
	if x.del {
		return fmt.Sprintf("the delete of %s", x.key)
	}
	return fmt.Sprintf("%s=%s", x.key, x.value)
}

func evText(e Event) string {
	if e.Type == "PUT" {
		return fmt.Sprintf("PUT %s=%s", e.KV.Key, e.KV.Value)
	}
	return "DELETE " + e.KV.Key
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
