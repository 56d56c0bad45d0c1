package validate

// Writes of unknown outcome settled by what the members persisted, as etcd's robustness tests
// patch their histories (tests/robustness/validate/patch_history.go): a write whose request a
// member's log holds committed was applied, and took effect before the first acknowledged write
// persisted after it returned; one no member's log holds, where the logs are known complete
// since before it was sent, was not.

import (
	"fmt"
	"os"

	"etcd-asg-lifecycle/tests/history/internal/history"
	"etcd-asg-lifecycle/tests/history/internal/wal"
)

// WALReport is what the members' logs settled.
type WALReport struct {
	Dirs       int `json:"dirs"`
	Read       int `json:"read"`
	Entries    int `json:"entries"`
	Applied    int `json:"applied"`
	NotApplied int `json:"not_applied"`
	// committed entries etcd's applier refused under an alarm, or may have refused
	Refused  int `json:"refused_entries"`
	Doubtful int `json:"doubtful_entries"`
}

type walVerdict int

const (
	walUnknown walVerdict = iota
	walApplied
	walNotApplied
	walElsewhere // applied by another cluster
)

// walEvidence: the clusters' logs, and where the acknowledged writes are in them.
type walEvidence struct {
	logs map[uint64]*wal.ClusterLog
	// every data directory was read (else nothing is settled as not applied)
	allRead bool
	// per cluster: the acknowledged writes of unique values found committed
	acked map[uint64][]ackAt
	// per signature: the failed operations
	failed map[string]int
}

type ackAt struct {
	index uint64
	ret   int64
}

// loadWAL reads every data directory and merges their logs.
func (c *checker) loadWAL() {
	ev := &walEvidence{allRead: true, acked: map[uint64][]ackAt{}, failed: map[string]int{}}
	c.sum.WAL = &WALReport{Dirs: len(c.WALDirs)}
	var members []*wal.Member
	for _, dir := range c.WALDirs {
		m, err := wal.ReadMember(dir)
		if err != nil {
			fmt.Fprintf(os.Stderr, "history check: %s: %v (nothing settled as not applied)\n", dir, err)
			ev.allRead = false
			continue
		}
		c.sum.WAL.Read++
		c.sum.WAL.Entries += len(m.Entries)
		members = append(members, m)
	}
	logs, err := wal.Merge(members)
	if err != nil {
		c.violation("%v", err)
		return
	}
	ev.logs = logs
	for _, l := range logs {
		c.sum.WAL.Refused += len(l.Refused)
		c.sum.WAL.Doubtful += len(l.Doubtful)
	}
	for i := range c.h.Ops {
		o := &c.h.Ops[i]
		sig, unique := wal.OpSig(o)
		switch {
		case sig == "" || !o.IsWrite() && o.Kind != "revoke":
			continue
		case o.Status == "fail":
			ev.failed[sig]++
			continue
		}
		if o.Status != "ok" || !unique || o.Header == nil {
			continue // an answer lost on the way has no header
		}
		if l := logs[o.Header.Cluster]; l != nil && len(l.At[sig]) > 0 {
			ev.acked[l.Cluster] = append(ev.acked[l.Cluster], ackAt{index: l.At[sig][0], ret: o.Return})
		}
	}
	c.wal = ev
}

// walVerdict settles a failed write, for the epoch of cluster: and if applied, the latest it
// can have taken effect (the return of the first acknowledged write persisted after it).
func (c *checker) walVerdict(o *history.Op, cluster uint64) (walVerdict, int64) {
	if c.wal == nil || c.wal.logs[cluster] == nil {
		return walUnknown, 0
	}
	sig, unique := wal.OpSig(o)
	if sig == "" {
		return walUnknown, 0
	}
	l := c.wal.logs[cluster]
	if !unique {
		return c.countVerdict(l, sig)
	}
	if idx := l.At[sig]; len(idx) > 0 {
		// Committed: applied unless etcd's applier refused it (wal.ClusterLog.judge).
		applied, doubtful := uint64(0), false
		for _, i := range idx {
			doubtful = doubtful || l.Doubtful[i]
			if !l.Doubtful[i] && !l.Refused[i] {
				applied = i
				break
			}
		}
		switch {
		case applied == 0 && doubtful:
			return walUnknown, 0
		case applied == 0:
			return walNotApplied, 0 // refused under an alarm
		}
		bound := int64(1) << 62
		for _, a := range c.wal.acked[cluster] {
			if a.index > applied && a.ret < bound {
				bound = a.ret
			}
		}
		return walApplied, bound
	}
	for _, other := range c.wal.logs {
		if other.Pending[sig] > 0 {
			return walUnknown, 0 // persisted, not known committed
		}
		if len(other.At[sig]) > 0 {
			return walElsewhere, 0
		}
	}
	if !c.wal.allRead {
		return walUnknown, 0
	}
	// Absent: known not applied if the log is known whole from a write acknowledged before it
	// was sent (or from the cluster's first index) to its end.
	covered := l.Complete()
	for _, a := range c.wal.acked[cluster] {
		if a.ret < o.Call && a.index >= l.GapFrom {
			covered = true
		}
	}
	if covered {
		return walNotApplied, 0
	}
	return walUnknown, 0
}

// countVerdict: a delete (of a key) or a revoke (of a lease) is not unique; in a log whole from
// the cluster's first index, as many persisted as were answered means the failed ones were not
// applied, as many as were sent means they all were.
func (c *checker) countVerdict(l *wal.ClusterLog, sig string) (walVerdict, int64) {
	if !c.wal.allRead || !l.Complete() || l.Pending[sig] > 0 {
		return walUnknown, 0
	}
	answered := 0
	for i := range c.h.Ops {
		o := &c.h.Ops[i]
		s, _ := wal.OpSig(o)
		switch {
		case s != sig || o.Status == "fail":
		case o.Header != nil && o.Header.Cluster == l.Cluster:
			answered++
		case o.Status == "gone" && len(c.clusters) == 1:
			answered++ // refused (its lease gone) after it was persisted: the one cluster's
		case o.Status == "gone":
			return walUnknown, 0 // refused by which cluster?
		}
	}
	persisted := 0
	for _, i := range l.At[sig] {
		if l.Doubtful[i] {
			return walUnknown, 0
		}
		if !l.Refused[i] {
			persisted++
		}
	}
	switch {
	case persisted == answered:
		return walNotApplied, 0
	case persisted == answered+c.wal.failed[sig]:
		return walApplied, int64(1) << 62
	}
	return walUnknown, 0
}
