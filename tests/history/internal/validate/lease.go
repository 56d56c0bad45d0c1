package validate

import "etcd-asg-lifecycle/tests/history/internal/history"

// What a revoke deleted. A revoke's answer does not say which keys it deleted; etcd's model
// knows (it deletes every key attached to the lease, all at one new revision), and so can the
// watches: a lease put acknowledged at revision p, of key k, and the revoke of that lease
// acknowledged at revision R > p; if no write touched k in between, k was still attached, and the
// revoke deleted it at R. A watch session that covered R must then deliver that DELETE.

// revokeDeletes adds to each cluster's expected events the DELETE every acknowledged revoke must
// have made: its key's last lease put with that lease before it, and no event on the key in
// between (nor a PUT of it at the revoke's own revision) in any session, where some session
// delivered everything from that put to the revoke (had a write touched the key in between, it
// would have shown it).
func (c *checker) revokeDeletes(w *watchCheck, sessions []*wsession) {
	if !c.on(ruleRevokeDeletes) {
		return
	}
	events := map[uint64]map[string][]history.Event{}
	for _, r := range c.h.Watches {
		if events[r.Header.Cluster] == nil {
			events[r.Header.Cluster] = map[string][]history.Event{}
		}
		for _, e := range r.Events {
			events[r.Header.Cluster][e.KV.Key] = append(events[r.Header.Cluster][e.KV.Key], e)
		}
	}
	for i := range c.h.Ops {
		o := &c.h.Ops[i]
		if o.Kind != "revoke" || o.Status != "ok" || o.Header == nil || w.want[o.Header.Cluster] == nil {
			continue
		}
		cluster, rev := o.Header.Cluster, o.Header.Revision
		p := c.lastLeasePut(o, rev)
		if p == 0 || !coveredBySome(sessions, cluster, p, rev) || touched(events[cluster][o.Key], w.want[cluster], o.Key, p, rev) {
			continue
		}
		w.want[cluster][evKey{rev, o.Key}] = effect{key: o.Key, del: true, rev: rev, op: i, lease: o.Lease}
	}
}

// lastLeasePut: the revision of the last put of the revoke's key with its lease acknowledged by
// its cluster below rev (0: none).
func (c *checker) lastLeasePut(revoke *history.Op, rev int64) int64 {
	var p int64
	for i := range c.h.Ops {
		o := &c.h.Ops[i]
		if o.Kind == "put" && o.Status == "ok" && o.Lease == revoke.Lease && o.Key == revoke.Key &&
			o.Header.Cluster == revoke.Header.Cluster && o.Header.Revision < rev && o.Header.Revision > p {
			p = o.Header.Revision
		}
	}
	return p
}

// coveredBySome: a session of cluster delivered everything in (p, rev].
func coveredBySome(sessions []*wsession, cluster uint64, p, rev int64) bool {
	for _, s := range sessions {
		if s.cluster == cluster && s.s.From <= p+1 && s.covered >= rev {
			return true
		}
	}
	return false
}

// touched: an event on key in (p, rev), or a PUT of it at rev, delivered or acknowledged.
func touched(evs []history.Event, want map[evKey]effect, key string, p, rev int64) bool {
	for _, e := range evs {
		if e.KV.Mod > p && (e.KV.Mod < rev || e.KV.Mod == rev && e.Type == "PUT") {
			return true
		}
	}
	for ek, x := range want {
		if ek.key == key && ek.rev > p && (ek.rev < rev || ek.rev == rev && !x.del) {
			return true
		}
	}
	return false
}
