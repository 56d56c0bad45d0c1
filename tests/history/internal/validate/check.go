// Package validate checks a history: linearizability, the watch guarantees, reads, revisions,
// declared restores and splits, and writes of unknown outcome settled by the members' logs.
package validate

// The checker: linearizability with porcupine (failed writes maybe applied, resolved from the
// watches where they can be, as etcd's robustness tests resolve them), revisions that never go
// back, the watch guarantees (https://etcd.io/docs/v3.6/learning/api_guarantees/#watch-apis),
// restores as declared cuts, and a second cluster id without one as a split.

import (
	"fmt"
	"sort"
	"time"

	"etcd-asg-lifecycle/tests/history/internal/history"
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
	WAL             *WALReport     `json:"wal,omitempty"`
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

// The rules that can be switched off one at a time (tests only: the command runs them all), to
// show that each matters: a history it alone rejects passes without it.
const (
	// Every watch event is of a write that can have made it, at its revision: a PUT of a value a
	// client wrote to that key, a DELETE of a key that was there by a write that deletes it.
	ruleWatchCause = "watch-cause"
	// One revision, one write, across key groups (porcupine checks each group on its own).
	ruleOneWrite = "one-write-per-revision"
	// A watch is answered by a cluster some operation saw (a split seen only by a watch).
	ruleWatchCluster = "watch-cluster"
	// A serializable read returns a state its own revision had.
	ruleSerializable = "serializable-reads"
	// Versions and create revisions, in reads (the model) and in watch events.
	ruleVersions = "versions"
	// A read returns only keys it asked for, each once, in order.
	ruleReadBounds = "read-bounds"
	// Progress notifications never go back, nor below an event already delivered.
	ruleProgress = "progress-order"
	// Two watches that deliver a revision deliver the same events for it.
	ruleWatchesAgree = "watches-agree"
	// A revoked lease is gone: a put with it fails (the model keeps the revoked leases).
	ruleLeases = "leases"
	// A revoke deletes the key attached to its lease at the revoke's revision: a watch that covered
	// it delivers that DELETE.
	ruleRevokeDeletes = "revoke-deletes"
)

// Options are the checker's settings: the command's flags, and the rules switched off.
type Options struct {
	// Timeout: the most the linearizability check takes.
	Timeout time.Duration
	// HTML: where porcupine's visualization is written on a violation.
	HTML string
	// Fresh: a stale serializable read is a violation.
	Fresh    bool
	Restores []Restore
	// Off: rules switched off (tests only: the command runs them all).
	Off map[string]bool
	// WALDirs: the members' data directories, whose logs settle writes of unknown outcome.
	WALDirs []string
}

type checker struct {
	Options
	h      *history.History
	keyIdx map[string]int
	sum    Summary
	// clusters: every cluster id an answered operation saw.
	clusters map[uint64]bool
	// claims: per cluster, the write each revision is known to be of (an index in h.Ops).
	claims map[uint64]map[int64]int
	// writer: the operation that tried each value (values are unique).
	writer map[string]int
	// wal: what the members persisted (nil: not given).
	wal *walEvidence
}

func (c *checker) on(rule string) bool { return !c.Off[rule] }

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

// Check judges a history with these options: what it found. It panics on a history it cannot
// judge (the command refuses it as unreadable).
func Check(h *history.History, opts Options) Summary {
	c := &checker{h: h, Options: opts}
	c.run()
	return c.sum
}

func (c *checker) run() {
	h := c.h
	c.keyIdx = map[string]int{}
	for i := 0; i < h.Meta.Keys; i++ {
		c.keyIdx[c.keyName(i)] = i
	}
	c.sum.ByKind = map[string]int{}
	c.writer = map[string]int{}
	for i := range h.Ops {
		o := &h.Ops[i]
		for _, v := range o.Values() {
			c.writer[v] = i
		}
		c.sum.Ops++
		c.sum.ByKind[o.Kind]++
		if o.Status == "ok" {
			c.sum.OK++
		} else {
			c.sum.Failed++
		}
		for _, k := range o.Keys() {
			if _, ok := c.keyIdx[k]; !ok && o.Kind != "range" {
				c.violation("operation on %q, outside the recorder's keys: %s", k, history.Describe(o))
			}
		}
	}
	c.availability()
	epochs := c.epochs()
	c.cuts(epochs)
	c.revisionsForward(epochs)
	c.oneWritePerRevision(epochs)
	c.readBounds()
	c.staleReads(epochs)
	c.watches(epochs)
	c.serializableReads()
	if len(c.WALDirs) > 0 {
		c.loadWAL()
	}
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
			c.sum.FailedWindow = fmt.Sprintf("%s-%s", history.Secs(returns[i-1]), history.Secs(returns[i]))
		}
	}
}
