package main

// A porcupine model of etcd's key-value store, for one group of keys (the recorder's operations
// each touch one group, so each group is checked on its own, as porcupine's partitions are).
// The state carries revisions, as etcd's robustness model does
// (https://github.com/etcd-io/etcd/blob/main/tests/robustness/model/non_deterministic.go); but
// other writers share the cluster (the simulation's own writer), so the store's revision is a
// lower bound: a write must move it forward, a read must not see it go back, and a key's mod
// revision is exact once seen. A write whose outcome is unknown forks the state: applied (at
// some later revision) or not.

import (
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"

	"github.com/anishathalye/porcupine"
)

const groupSize = 2

type kstate struct {
	Present bool
	Value   string
	Mod     int64 // exact if Exact, else a lower bound
	Exact   bool
	Lease   int64
	Version int64 // 0: not known (a key restored from a backup)
	Create  int64 // exact if CreateExact, else a lower bound
	// CreateExact: Create is the key's create revision.
	CreateExact bool
}

// put is a key after a put at revision rev (exact or a lower bound): a new key's version is 1
// and its create revision the put's; an existing key's version goes up by one.
func put(k kstate, value string, lease, rev int64, exact bool) kstate {
	n := kstate{Present: true, Value: value, Mod: rev, Exact: exact, Lease: lease}
	switch {
	case !k.Present:
		n.Version, n.Create, n.CreateExact = 1, rev, exact
	case k.Version != 0:
		n.Version, n.Create, n.CreateExact = k.Version+1, k.Create, k.CreateExact
	default:
		n.Create, n.CreateExact = k.Create, k.CreateExact
	}
	return n
}

type state struct {
	Rev int64 // the store's revision is at least this
	K   [groupSize]kstate
	// Revoked: the leases of this group's keys known revoked (sorted, comma-separated, hex), as
	// etcd's model removes a revoked lease from its state: a put with one of them fails ("requested
	// lease not found"). Each of the recorder's leases holds one key, so its puts and its revoke
	// are all in that key's group. A lease not revoked is taken to exist (its grant returned
	// before the client used it; a restore may bring back one revoked after its backup).
	Revoked string
}

// isRevoked says whether lease is known revoked in s.
func (s state) isRevoked(lease int64) bool {
	if lease == 0 || s.Revoked == "" {
		return false
	}
	id := strconv.FormatInt(lease, 16)
	for _, x := range strings.Split(s.Revoked, ",") {
		if x == id {
			return true
		}
	}
	return false
}

// revoke: s with lease known revoked, and the key attached to it (slot i) deleted; whether a key
// was deleted (the revoke then has a revision of its own).
func (s state) revoke(lease int64, i int) (state, bool) {
	if !s.isRevoked(lease) {
		ids := []string{strconv.FormatInt(lease, 16)}
		if s.Revoked != "" {
			ids = append(ids, strings.Split(s.Revoked, ",")...)
		}
		sort.Strings(ids)
		s.Revoked = strings.Join(ids, ",")
	}
	if s.K[i].Present && s.K[i].Lease == lease {
		s.K[i] = kstate{}
		return s, true
	}
	return s, false
}

// mop is one operation as the model sees it: the recorded operation, its group, the keys of
// that group it covers (a range), and whether its outcome is unknown.
type mop struct {
	op      *Op
	id      int // index in the history's operations
	group   int
	slot    map[string]int
	unknown bool
	// A failed write seen applied (its value in a watch event): its revision.
	seenRev int64
	// For reads split by group: the keys of this group the read covered, and what it returned.
	cover [groupSize]bool
	kvs   []KV
	// noThen: a transaction of unknown outcome whose Then branch is known not applied (its
	// values never seen where a watch would have shown them); its Else branch may have been.
	noThen bool
	// versions: reads are checked for each key's version and create revision too.
	versions bool
	// leases: revoked leases are kept, and a put on one rejected (the rule "leases").
	leases bool
	// applied: a write of unknown outcome a member's log shows was applied (at a revision not
	// known).
	applied bool
}

func (s state) describe(keyName func(int) string) string {
	var parts []string
	for i, k := range s.K {
		name := keyName(i)
		if name == "" {
			continue
		}
		switch {
		case !k.Present:
			parts = append(parts, name+" absent")
		case k.Exact:
			parts = append(parts, fmt.Sprintf("%s=%s (mod %d)", name, k.Value, k.Mod))
		default:
			parts = append(parts, fmt.Sprintf("%s=%s (mod ≥ %d)", name, k.Value, k.Mod))
		}
	}
	if s.Revoked != "" {
		parts = append(parts, "leases revoked "+s.Revoked)
	}
	return fmt.Sprintf("%s, store revision ≥ %d", strings.Join(parts, ", "), s.Rev)
}

func hashState(s state) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d|%s", s.Rev, s.Revoked)
	for _, k := range s.K {
		fmt.Fprintf(h, "|%t|%s|%d|%t|%d|%d|%d|%t", k.Present, k.Value, k.Mod, k.Exact, k.Lease, k.Version, k.Create, k.CreateExact)
	}
	return h.Sum64()
}

// observe checks what a read returned of one key against the state: the new state and whether
// it could be.
func observe(k kstate, got *KV, rev int64, versions bool) (kstate, bool) {
	if got == nil {
		return k, !k.Present
	}
	if !k.Present || k.Value != got.Value || k.Lease != got.Lease || got.Mod > rev {
		return k, false
	}
	if k.Exact && k.Mod != got.Mod || !k.Exact && got.Mod < k.Mod {
		return k, false
	}
	k.Mod, k.Exact = got.Mod, true
	if !versions {
		return k, true
	}
	return observeVersion(k, got)
}

// observeVersion: a key's version and create revision as read, against the state's. A version
// is 1 exactly when the key was created at its mod revision.
func observeVersion(k kstate, got *KV) (kstate, bool) {
	if got.Version < 1 || got.Create < 1 || got.Create > got.Mod || (got.Version == 1) != (got.Create == got.Mod) {
		return k, false
	}
	if k.Version != 0 && k.Version != got.Version {
		return k, false
	}
	if k.CreateExact && k.Create != got.Create || !k.CreateExact && got.Create < k.Create {
		return k, false
	}
	k.Version, k.Create, k.CreateExact = got.Version, got.Create, true
	return k, true
}

func findKV(kvs []KV, key string) *KV {
	for i := range kvs {
		if kvs[i].Key == key {
			return &kvs[i]
		}
	}
	return nil
}

// applyTxnBranch runs a branch's operations on the state at revision `rev` (exact or a lower
// bound): the new state, whether the branch wrote, and whether its reads matched `kvs`/`deleted`
// (not checked when `check` is false: the outcome is unknown).
func applyBranch(s state, ops []TxnOp, m *mop, rev int64, exact bool, check bool, kvs []KV, deleted int64) (state, bool, bool) {
	wrote := false
	var dels int64
	for _, t := range ops {
		i := m.slot[t.Key]
		switch t.Kind {
		case "get":
			if check {
				var ok bool
				if s.K[i], ok = observe(s.K[i], findKV(kvs, t.Key), rev, m.versions); !ok {
					return s, wrote, false
				}
			}
		case "put":
			s.K[i] = put(s.K[i], t.Value, t.Lease, rev, exact)
			wrote = true
		case "delete":
			if s.K[i].Present {
				s.K[i] = kstate{}
				wrote = true
				dels++
			}
		}
	}
	if check && dels != deleted {
		return s, wrote, false
	}
	return s, wrote, true
}

// step is the model's transition: every state the operation can lead to (none: it cannot).
func step(s state, m *mop) []state {
	o := m.op
	if m.unknown && m.seenRev == 0 && m.applied {
		return stepApplied(s, m)
	}
	if m.unknown && m.seenRev == 0 {
		return append([]state{s}, applyUnknown(s, m)...)
	}
	rev := m.seenRev
	if o.Header != nil {
		rev = o.Header.Revision
	}
	if rev < s.Rev {
		return nil // a revision that went back
	}
	switch o.Kind {
	case "get", "range":
		n := s
		for key, i := range m.slot {
			if !m.cover[i] {
				continue
			}
			var ok bool
			if n.K[i], ok = observe(n.K[i], findKV(m.kvs, key), rev, m.versions); !ok {
				return nil
			}
		}
		n.Rev = rev
		return []state{n}
	case "put":
		if rev <= s.Rev || m.leases && s.isRevoked(o.Lease) {
			return nil // a put on a revoked lease fails: "requested lease not found"
		}
		n := s
		n.K[m.slot[o.Key]] = put(s.K[m.slot[o.Key]], o.Value, o.Lease, rev, true)
		n.Rev = rev
		return []state{n}
	case "revoke":
		return stepRevoke(s, m, rev)
	case "delete":
		i := m.slot[o.Key]
		n := s
		hit := s.K[i].Present
		if m.seenRev == 0 && (o.Deleted == 1) != hit {
			return nil
		}
		if hit {
			if rev <= s.Rev {
				return nil
			}
			n.K[i] = kstate{}
		}
		n.Rev = rev
		return []state{n}
	case "txn":
		var out []state
		for _, branch := range txnBranches(s, m) {
			// A transaction seen applied through a watch (its outcome was unknown) took Then.
			if (m.seenRev == 0 && branch.then != o.OK) || (m.seenRev != 0 && !branch.then) {
				continue
			}
			ops := o.Else
			if branch.then {
				ops = o.Then
			}
			n, wrote, ok := applyBranch(branch.s, ops, m, rev, true, m.seenRev == 0, o.KVs, o.Deleted)
			if !ok || (wrote && rev <= s.Rev) {
				continue
			}
			n.Rev = rev
			out = append(out, n)
		}
		return out
	}
	return []state{s}
}

// stepRevoke: an acknowledged revoke at revision rev deletes the key attached to its lease (a
// revision of its own: rev must be past the store's), else leaves the revision where it was; the
// lease is gone either way.
func stepRevoke(s state, m *mop, rev int64) []state {
	n, hit := s.revoke(m.op.Lease, m.slot[m.op.Key])
	if !m.leases {
		n.Revoked = s.Revoked
	}
	if hit && rev <= s.Rev {
		return nil
	}
	n.Rev = rev
	return []state{n}
}

// stepApplied: a write known applied, at a revision not known: what it did (a put on a revoked
// lease, a delete of a key not there: nothing; a transaction may have taken a branch that wrote
// nothing).
func stepApplied(s state, m *mop) []state {
	out := applyUnknown(s, m)
	if len(out) == 0 || m.op.Kind == "txn" {
		out = append(out, s)
	}
	return out
}

type branch struct {
	s    state
	then bool
}

// txnBranches: which branches the compare can take in state s (both, when the key's mod
// revision is only bounded), with the state refined by the compare's answer.
func txnBranches(s state, m *mop) []branch {
	k := s.K[m.slot[m.op.Compare]]
	mod := int64(0)
	if k.Present {
		mod = k.Mod
	}
	if !k.Present || k.Exact {
		return []branch{{s, mod == m.op.Expect}}
	}
	out := []branch{{s, false}}
	if m.op.Expect >= k.Mod {
		t := s
		t.K[m.slot[m.op.Compare]].Mod, t.K[m.slot[m.op.Compare]].Exact = m.op.Expect, true
		out = append(out, branch{t, true})
	}
	return out
}

// applyUnknown: the states a write of unknown outcome leads to if it was applied, at a revision
// only known to be later.
func applyUnknown(s state, m *mop) []state {
	o := m.op
	rev := s.Rev + 1
	switch o.Kind {
	case "put":
		if m.leases && s.isRevoked(o.Lease) {
			return nil // its lease was gone: it failed
		}
		n := s
		n.K[m.slot[o.Key]] = put(s.K[m.slot[o.Key]], o.Value, o.Lease, rev, false)
		n.Rev = rev
		return []state{n}
	case "revoke":
		if !m.leases {
			n, hit := s.revoke(o.Lease, m.slot[o.Key])
			if !hit {
				return nil
			}
			n.Revoked, n.Rev = s.Revoked, rev
			return []state{n}
		}
		n, hit := s.revoke(o.Lease, m.slot[o.Key])
		if hit {
			n.Rev = rev
		}
		return []state{n}
	case "delete":
		i := m.slot[o.Key]
		if s.K[i].Present {
			n := s
			n.K[i] = kstate{}
			n.Rev = rev
			return []state{n}
		}
		return nil
	case "txn":
		var out []state
		for _, b := range txnBranches(s, m) {
			if b.then && m.noThen {
				continue
			}
			ops := o.Else
			if b.then {
				ops = o.Then
			}
			n, wrote, _ := applyBranch(b.s, ops, m, rev, false, false, nil, 0)
			if wrote {
				n.Rev = rev
				out = append(out, n)
			}
		}
		return out
	}
	return nil
}

// groupModel is the porcupine model of one group, starting from any of `init`.
func groupModel(init []state, keyName func(int) string) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []interface{} {
			out := make([]interface{}, len(init))
			for i, s := range init {
				out[i] = s
			}
			return out
		},
		Step: func(st, in, _ interface{}) []interface{} {
			var out []interface{}
			for _, n := range step(st.(state), in.(*mop)) {
				out = append(out, n)
			}
			return out
		},
		Equal: func(a, b interface{}) bool { return a.(state) == b.(state) },
		Hash:  func(s interface{}) uint64 { return hashState(s.(state)) },
		DescribeOperation: func(in, _ interface{}) string {
			return describeOp(in.(*mop).op)
		},
		DescribeState: func(s interface{}) string { return s.(state).describe(keyName) },
	}
	return nm.ToModel()
}

// describeOp says what an operation asked and what came back, in one line.
func describeOp(o *Op) string {
	var b strings.Builder
	fmt.Fprintf(&b, "stream %d (worker %d via %s) %s", o.Stream, o.Worker, o.Endpoint, o.Kind)
	switch o.Kind {
	case "range":
		fmt.Fprintf(&b, " [%s, %s)", o.Key, o.End)
	case "txn":
		fmt.Fprintf(&b, " if mod(%s)==%d then %s else %s", o.Compare, o.Expect, txnText(o.Then), txnText(o.Else))
	case "put":
		fmt.Fprintf(&b, " %s=%s", o.Key, o.Value)
		if o.Lease != 0 {
			fmt.Fprintf(&b, " lease %x", o.Lease)
		}
	case "revoke", "keepalive":
		fmt.Fprintf(&b, " lease %x (%s)", o.Lease, o.Key)
	default:
		fmt.Fprintf(&b, " %s", o.Key)
	}
	fmt.Fprintf(&b, " at %s-%s: ", secs(o.Call), secs(o.Return))
	if o.Status != "ok" {
		fmt.Fprintf(&b, "%s (%s)", o.Status, o.Error)
		return b.String()
	}
	if o.Kind == "txn" {
		fmt.Fprintf(&b, "succeeded=%t ", o.OK)
	}
	if o.Kind == "get" || o.Kind == "sget" || o.Kind == "range" || o.Kind == "txn" {
		var kv []string
		for _, x := range o.KVs {
			kv = append(kv, fmt.Sprintf("%s=%s (mod %d)", x.Key, x.Value, x.Mod))
		}
		if len(kv) == 0 {
			kv = append(kv, "nothing")
		}
		fmt.Fprintf(&b, "read %s ", strings.Join(kv, ", "))
	}
	if o.Kind == "delete" {
		fmt.Fprintf(&b, "deleted %d ", o.Deleted)
	}
	if o.Header != nil {
		fmt.Fprintf(&b, "at revision %d from member %x of cluster %x", o.Header.Revision, o.Header.Member, o.Header.Cluster)
	}
	return b.String()
}

func txnText(ops []TxnOp) string {
	var parts []string
	for _, t := range ops {
		if t.Kind == "put" {
			parts = append(parts, fmt.Sprintf("put %s=%s", t.Key, t.Value))
		} else {
			parts = append(parts, t.Kind+" "+t.Key)
		}
	}
	return "(" + strings.Join(parts, "; ") + ")"
}
