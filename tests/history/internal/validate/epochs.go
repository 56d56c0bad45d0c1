package validate

// Clusters and revisions: the epochs of each cluster id, the declared restores' cost, revisions
// that never go back, and serializable reads counted when stale.

import (
	"fmt"
	"sort"
	"strings"

	"etcd-asg-lifecycle/tests/history/internal/history"
	"etcd-asg-lifecycle/tests/history/internal/model"
)

// epochs splits the answered operations by the cluster that answered them, in order.
func (c *checker) epochs() []*epoch {
	var out []*epoch
	byCluster := map[uint64]*epoch{}
	idx := make([]int, 0, len(c.h.Ops))
	for i := range c.h.Ops {
		if c.h.Ops[i].Status == "ok" && c.h.Ops[i].Header != nil {
			idx = append(idx, i)
		}
	}
	sort.Slice(idx, func(a, b int) bool { return c.h.Ops[idx[a]].Return < c.h.Ops[idx[b]].Return })
	for _, i := range idx {
		o := &c.h.Ops[i]
		e := byCluster[o.Header.Cluster]
		if e == nil {
			e = &epoch{cluster: o.Header.Cluster, start: o.Call, minRev: -1}
			byCluster[o.Header.Cluster] = e
			out = append(out, e)
		}
		if o.Call < e.start {
			e.start = o.Call
		}
		if o.Return > e.end {
			e.end = o.Return
		}
		// Serializable reads may be stale by design; a lease's grant and keepalive are answered
		// by the member's lessor at its own applied revision, outside the key-value order.
		if o.Kind != "sget" && o.Kind != "grant" && o.Kind != "keepalive" {
			e.ops = append(e.ops, i)
			if o.Header.Revision > e.maxRev {
				e.maxRev = o.Header.Revision
			}
			if e.minRev < 0 || o.Header.Revision < e.minRev {
				e.minRev = o.Header.Revision
			}
		}
	}
	c.clusters = map[uint64]bool{}
	for _, e := range out {
		c.clusters[e.cluster] = true
		c.sum.Clusters = append(c.sum.Clusters, fmt.Sprintf("%x", e.cluster))
	}
	// One cluster answering after the next has: two clusters at once (serializable reads from a
	// member left behind excepted: they are stale by design, and counted there).
	for n := 0; n+1 < len(out); n++ {
		next := out[n+1]
		firstNext := int64(-1)
		for _, i := range next.ops {
			if firstNext < 0 || c.h.Ops[i].Return < firstNext {
				firstNext = c.h.Ops[i].Return
			}
		}
		for _, i := range out[n].ops {
			if o := &c.h.Ops[i]; firstNext >= 0 && o.Call > firstNext {
				c.violation("split brain: cluster %x answered %s after cluster %x had answered at %s",
					out[n].cluster, history.Describe(o), next.cluster, history.Secs(firstNext))
				break
			}
		}
	}
	if len(out) > len(c.Restores)+1 {
		c.violation("split brain: %d cluster ids answered (%s) with %d restores declared: cluster %x appeared at %s with no restore",
			len(out), strings.Join(c.sum.Clusters, ", "), len(c.Restores), out[len(c.Restores)+1].cluster, history.Secs(out[len(c.Restores)+1].start))
	}
	if len(out) < len(c.Restores)+1 {
		c.violation("%d restores declared but %d cluster ids answered (%s): a restore that left no new cluster",
			len(c.Restores), len(out), strings.Join(c.sum.Clusters, ", "))
	}
	return out
}

// writeEffects are what an answered write did, by revision: (key, PUT value | DELETE).
type effect struct {
	key   string
	del   bool
	value string
	rev   int64
	op    int
	lease int64 // a revoke's delete: the lease revoked
}

// effects of an answered write (a revoke's are not known from its answer alone).
func effects(o *history.Op, i int) []effect {
	if o.Status != "ok" || o.Header == nil {
		return nil
	}
	rev := o.Header.Revision
	switch o.Kind {
	case "put":
		return []effect{{key: o.Key, value: o.Value, rev: rev, op: i}}
	case "delete":
		if o.Deleted > 0 {
			return []effect{{key: o.Key, del: true, rev: rev, op: i}}
		}
	case "txn":
		ops := o.Else
		if o.OK {
			ops = o.Then
		}
		var out []effect
		for _, t := range ops {
			switch {
			case t.Kind == "put":
				out = append(out, effect{key: t.Key, value: t.Value, rev: rev, op: i})
			case t.Kind == "delete" && o.Deleted > 0:
				out = append(out, effect{key: t.Key, del: true, rev: rev, op: i})
			}
		}
		return out
	}
	return nil
}

// cuts: each declared restore's cost (acknowledged writes after its revision), counted.
func (c *checker) cuts(epochs []*epoch) {
	for n, r := range c.Restores {
		if n+1 >= len(epochs) {
			break
		}
		before := epochs[n]
		rep := CutReport{Revision: r.Revision, Kind: r.Kind, From: fmt.Sprintf("%x", before.cluster), To: fmt.Sprintf("%x", epochs[n+1].cluster)}
		after := c.valuesOf(epochs[n+1].cluster)
		for _, i := range before.ops {
			for _, e := range effects(&c.h.Ops[i], i) {
				// The backup's revision is where its snapshot began: a write just after it may
				// be in it, and is not lost if the restored cluster shows it.
				if e.rev > r.Revision && (e.del || !after[e.value]) {
					rep.Lost++
					if len(rep.LostExamples) < 3 {
						rep.LostExamples = append(rep.LostExamples, history.Describe(&c.h.Ops[i]))
					}
					break
				}
			}
		}
		c.sum.Restores = append(c.sum.Restores, rep)
	}
}

// revisionsForward: in real time, across keys, an operation that began after another ended
// never answers at an older revision; a restore's cluster starts past every revision before it.
func (c *checker) revisionsForward(epochs []*epoch) {
	for n, e := range epochs {
		if n > 0 && e.minRev >= 0 && e.minRev <= epochs[n-1].maxRev {
			c.violation("revisions went back across the restore: cluster %x answered at revision %d after cluster %x had answered at %d",
				e.cluster, e.minRev, epochs[n-1].cluster, epochs[n-1].maxRev)
		}
		ops := append([]int{}, e.ops...)
		byReturn := append([]int{}, e.ops...)
		sort.Slice(ops, func(a, b int) bool { return c.h.Ops[ops[a]].Call < c.h.Ops[ops[b]].Call })
		sort.Slice(byReturn, func(a, b int) bool { return c.h.Ops[byReturn[a]].Return < c.h.Ops[byReturn[b]].Return })
		j, best := 0, -1
		for _, i := range ops {
			o := &c.h.Ops[i]
			for j < len(byReturn) && c.h.Ops[byReturn[j]].Return < o.Call {
				if best < 0 || c.h.Ops[byReturn[j]].Header.Revision > c.h.Ops[best].Header.Revision {
					best = byReturn[j]
				}
				j++
			}
			if best >= 0 && o.Header.Revision < c.h.Ops[best].Header.Revision {
				c.violation("revision went back: %s, after %s had returned", history.Describe(o), history.Describe(&c.h.Ops[best]))
				return
			}
		}
	}
}

// staleReads: a serializable read may be stale (etcd's guarantee for them is sequential
// consistency): counted, with a witness. (What it returned is checked against the store at its
// own revision in reads.go.)
func (c *checker) staleReads(epochs []*epoch) {
	for _, e := range epochs {
		var done []int
		for _, i := range e.ops {
			if c.h.Ops[i].IsWrite() || c.h.Ops[i].Kind != "sget" {
				done = append(done, i)
			}
		}
		sort.Slice(done, func(a, b int) bool { return c.h.Ops[done[a]].Return < c.h.Ops[done[b]].Return })
		for i := range c.h.Ops {
			o := &c.h.Ops[i]
			if o.Kind != "sget" || o.Status != "ok" || o.Header.Cluster != e.cluster {
				continue
			}
			newest := -1
			for _, j := range done {
				if c.h.Ops[j].Return >= o.Call {
					break
				}
				if newest < 0 || c.h.Ops[j].Header.Revision > c.h.Ops[newest].Header.Revision {
					newest = j
				}
			}
			if newest >= 0 && o.Header.Revision < c.h.Ops[newest].Header.Revision {
				c.sum.StaleReads++
				if c.sum.StaleWitness == "" {
					c.sum.StaleWitness = fmt.Sprintf("stale read: %s, after %s had returned", history.Describe(o), history.Describe(&c.h.Ops[newest]))
				}
			}
		}
	}
	if c.Fresh && c.sum.StaleReads > 0 {
		c.violation("%d serializable reads were stale; the first: %s", c.sum.StaleReads, c.sum.StaleWitness)
	}
}

// group is the index of a key's group.
func (c *checker) group(key string) int { return c.keyIdx[key] / model.GroupSize }

func (c *checker) slots(g int) map[string]int {
	m := map[string]int{}
	for s := 0; s < model.GroupSize; s++ {
		if i := g*model.GroupSize + s; i < c.h.Meta.Keys {
			m[c.keyName(i)] = s
		}
	}
	return m
}
