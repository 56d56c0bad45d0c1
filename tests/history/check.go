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
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"time"
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

// options are the checker's settings: the command's flags, and the rules switched off.
type options struct {
	timeout  time.Duration
	html     string
	fresh    bool
	restores []Restore
	off      map[string]bool
	// walDirs: the members' data directories, whose logs settle writes of unknown outcome.
	walDirs []string
}

type checker struct {
	options
	h      *History
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

func (c *checker) on(rule string) bool { return !c.off[rule] }

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

func check(args []string) (code int) {
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
	walDirs := fs.String("wal", "", "the members' data directories (comma-separated; replaced members' too): "+
		"their logs settle writes of unknown outcome")
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
	// Never a panic: a history the checker cannot judge is refused as unreadable.
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(os.Stderr, "history check: cannot check %s: %v\n%s", *path, r, debug.Stack())
			code = 3
		}
	}()
	c := &checker{h: h, options: options{timeout: *timeout, html: *html, fresh: *fresh, restores: restores}}
	for _, d := range strings.Split(*walDirs, ",") {
		if d = strings.TrimSpace(d); d != "" {
			c.walDirs = append(c.walDirs, d)
		}
	}
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
	c.writer = map[string]int{}
	for i := range h.Ops {
		o := &h.Ops[i]
		for _, v := range o.values() {
			c.writer[v] = i
		}
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
	c.oneWritePerRevision(epochs)
	c.readBounds()
	c.staleReads(epochs)
	c.watches(epochs)
	c.serializableReads()
	if len(c.walDirs) > 0 {
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
			c.sum.FailedWindow = fmt.Sprintf("%s-%s", secs(returns[i-1]), secs(returns[i]))
		}
	}
}
