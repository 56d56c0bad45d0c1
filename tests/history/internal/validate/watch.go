package validate

// The watch guarantees, as etcd defines them
// (https://etcd.io/docs/v3.6/learning/api_guarantees/#watch-apis) and its robustness tests check
// them (tests/robustness/validate/watch.go): ordered, unique, atomic, reliable, resumable,
// bookmarkable; watches that agree on each revision; and every event is of a write some client
// made, as it made it, at a revision no other write has.

import (
	"fmt"
	"sort"
	"strings"

	"etcd-asg-lifecycle/tests/history/internal/history"
)

type evKey struct {
	rev int64
	key string
}

// watchCheck is what every session is checked against.
type watchCheck struct {
	want     map[uint64]map[evKey]effect // what the answered writes did, by cluster
	byRev    map[uint64]map[int64]string // the events a watch delivered for each revision, by cluster
	deleters map[string][]int            // the operations that can delete each key
}

// wsession is one watch session's responses and what it has delivered so far.
type wsession struct {
	s         history.Session
	resps     []history.WatchResp
	name      string
	delivered map[evKey]int         // response index
	revResp   map[int64]int         // the response each revision came in
	last      int64                 // last event revision
	covered   int64                 // every revision up to this was delivered (events or progress)
	notified  int64                 // the last progress notification's revision
	cluster   uint64                // the cluster that answers it
	present   map[string]int8       // what its events left of each key: 1 present, -1 absent, 0 not known
	prev      map[string]history.KV // each key's last PUT event
	// deferred: the first event that does not follow from the session's own earlier events (a
	// version that skips, a delete of a key already deleted), reported once the session is
	// otherwise sound: an event missed or out of order is the better witness of the same fault.
	deferred string
}

func (c *checker) watches(epochs []*epoch) {
	c.sum.WatchSessions = len(c.h.Sessions)
	w := &watchCheck{want: map[uint64]map[evKey]effect{}, byRev: map[uint64]map[int64]string{}, deleters: map[string][]int{}}
	for _, e := range epochs {
		m := map[evKey]effect{}
		for _, i := range e.ops {
			for _, x := range effects(&c.h.Ops[i], i) {
				m[evKey{x.rev, x.key}] = x
			}
		}
		w.want[e.cluster] = m
	}
	for i := range c.h.Ops {
		for k := range c.keyIdx {
			if c.h.Ops[i].Deletes(k) {
				w.deleters[k] = append(w.deleters[k], i)
			}
		}
	}
	sessions, ok := c.sessionsOf()
	if !ok {
		return
	}
	for _, s := range sessions {
		if !c.session(w, s) {
			return
		}
	}
	// Reliable, once every session's coverage is known (a revoke's delete is expected only where
	// some session delivered everything around it).
	c.revokeDeletes(w, sessions)
	for _, s := range sessions {
		if !c.reliable(w, s) {
			return
		}
		if s.deferred != "" {
			c.violation("%s: %s", s.name, s.deferred)
			return
		}
	}
}

// sessionsOf: the watch sessions, in order, each with its responses in time order.
func (c *checker) sessionsOf() ([]*wsession, bool) {
	byKey := map[[2]int]*wsession{}
	var out []*wsession
	for _, s := range c.h.Sessions {
		ws := &wsession{s: s, delivered: map[evKey]int{}, revResp: map[int64]int{}, present: map[string]int8{}, prev: map[string]history.KV{},
			name: fmt.Sprintf("watch %d session %d (from revision %d)", s.Watcher, s.Session, s.From)}
		if s.Why == "start" {
			// The first sessions start from the recording's first revision, the prefix empty (the
			// model starts there too).
			for k := range c.keyIdx {
				ws.present[k] = -1
			}
		}
		byKey[[2]int{s.Watcher, s.Session}] = ws
		out = append(out, ws)
	}
	for _, r := range c.h.Watches {
		s := byKey[[2]int{r.Watcher, r.Session}]
		if s == nil {
			c.violation("watch %d session %d: a response with no session start", r.Watcher, r.Session)
			return nil, false
		}
		s.resps = append(s.resps, r)
	}
	for _, s := range out {
		sort.SliceStable(s.resps, func(a, b int) bool { return s.resps[a].Time < s.resps[b].Time })
	}
	return out, true
}

// session checks one session's responses; false on a violation.
func (c *checker) session(w *watchCheck, s *wsession) bool {
	for n := range s.resps {
		r := &s.resps[n]
		if r.Canceled || r.Compact != 0 {
			if r.Compact != 0 {
				c.sum.WatchCompacted++
			}
			break
		}
		if s.cluster == 0 {
			s.cluster = r.Header.Cluster
		}
		if r.Header.Cluster != s.cluster && r.Header.Cluster != 0 {
			c.violation("%s: answered by cluster %x after cluster %x, with no cancellation", s.name, r.Header.Cluster, s.cluster)
			return false
		}
		if c.on(ruleWatchCluster) && r.Header.Cluster != 0 && !c.clusters[r.Header.Cluster] {
			c.violation("split brain: %s answered by cluster %x at %s, which answered no operation (clusters %s)",
				s.name, r.Header.Cluster, history.Secs(r.Time), strings.Join(c.sum.Clusters, ", "))
			return false
		}
		if r.Progress {
			if !c.progress(w, s, r) {
				return false
			}
			continue
		}
		for _, e := range r.Events {
			if !c.event(w, s, r, n, e) {
				return false
			}
		}
		if !c.agree(w, s, r) {
			return false
		}
		if s.last > s.covered {
			s.covered = s.last
		}
	}
	return true
}

// progress: a progress notification says every event up to its revision was delivered.
func (c *checker) progress(w *watchCheck, s *wsession, r *history.WatchResp) bool {
	c.sum.WatchProgress++
	rev := r.Header.Revision
	if c.on(ruleProgress) && rev < s.notified {
		c.violation("%s: progress notification at revision %d (at %s) after one at revision %d: it went back",
			s.name, rev, history.Secs(r.Time), s.notified)
		return false
	}
	if c.on(ruleProgress) && rev < s.last {
		c.violation("%s: progress notification at revision %d (at %s) below the event at revision %d already delivered",
			s.name, rev, history.Secs(r.Time), s.last)
		return false
	}
	// Bookmarkable: everything at or before the notified revision was delivered.
	for ek, x := range w.want[s.cluster] {
		if ek.rev >= s.s.From && ek.rev <= rev {
			if _, ok := s.delivered[ek]; !ok {
				c.violation("%s: progress notification at revision %d (at %s) before the event of %s at revision %d was delivered",
					s.name, rev, history.Secs(r.Time), describeEffect(x), ek.rev)
				return false
			}
		}
	}
	if rev > s.covered {
		s.covered = rev
	}
	if rev > s.notified {
		s.notified = rev
	}
	return true
}

// event checks one event: ordered, unique, atomic, after the last notification, and of a write
// that can have made it.
func (c *checker) event(w *watchCheck, s *wsession, r *history.WatchResp, n int, e history.Event) bool {
	c.sum.WatchEvents++
	ek := evKey{e.KV.Mod, e.KV.Key}
	var why string
	prev, dup := s.delivered[ek]
	switch {
	case e.KV.Mod < s.s.From:
		why = fmt.Sprintf("event %s at revision %d, before the revision it was asked from", evText(e), e.KV.Mod)
	case e.KV.Mod < s.last:
		why = fmt.Sprintf("event %s at revision %d delivered after one at revision %d (out of order, at %s)", evText(e), e.KV.Mod, s.last, history.Secs(r.Time))
	case e.KV.Mod <= s.notified && !dup:
		// Bookmarkable, the other way: nothing at or before a notified revision comes later.
		why = fmt.Sprintf("event %s at revision %d delivered after a progress notification at revision %d", evText(e), e.KV.Mod, s.notified)
	case dup:
		why = fmt.Sprintf("event %s at revision %d delivered twice (responses %d and %d, at %s)", evText(e), e.KV.Mod, prev, n, history.Secs(r.Time))
	case s.revResp[e.KV.Mod] != 0 && s.revResp[e.KV.Mod] != n+1:
		why = fmt.Sprintf("the events of revision %d split across responses %d and %d", e.KV.Mod, s.revResp[e.KV.Mod]-1, n)
	}
	if why == "" {
		s.revResp[e.KV.Mod] = n + 1
		s.delivered[ek] = n
		s.last = e.KV.Mod
		if e.Type == "PUT" {
			why = c.putCause(w, s, r, e)
		} else {
			why = c.deleteCause(w, s, r, e)
		}
	}
	if why != "" {
		c.violation("%s: %s", s.name, why)
		return false
	}
	return true
}

// putCause: a PUT event is of a value some client wrote to that key, at the revision its write
// was acknowledged at (if it was), where no other write was; with a version that follows.
func (c *checker) putCause(w *watchCheck, s *wsession, r *history.WatchResp, e history.Event) string {
	kv := e.KV
	i, ok := c.writer[kv.Value]
	if !ok || !contains(c.h.Ops[i].KeysWritten(), kv.Key) {
		return fmt.Sprintf("event puts %s=%s at revision %d, a value no client wrote there", kv.Key, kv.Value, kv.Mod)
	}
	o := &c.h.Ops[i]
	if o.Status == "ok" && o.Header.Cluster == r.Header.Cluster && o.Header.Revision != kv.Mod {
		return fmt.Sprintf("event puts %s=%s at revision %d, but the write was acknowledged at revision %d",
			kv.Key, kv.Value, kv.Mod, o.Header.Revision)
	}
	if x, ok := w.want[s.cluster][evKey{kv.Mod, kv.Key}]; ok && !x.del && x.value != kv.Value {
		return fmt.Sprintf("event puts %s=%s at revision %d, but %s was acknowledged there", kv.Key, kv.Value, kv.Mod, describeEffect(x))
	}
	if c.on(ruleWatchCause) {
		if x, ok := w.want[s.cluster][evKey{kv.Mod, kv.Key}]; ok && x.del {
			return fmt.Sprintf("event puts %s=%s at revision %d, but %s was acknowledged there", kv.Key, kv.Value, kv.Mod, describeEffect(x))
		}
		if o.Kind == "txn" && o.Status == "ok" && !o.OK {
			return fmt.Sprintf("event puts %s=%s at revision %d, of a transaction acknowledged as taking its Else branch: %s",
				kv.Key, kv.Value, kv.Mod, history.Describe(o))
		}
	}
	if why := c.claim(s.cluster, kv.Mod, i); why != "" {
		return fmt.Sprintf("event puts %s=%s: %s", kv.Key, kv.Value, why)
	}
	c.eventVersion(s, e)
	s.present[kv.Key], s.prev[kv.Key] = 1, kv
	return ""
}

// note keeps the first event that does not follow from the session's earlier ones.
func (s *wsession) note(why string) {
	if s.deferred == "" {
		s.deferred = why
	}
}

// eventVersion: a PUT event's version and create revision, against what the session's own
// events left of the key.
func (c *checker) eventVersion(s *wsession, e history.Event) {
	kv := e.KV
	if !c.on(ruleVersions) {
		return
	}
	prev, had := s.prev[kv.Key]
	text := fmt.Sprintf("event puts %s=%s at revision %d with version %d and create revision %d", kv.Key, kv.Value, kv.Mod, kv.Version, kv.Create)
	switch {
	case kv.Version < 1 || kv.Create < 1 || kv.Create > kv.Mod || (kv.Version == 1) != (kv.Create == kv.Mod):
		s.note(text + ", which cannot be (version 1 exactly when created at that revision)")
	case s.present[kv.Key] == -1 && kv.Version != 1:
		s.note(text + ", but the key was absent before it")
	case s.present[kv.Key] == 1 && had && (kv.Version != prev.Version+1 || kv.Create != prev.Create):
		s.note(text + fmt.Sprintf(", after version %d created at %d (revision %d)", prev.Version, prev.Create, prev.Mod))
	}
}

// deleteCause: a DELETE event is of a key that was there, by a write that deletes it at that
// revision: the acknowledged write of that revision, or (none acknowledged there) a delete,
// revoke or transaction of unknown outcome called before, or a revoke acknowledged at it.
func (c *checker) deleteCause(w *watchCheck, s *wsession, r *history.WatchResp, e history.Event) string {
	key, rev := e.KV.Key, e.KV.Mod
	was := s.present[key]
	s.present[key] = -1
	delete(s.prev, key)
	if !c.on(ruleWatchCause) {
		return ""
	}
	if was == -1 {
		s.note(fmt.Sprintf("event deletes %s at revision %d, a key already absent", key, rev))
	}
	if j, ok := c.claimOf(s.cluster, rev); ok {
		if !c.effectDeletes(j, key) {
			return fmt.Sprintf("event deletes %s at revision %d, but revision %d is the write %s, which did not delete it",
				key, rev, rev, history.Describe(&c.h.Ops[j]))
		}
		return ""
	}
	late := 0
	for _, i := range w.deleters[key] {
		o := &c.h.Ops[i]
		if !(o.Status == "fail" || o.Kind == "revoke" && o.Status == "ok" && o.Header.Cluster == s.cluster && o.Header.Revision == rev) {
			continue
		}
		if o.Call > r.Time {
			late++
			continue
		}
		return ""
	}
	if late > 0 {
		// The event arrived before any write that could have caused it was called: a response
		// delivered out of its place, or a clock that ran backwards.
		which := "the only write that could was"
		if late > 1 {
			which = fmt.Sprintf("the %d writes that could were", late)
		}
		return fmt.Sprintf("event deletes %s at revision %d, which no client's write can have done there: "+
			"%s called after the event arrived", key, rev, which)
	}
	return fmt.Sprintf("event deletes %s at revision %d, which no client's write can have done there", key, rev)
}

// agree: two watches that deliver a revision deliver the same events for it.
func (c *checker) agree(w *watchCheck, s *wsession, r *history.WatchResp) bool {
	if !c.on(ruleWatchesAgree) || len(r.Events) == 0 {
		return true
	}
	byRev := map[int64][]string{}
	for _, e := range r.Events {
		byRev[e.KV.Mod] = append(byRev[e.KV.Mod], fmt.Sprintf("%s (version %d, created %d, lease %x)", evText(e), e.KV.Version, e.KV.Create, e.KV.Lease))
	}
	if w.byRev[s.cluster] == nil {
		w.byRev[s.cluster] = map[int64]string{}
	}
	for rev, evs := range byRev {
		text := strings.Join(evs, "; ")
		if other, ok := w.byRev[s.cluster][rev]; ok && other != text {
			c.violation("%s: delivered %s at revision %d, another watch %s", s.name, text, rev, other)
			return false
		}
		w.byRev[s.cluster][rev] = text
	}
	return true
}

// reliable: every acknowledged write between the session's start and what it covered.
func (c *checker) reliable(w *watchCheck, s *wsession) bool {
	var missed []effect
	for ek, x := range w.want[s.cluster] {
		if ek.rev >= s.s.From && ek.rev <= s.covered {
			if _, ok := s.delivered[ek]; !ok {
				missed = append(missed, x)
			}
		}
	}
	if len(missed) == 0 {
		return true
	}
	sort.Slice(missed, func(a, b int) bool { return missed[a].rev < missed[b].rev })
	c.violation("%s: missed %d acknowledged writes it covered (up to revision %d); the first: %s at revision %d",
		s.name, len(missed), s.covered, describeEffect(missed[0]), missed[0].rev)
	return false
}

func describeEffect(x effect) string {
	if x.del && x.lease != 0 {
		return fmt.Sprintf("the delete of %s by the revoke of its lease %x", x.key, x.lease)
	}
	if x.del {
		return fmt.Sprintf("the delete of %s", x.key)
	}
	return fmt.Sprintf("%s=%s", x.key, x.value)
}

func evText(e history.Event) string {
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
