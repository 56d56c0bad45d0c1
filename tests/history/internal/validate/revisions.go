package validate

import (
	"fmt"

	"etcd-asg-lifecycle/tests/history/internal/history"
)

// One revision, one write: etcd gives each write that changes the store a revision of its own,
// whatever keys it touches. porcupine checks each key group on its own and cannot see two groups'
// writes at one revision, so it is checked here, across groups, for the acknowledged writes and
// for the writes of unknown outcome a watch showed applied.

// oneWritePerRevision records which acknowledged write each revision is (c.claims) and rejects
// two at one. Revokes are left out: one that deleted nothing answers at the last write's
// revision; so are deletes that deleted nothing and transactions that wrote nothing.
func (c *checker) oneWritePerRevision(epochs []*epoch) {
	c.claims = map[uint64]map[int64]int{}
	reported := false
	for _, e := range epochs {
		m := map[int64]int{}
		c.claims[e.cluster] = m
		for _, i := range e.ops {
			fx := effects(&c.h.Ops[i], i)
			if len(fx) == 0 {
				continue
			}
			rev := fx[0].rev
			j, taken := m[rev]
			if !taken {
				m[rev] = i
				continue
			}
			if c.on(ruleOneWrite) && !reported {
				reported = true
				c.violation("two writes at revision %d of cluster %x: %s, and %s", rev, e.cluster,
					history.Describe(&c.h.Ops[j]), history.Describe(&c.h.Ops[i]))
			}
		}
	}
}

// claimOf: the write revision rev of cluster is known to be, if any.
func (c *checker) claimOf(cluster uint64, rev int64) (int, bool) {
	i, ok := c.claims[cluster][rev]
	return i, ok
}

// claim: a watch showed write i applied at revision rev of cluster. A violation text if another
// write has that revision, else "".
func (c *checker) claim(cluster uint64, rev int64, i int) string {
	if c.claims[cluster] == nil {
		c.claims[cluster] = map[int64]int{}
	}
	j, taken := c.claims[cluster][rev]
	switch {
	case !taken:
		c.claims[cluster][rev] = i
	case j != i && c.on(ruleOneWrite):
		return "two writes at revision " + itoa(rev) + ": " + history.Describe(&c.h.Ops[j]) + ", and " + history.Describe(&c.h.Ops[i])
	}
	return ""
}

// effectDeletes says whether write i, acknowledged, deleted key.
func (c *checker) effectDeletes(i int, key string) bool {
	for _, x := range effects(&c.h.Ops[i], i) {
		if x.key == key && x.del {
			return true
		}
	}
	return false
}

func itoa(n int64) string { return fmt.Sprintf("%d", n) }
