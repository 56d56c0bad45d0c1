package main

// The checker: linearizability with porcupine (failed writes maybe applied, resolved from the
// watches where they can be, as etcd's robustness tests resolve them), revisions that never go
// back, the watch guarantees (https://etcd.io/docs/v3.6/learning/api_guarantees/#watch-apis),
// restores as declared cuts, and a second cluster id without one as a split.

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Restore is a declared cut: the cluster restored from a backup at Revision.
type Restore struct {
	Revision int64  `json:"revision"`
	Kind     string `json:"kind"` // backup or survivor
}

// Summary is what the checker found, as JSON on stdout's last line.
type Summary struct {
	Result          string         `json:"result"` // ok, violation, unknown
	Violations      []string       `json:"violations,omitempty"`
	Ops             int            `json:"ops"`
	OK              int            `json:"ok"`
	Failed          int            `json:"failed"`
	ByKind          map[string]int `json:"by_kind"`
	Unresolved      int            `json:"unresolved_writes"` // failed writes left as maybe applied
	Clusters        []string       `json:"clusters"`
	Restores        []CutReport    `json:"restores,omitempty"`
	Linearizable    string         `json:"linearizable"` // ok, illegal, unknown
	CheckMillis     int64          `json:"check_ms"`
	StaleReads      int            `json:"stale_serializable_reads"`
	StaleWitness    string         `json:"stale_witness,omitempty"`
	WatchEvents     int            `json:"watch_events"`
	WatchSessions   int            `json:"watch_sessions"`
	WatchCompacted  int            `json:"watch_compacted"`
	WatchProgress   int            `json:"watch_progress"`
	LongestOpMillis int64          `json:"longest_ok_op_ms"`
	LongestGapMs    int64          `json:"longest_without_success_ms"`
	FailedWindow    string         `json:"longest_without_success_at,omitempty"`
	HTML            string         `json:"html,omitempty"`
}

// CutReport is what one restore cost.
type CutReport struct {
	Revision     int64    `json:"revision"`
	Kind         string   `json:"kind"`
	From         string   `json:"from_cluster"`
	To           string   `json:"to_cluster"`
	Lost         int      `json:"lost_acknowledged_writes"`
	LostExamples []string `json:"lost_examples,omitempty"`
}

type checker struct {
	h        *History
	keyIdx   map[string]int
	sum      Summary
	timeout  time.Duration
	html     string
	fresh    bool
	restores []Restore
}

func (c *checker) violation(format string, a ...interface{}) {
	c.sum.Violations = append(c.sum.Violations, fmt.Sprintf(format, a...))
}

func (c *checker) keyName(i int) string {
	return fmt.Sprintf("%sk%02d", c.h.Meta.Prefix, i)
}

// epoch is the history of one cluster id.
type epoch struct {
	cluster uint64
	start   int64 // first call of its answered operations
	end     int64 // last return of its answered operations
	ops     []int // answered operations (not serializable reads)
	maxRev  int64
	minRev  int64
}

func check(args []string) int {
	fs := flag.NewFlagSet("check", flag.ExitOnError)
	path := fs.String("history", "", "the history file")
	timeout := fs.Duration("timeout", 10*time.Second, "the most the linearizability check takes")
	html := fs.String("html", "", "porcupine's visualization, written on a violation (default: beside the history)")
	fresh := fs.Bool("serializable-must-be-fresh", false, "treat a stale serializable read as a violation")
	var restores []Restore
	fs.Func("restore", "a declared restore: REVISION[:backup|survivor], in order (repeat)", func(s string) error {
		rev, kind, _ := strings.Cut(s, ":")
		n, err := strconv.ParseInt(rev, 10, 64)
		if err != nil || n <= 0 {
			return fmt.Errorf("restore %q: the revision must be a positive number", s)
		}
		if kind == "" {
			kind = "backup"
		}
		if kind != "backup" && kind != "survivor" {
			return fmt.Errorf("restore %q: kind must be backup or survivor", s)
		}
		restores = append(restores, Restore{Revision: n, Kind: kind})
		return nil
	})
	_ = fs.Parse(args)
	if *path == "" {
		fmt.Fprintln(os.Stderr, "check needs -history")
		return 3
	}
	h, err := readHistory(*path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "reading %s: %v\n", *path, err)
		return 3
	}
	if *html == "" {
		*html = strings.TrimSuffix(*path, ".jsonl") + ".html"
	}
	c := &checker{h: h, timeout: *timeout, html: *html, fresh: *fresh, restores: restores}
	c.run()
	for _, v := range c.sum.Violations {
		fmt.Println("VIOLATION:", v)
	}
	out, _ := json.Marshal(c.sum)
	fmt.Println(string(out))
	switch c.sum.Result {
	case "ok":
		return 0
	case "unknown":
		return 2
	}
	return 1
}

func (c *checker) run() {
	h := c.h
	c.keyIdx = map[string]int{}
	for i := 0; i < h.Meta.Keys; i++ {
		c.keyIdx[c.keyName(i)] = i
	}
	c.sum.ByKind = map[string]int{}
	for i := range h.Ops {
		o := &h.Ops[i]
		c.sum.Ops++
		c.sum.ByKind[o.Kind]++
		if o.Status == "ok" {
			c.sum.OK++
		} else {
			c.sum.Failed++
		}
		for _, k := range o.keys() {
			if _, ok := c.keyIdx[k]; !ok && o.Kind != "range" {
				c.violation("operation on %q, outside the recorder's keys: %s", k, describeOp(o))
			}
		}
	}
	c.availability()
	epochs := c.epochs()
	c.cuts(epochs)
	c.revisionsForward(epochs)
	c.staleReads(epochs)
	c.watches(epochs)
	c.linearizable(epochs)
	switch {
	case len(c.sum.Violations) > 0:
		c.sum.Result = "violation"
	case c.sum.Linearizable == "unknown":
		c.sum.Result = "unknown"
	default:
		c.sum.Result = "ok"
	}
}

// availability: the longest an answered operation took, and the longest stretch in which
// operations were tried and none succeeded.
func (c *checker) availability() {
	var returns []int64
	for i := range c.h.Ops {
		o := &c.h.Ops[i]
		if o.Status == "ok" {
			if d := (o.Return - o.Call) / 1e6; d > c.sum.LongestOpMillis {
				c.sum.LongestOpMillis = d
			}
			returns = append(returns, o.Return)
		}
	}
	sort.Slice(returns, func(a, b int) bool { return returns[a] < returns[b] })
	for i := 1; i < len(returns); i++ {
		if d := (returns[i] - returns[i-1]) / 1e6; d > c.sum.LongestGapMs {
			c.sum.LongestGapMs = d
			c.sum.FailedWindow = fmt.Sprintf("%s-%s", secs(returns[i-1]), secs(returns[i]))
		}
	}
}

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
	for _, e := range out {
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
					out[n].cluster, describeOp(o), next.cluster, secs(firstNext))
				break
			}
		}
	}
	if len(out) > len(c.restores)+1 {
		c.violation("split brain: %d cluster ids answered (%s) with %d restores declared: cluster %x appeared at %s with no restore",
			len(out), strings.Join(c.sum.Clusters, ", "), len(c.restores), out[len(c.restores)+1].cluster, secs(out[len(c.restores)+1].start))
	}
	if len(out) < len(c.restores)+1 {
		c.violation("%d restores declared but %d cluster ids answered (%s): a restore that left no new cluster",
			len(c.restores), len(out), strings.Join(c.sum.Clusters, ", "))
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
}

// effects of an answered write (a revoke's are not known from its answer alone).
func effects(o *Op, i int) []effect {
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
	for n, r := range c.restores {
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
						rep.LostExamples = append(rep.LostExamples, describeOp(&c.h.Ops[i]))
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
				c.violation("revision went back: %s, after %s had returned", describeOp(o), describeOp(&c.h.Ops[best]))
				return
			}
		}
	}
}

// staleReads: a serializable read may be stale (etcd's guarantee for them is sequential
// consistency): counted, with a witness. (What it returned is not checked against the store at
// its revision.)
func (c *checker) staleReads(epochs []*epoch) {
	for _, e := range epochs {
		var done []int
		for _, i := range e.ops {
			if c.h.Ops[i].isWrite() || c.h.Ops[i].Kind != "sget" {
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
					c.sum.StaleWitness = fmt.Sprintf("stale read: %s, after %s had returned", describeOp(o), describeOp(&c.h.Ops[newest]))
				}
			}
		}
	}
	if c.fresh && c.sum.StaleReads > 0 {
		c.violation("%d serializable reads were stale; the first: %s", c.sum.StaleReads, c.sum.StaleWitness)
	}
}

// group is the index of a key's group.
func (c *checker) group(key string) int { return c.keyIdx[key] / groupSize }

func (c *checker) slots(g int) map[string]int {
	m := map[string]int{}
	for s := 0; s < groupSize; s++ {
		if i := g*groupSize + s; i < c.h.Meta.Keys {
			m[c.keyName(i)] = s
		}
	}
	return m
}

// linearizable checks every epoch's every group with porcupine, within the time limit.
func (c *checker) linearizable(epochs []*epoch) {
	started := time.Now()
	defer func() { c.sum.CheckMillis = time.Since(started).Milliseconds() }()
	groups := (c.h.Meta.Keys + groupSize - 1) / groupSize
	seen := c.seenValues()
	watched := c.watchedValues()
	coverage := c.watchCoverage()
	c.sum.Linearizable = "ok"
	for n, e := range epochs {
		// Failed writes: of this epoch if called before it ended and, after a restore, no
		// longer before its first answer than a request lives (the deadline, 2 s, with room):
		// a request reaches the one cluster it was sent to, and a cluster not yet there gets none.
		var failed []int
		for i := range c.h.Ops {
			o := &c.h.Ops[i]
			if o.Status != "fail" || !o.isWrite() || o.Call > e.end {
				continue
			}
			if n > 0 && o.Call < e.start-int64(5*time.Second) {
				continue
			}
			failed = append(failed, i)
		}
		// The last return of an answered operation on each group: a write of unknown outcome
		// called after it that nothing ever showed can have changed nothing anyone saw (an
		// operation still in flight when it was called could be placed after it).
		lastReturn := make([]int64, groups)
		for _, i := range e.ops {
			o := &c.h.Ops[i]
			for _, k := range o.keys() {
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
		perGroup := make([][]porcupine.Operation, groups)
		add := func(m *mop, call, ret int64) {
			perGroup[m.group] = append(perGroup[m.group], porcupine.Operation{ClientId: m.op.Stream, Input: m, Output: nil, Call: call, Return: ret})
		}
		for _, i := range e.ops {
			o := &c.h.Ops[i]
			switch o.Kind {
			case "grant", "keepalive":
				continue
			case "range":
				for g := 0; g < groups; g++ {
					m := &mop{op: o, id: i, group: g, slot: c.slots(g)}
					covered := false
					for key, s := range m.slot {
						if key >= o.Key && key < o.End {
							m.cover[s], covered = true, true
						}
					}
					if !covered {
						continue
					}
					for _, kv := range o.KVs {
						if _, in := m.slot[kv.Key]; in {
							m.kvs = append(m.kvs, kv)
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
			m := &mop{op: o, id: i, group: c.group(key), slot: c.slots(c.group(key)), kvs: o.KVs}
			if o.Kind == "get" {
				m.cover[m.slot[key]] = true
			}
			add(m, o.Call, o.Return)
		}
		for _, i := range failed {
			o := &c.h.Ops[i]
			key := o.Key
			if o.Kind == "txn" {
				key = o.Compare
			}
			m := &mop{op: o, id: i, group: c.group(key), slot: c.slots(c.group(key)), unknown: true}
			ret := int64(1) << 62
			v := valueOf(o)
			w, watchedHere := watched[v]
			switch {
			case v != "" && watchedHere && w.cluster == e.cluster:
				// Seen applied: a watch delivered its value (values are unique), at that revision.
				m.seenRev, ret = w.rev, w.time
			case v != "" && watchedHere:
				continue // applied by another cluster: a request reaches one
			case (v == "" || !seen[v]) && o.Call > lastReturn[m.group]:
				continue // nothing answered on its keys after it: whatever it did, nobody saw
			case v != "" && !seen[v] && coverage.covers(e.cluster, o.Call):
				// Never read, never delivered by a watch that kept up for 10 s after it: not applied.
				continue
			default:
				c.sum.Unresolved++
			}
			if ret < o.Call {
				ret = o.Call
			}
			add(m, o.Call, ret)
		}
		remaining := c.timeout - time.Since(started)
		for g := 0; g < groups; g++ {
			init := []state{{}}
			if n > 0 && n <= len(c.restores) {
				init = c.cutState(epochs, n, g)
			}
			ops := perGroup[g]
			if len(ops) == 0 {
				continue
			}
			budget := remaining / time.Duration(groups-g)
			if budget < time.Second {
				budget = time.Second
			}
			t0 := time.Now()
			model := groupModel(init, func(s int) string {
				if s+g*groupSize < c.h.Meta.Keys {
					return c.keyName(g*groupSize + s)
				}
				return ""
			})
			res, info := porcupine.CheckOperationsVerbose(model, ops, budget)
			remaining -= time.Since(t0)
			switch res {
			case porcupine.Illegal:
				c.sum.Linearizable = "illegal"
				c.violation("not linearizable (cluster %x, keys %s): %s", e.cluster, strings.Join(keysOf(c.slots(g)), ", "),
					c.witness(model, info, ops, init))
				if err := porcupine.VisualizePath(model, info, c.html); err == nil {
					c.sum.HTML = c.html
				}
				return
			case porcupine.Unknown:
				c.sum.Linearizable = "unknown"
			}
		}
	}
}

func keysOf(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func valueOf(o *Op) string {
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

// cutState: the states a group can start epoch n in, the restored backup's revision R of epoch
// n-1: each key as the answered writes at or before R left it, or as a write of unknown
// outcome made it.
func (c *checker) cutState(epochs []*epoch, n int, g int) []state {
	r := c.restores[n-1].Revision
	prev := epochs[n-1]
	slots := c.slots(g)
	cands := make([][]kstate, groupSize)
	last := make([]*effect, groupSize)
	var effs []effect
	for _, i := range prev.ops {
		effs = append(effs, effects(&c.h.Ops[i], i)...)
	}
	sort.Slice(effs, func(a, b int) bool { return effs[a].rev < effs[b].rev })
	for k := range effs {
		e := effs[k]
		if s, ok := slots[e.key]; ok && e.rev <= r {
			last[s] = &effs[k]
		}
	}
	for s := 0; s < groupSize; s++ {
		switch {
		case last[s] == nil:
			cands[s] = []kstate{{}}
		case last[s].del:
			cands[s] = []kstate{{}}
		default:
			o := &c.h.Ops[last[s].op]
			lease := o.Lease
			if o.Kind == "txn" {
				lease = 0
			}
			cands[s] = []kstate{{Present: true, Value: last[s].value, Mod: last[s].rev, Exact: true, Lease: lease}}
		}
	}
	// The backup's revision is a lower bound of what its snapshot holds (the status read before
	// streaming): an acknowledged write after it may be in it too.
	for k := range effs {
		e := effs[k]
		s, ok := slots[e.key]
		if !ok || e.rev <= r {
			continue
		}
		if e.del {
			cands[s] = append(cands[s], kstate{})
			continue
		}
		o := &c.h.Ops[e.op]
		lease := o.Lease
		if o.Kind == "txn" {
			lease = 0
		}
		cands[s] = append(cands[s], kstate{Present: true, Value: e.value, Mod: e.rev, Exact: true, Lease: lease})
	}
	// Writes of unknown outcome (and revokes, whose effect is not in their answer) on the
	// group's keys before the cut: any of them may be what the backup holds.
	pastR := prev.end + int64(5*time.Second)
	for i := range c.h.Ops {
		o := &c.h.Ops[i]
		if o.Call > pastR || !(o.Status == "fail" && o.isWrite() || o.Kind == "revoke" && o.Status == "ok") {
			continue
		}
		if o.Kind == "txn" {
			for _, t := range o.Then {
				if s, ok := slots[t.Key]; ok && t.Kind == "put" {
					cands[s] = append(cands[s], kstate{Present: true, Value: t.Value})
				}
			}
			for _, t := range append(append([]TxnOp{}, o.Then...), o.Else...) {
				if s, ok := slots[t.Key]; ok && t.Kind == "delete" {
					cands[s] = append(cands[s], kstate{})
				}
			}
			continue
		}
		s, ok := slots[o.Key]
		if !ok {
			continue
		}
		if o.Kind == "put" {
			cands[s] = append(cands[s], kstate{Present: true, Value: o.Value, Lease: o.Lease})
		} else {
			cands[s] = append(cands[s], kstate{})
		}
	}
	out := []state{{Rev: 0}}
	for s := 0; s < groupSize; s++ {
		var next []state
		seen := map[kstate]bool{}
		for _, k := range cands[s] {
			if seen[k] {
				continue
			}
			seen[k] = true
			for _, st := range out {
				st.K[s] = k
				next = append(next, st)
			}
		}
		out = next
	}
	return out
}

// witness: the operation that could not be placed, and what the store could be just before it.
func (c *checker) witness(model porcupine.Model, info porcupine.LinearizationInfo, ops []porcupine.Operation, init []state) string {
	partials := info.PartialLinearizationsOperations()
	if len(partials) == 0 || len(partials[0]) == 0 {
		return "no operation could be placed"
	}
	longest := partials[0][0]
	for _, p := range partials[0] {
		if len(p) > len(longest) {
			longest = p
		}
	}
	placed := map[*mop]bool{}
	states := []state{}
	states = append(states, init...)
	for _, op := range longest {
		m := op.Input.(*mop)
		placed[m] = true
		var next []state
		for _, s := range states {
			next = append(next, step(s, m)...)
		}
		states = next
	}
	var culprit *porcupine.Operation
	for k := range ops {
		m := ops[k].Input.(*mop)
		if placed[m] || m.unknown {
			continue
		}
		if culprit == nil || ops[k].Return < culprit.Return {
			culprit = &ops[k]
		}
	}
	if culprit == nil {
		return "every answered operation placed, yet no order fits"
	}
	m := culprit.Input.(*mop)
	var could []string
	for k, s := range states {
		if k == 3 {
			could = append(could, "…")
			break
		}
		could = append(could, s.describe(func(i int) string {
			if i+m.group*groupSize < c.h.Meta.Keys {
				return c.keyName(m.group*groupSize + i)
			}
			return ""
		}))
	}
	return fmt.Sprintf("%s; the store before it could only be: %s", describeOp(m.op), strings.Join(could, " | "))
}
