package validate

// Linearizability: every epoch's every key group checked with porcupine; failed writes kept as
// maybe applied unless the watches and reads settle them.

import (
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"etcd-asg-lifecycle/tests/history/internal/history"
	"etcd-asg-lifecycle/tests/history/internal/model"
)

// evidence is what the watches and reads showed, to settle writes of unknown outcome.
type evidence struct {
	seen     map[string]bool     // every value some read or watch showed
	watched  map[string]sighting // where a watch first delivered each value
	coverage coverageOf
}

// linearizable checks every epoch's every group with porcupine, within the time limit.
func (c *checker) linearizable(epochs []*epoch) {
	started := time.Now()
	defer func() { c.sum.CheckMillis = time.Since(started).Milliseconds() }()
	groups := (c.h.Meta.Keys + model.GroupSize - 1) / model.GroupSize
	ev := &evidence{seen: c.seenValues(), watched: c.watchedValues(), coverage: c.watchCoverage()}
	c.sum.Linearizable = "ok"
	for n, e := range epochs {
		perGroup := make([][]porcupine.Operation, groups)
		add := func(m *model.Input, call, ret int64) {
			m.Versions, m.Leases = c.on(ruleVersions), c.on(ruleLeases)
			perGroup[m.Group] = append(perGroup[m.Group], porcupine.Operation{ClientId: m.Op.Stream, Input: m, Output: nil, Call: call, Return: ret})
		}
		c.answeredOps(e, groups, add)
		c.unknownOps(e, n, groups, ev, add)
		for g := 0; g < groups; g++ {
			if !c.checkGroup(epochs, n, g, perGroup[g], started) {
				return
			}
		}
	}
}

// answeredOps: an epoch's answered operations as the model's, by group (a range split by group).
func (c *checker) answeredOps(e *epoch, groups int, add func(m *model.Input, call, ret int64)) {
	for _, i := range e.ops {
		o := &c.h.Ops[i]
		switch o.Kind {
		case "grant", "keepalive":
			continue
		case "range":
			for g := 0; g < groups; g++ {
				m := &model.Input{Op: o, ID: i, Group: g, Slot: c.slots(g)}
				covered := false
				for key, s := range m.Slot {
					if key >= o.Key && key < o.End {
						m.Cover[s], covered = true, true
					}
				}
				if !covered {
					continue
				}
				for _, kv := range o.KVs {
					if _, in := m.Slot[kv.Key]; in {
						m.KVs = append(m.KVs, kv)
					}
				}
				add(m, o.Call, o.Return)
			}
			continue
		}
		key := o.Key
		if o.Kind == "txn" {
			key = o.Compare
		}
		m := &model.Input{Op: o, ID: i, Group: c.group(key), Slot: c.slots(c.group(key)), KVs: o.KVs}
		if o.Kind == "get" {
			m.Cover[m.Slot[key]] = true
		}
		add(m, o.Call, o.Return)
	}
}

// lastReturns: the last return of an answered operation on each group of an epoch.
func (c *checker) lastReturns(e *epoch, groups int) []int64 {
	lastReturn := make([]int64, groups)
	for _, i := range e.ops {
		o := &c.h.Ops[i]
		for _, k := range o.Keys() {
			if _, ok := c.keyIdx[k]; ok && o.Return > lastReturn[c.group(k)] {
				lastReturn[c.group(k)] = o.Return
			}
		}
		if o.Kind == "range" {
			for g := range lastReturn {
				if o.Return > lastReturn[g] {
					lastReturn[g] = o.Return
				}
			}
		}
	}
	return lastReturn
}

// unknownOps: an epoch's writes of unknown outcome, as maybe applied, unless settled: seen
// applied (a watch delivered its value: at that revision), applied by another cluster, changing
// nothing anyone saw, or never shown where a watch would have shown it. Failed writes belong to
// the epoch if called before it ended and, after a restore, no longer before its first answer
// than a request lives (the deadline, 2 s, with room): a request reaches the one cluster it was
// sent to, and a cluster not yet there gets none.
func (c *checker) unknownOps(e *epoch, n, groups int, ev *evidence, add func(m *model.Input, call, ret int64)) {
	// A write of unknown outcome called after the last answer on its group that nothing ever
	// showed can have changed nothing anyone saw (an operation still in flight when it was
	// called could be placed after it).
	lastReturn := c.lastReturns(e, groups)
	for i := range c.h.Ops {
		o := &c.h.Ops[i]
		if o.Status != "fail" || !o.IsWrite() || o.Call > e.end || n > 0 && o.Call < e.start-int64(5*time.Second) {
			continue
		}
		key := o.Key
		if o.Kind == "txn" {
			key = o.Compare
		}
		m := &model.Input{Op: o, ID: i, Group: c.group(key), Slot: c.slots(c.group(key)), Unknown: true}
		ret := int64(1) << 62
		v := valueOf(o)
		w, watchedHere := ev.watched[v]
		verdict, bound := c.walVerdict(o, e.cluster)
		switch {
		case v != "" && watchedHere && w.cluster == e.cluster:
			// Seen applied: a watch delivered its value (values are unique), at that revision.
			m.SeenRev, ret = w.rev, w.time
		case v != "" && watchedHere || verdict == walElsewhere:
			continue // applied by another cluster: a request reaches one
		case verdict == walNotApplied:
			c.sum.WAL.NotApplied++
			continue // no member persisted it
		case verdict == walApplied:
			// Persisted committed: applied, before the first acknowledged write persisted after it
			// returned.
			m.Applied, ret = true, bound
			c.sum.WAL.Applied++
		case (v == "" || !ev.seen[v]) && o.Call > lastReturn[m.Group]:
			continue // nothing answered on its keys after it: whatever it did, nobody saw
		case v != "" && !ev.seen[v] && ev.coverage.covers(e.cluster, o.Call) && !(o.Kind == "txn" && history.BranchWrites(o.Else)):
			// Never read, never delivered by a watch that kept up for 10 s after it: not applied.
			continue
		case v != "" && !ev.seen[v] && ev.coverage.covers(e.cluster, o.Call):
			// A transaction whose Then branch is settled so (its values never shown), but whose
			// Else branch writes (a delete, which shows no value): that branch may have applied.
			m.NoThen = true
			c.sum.Unresolved++
		default:
			c.sum.Unresolved++
		}
		if ret < o.Call {
			ret = o.Call
		}
		add(m, o.Call, ret)
	}
}

// checkGroup checks one group of one epoch with porcupine, in its share of the time left; false
// once a violation is found (the rest is not checked).
func (c *checker) checkGroup(epochs []*epoch, n, g int, ops []porcupine.Operation, started time.Time) bool {
	if len(ops) == 0 {
		return true
	}
	e := epochs[n]
	groups := (c.h.Meta.Keys + model.GroupSize - 1) / model.GroupSize
	init := []model.State{{}}
	if n > 0 && n <= len(c.Restores) {
		init = c.cutState(epochs, n, g)
	}
	budget := (c.Timeout - time.Since(started)) / time.Duration(groups-g)
	if budget < time.Second {
		budget = time.Second
	}
	pm := model.GroupModel(init, func(s int) string {
		if s+g*model.GroupSize < c.h.Meta.Keys {
			return c.keyName(g*model.GroupSize + s)
		}
		return ""
	})
	res, info := porcupine.CheckOperationsVerbose(pm, ops, budget)
	switch res {
	case porcupine.Illegal:
		c.sum.Linearizable = "illegal"
		c.violation("not linearizable (cluster %x, keys %s): %s", e.cluster, strings.Join(keysOf(c.slots(g)), ", "),
			c.witness(pm, info, ops, init))
		if err := porcupine.VisualizePath(pm, info, c.HTML); err == nil {
			c.sum.HTML = c.HTML
		}
		return false
	case porcupine.Unknown:
		c.sum.Linearizable = "unknown"
	}
	return true
}

func keysOf(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func valueOf(o *history.Op) string {
	switch o.Kind {
	case "put":
		return o.Value
	case "txn":
		for _, t := range o.Then {
			if t.Kind == "put" {
				return t.Value
			}
		}
	}
	return ""
}

// valuesOf: every value a read or a watch of `cluster` showed.
func (c *checker) valuesOf(cluster uint64) map[string]bool {
	out := map[string]bool{}
	for i := range c.h.Ops {
		if o := &c.h.Ops[i]; o.Header != nil && o.Header.Cluster == cluster {
			for _, kv := range o.KVs {
				out[kv.Value] = true
			}
		}
	}
	for _, w := range c.h.Watches {
		if w.Header.Cluster == cluster {
			for _, e := range w.Events {
				out[e.KV.Value] = true
			}
		}
	}
	return out
}

// seenValues: every value some read returned.
func (c *checker) seenValues() map[string]bool {
	out := map[string]bool{}
	for i := range c.h.Ops {
		for _, kv := range c.h.Ops[i].KVs {
			out[kv.Value] = true
		}
	}
	for _, w := range c.h.Watches {
		for _, e := range w.Events {
			out[e.KV.Value] = true
		}
	}
	return out
}

type sighting struct {
	cluster uint64
	rev     int64
	time    int64
}

// watchedValues: where a watch first delivered each value.
func (c *checker) watchedValues() map[string]sighting {
	out := map[string]sighting{}
	for _, w := range c.h.Watches {
		for _, e := range w.Events {
			if _, ok := out[e.KV.Value]; !ok && e.Type == "PUT" {
				out[e.KV.Value] = sighting{cluster: w.Header.Cluster, rev: e.KV.Mod, time: w.Time}
			}
		}
	}
	return out
}

// sessionSpan is one watch session: when it started, of which cluster, and its last progress
// notification (everything up to then delivered).
type sessionSpan struct {
	cluster       uint64
	start, latest int64
}

type coverageOf []sessionSpan

// covers: a write called at `call` was followed, without a gap, by a watch session of the
// cluster that started before it and said it had delivered everything at least 10 s after it:
// had the write been applied, that session would have delivered it.
func (spans coverageOf) covers(cluster uint64, call int64) bool {
	for _, s := range spans {
		if s.cluster == cluster && s.start <= call && s.latest > call+int64(10*time.Second) {
			return true
		}
	}
	return false
}

func (c *checker) watchCoverage() coverageOf {
	byKey := map[[2]int]*sessionSpan{}
	var out coverageOf
	for _, s := range c.h.Sessions {
		byKey[[2]int{s.Watcher, s.Session}] = &sessionSpan{start: s.Time}
	}
	for _, w := range c.h.Watches {
		s := byKey[[2]int{w.Watcher, w.Session}]
		if s == nil || !w.Progress {
			continue
		}
		if s.cluster == 0 {
			s.cluster = w.Header.Cluster
		}
		if w.Header.Cluster == s.cluster && w.Time > s.latest {
			s.latest = w.Time
		}
	}
	for _, s := range byKey {
		out = append(out, *s)
	}
	return out
}
