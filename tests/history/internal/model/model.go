// Package model is etcd's key-value store as porcupine steps it, one group of keys at a time.
package model

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

	"etcd-asg-lifecycle/tests/history/internal/history"
)

const GroupSize = 2

type KeyState struct {
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
func put(k KeyState, value string, lease, rev int64, exact bool) KeyState {
	n := KeyState{Present: true, Value: value, Mod: rev, Exact: exact, Lease: lease}
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

type State struct {
	Rev int64 // the store's revision is at least this
	K   [GroupSize]KeyState
	// Revoked: the leases of this group's keys known revoked (sorted, comma-separated, hex), as
	// etcd's model removes a revoked lease from its state: a put with one of them fails ("requested
	// lease not found"). Each of the recorder's leases holds one key, so its puts and its revoke
	// are all in that key's group. A lease not revoked is taken to exist (its grant returned
	// before the client used it; a restore may bring back one revoked after its backup).
	Revoked string
}

// isRevoked says whether lease is known revoked in s.
func (s State) isRevoked(lease int64) bool {
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
func (s State) revoke(lease int64, i int) (State, bool) {
	if !s.isRevoked(lease) {
		ids := []string{strconv.FormatInt(lease, 16)}
		if s.Revoked != "" {
			ids = append(ids, strings.Split(s.Revoked, ",")...)
		}
		sort.Strings(ids)
		s.Revoked = strings.Join(ids, ",")
	}
	if s.K[i].Present && s.K[i].Lease == lease {
		s.K[i] = KeyState{}
		return s, true
	}
	return s, false
}

// Input is one operation as the model sees it: the recorded operation, its group, the keys of
// that group it covers (a range), and whether its outcome is unknown.
type Input struct {
	Op      *history.Op
	ID      int // index in the history's operations
	Group   int
	Slot    map[string]int
	Unknown bool
	// A failed write seen applied (its value in a watch event): its revision.
	SeenRev int64
	// For reads split by group: the keys of this group the read covered, and what it returned.
	Cover [GroupSize]bool
	KVs   []history.KV
	// NoThen: a transaction of unknown outcome whose Then branch is known not applied (its
	// values never seen where a watch would have shown them); its Else branch may have been.
	NoThen bool
	// Versions: reads are checked for each key's version and create revision too.
	Versions bool
	// Leases: revoked Leases are kept, and a put on one rejected (the rule "Leases").
	Leases bool
	// Applied: a write of unknown outcome a member's log shows was Applied (at a revision not
	// known).
	Applied bool
}

func (s State) Describe(keyName func(int) string) string {
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

func hashState(s State) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d|%s", s.Rev, s.Revoked)
	for _, k := range s.K {
		fmt.Fprintf(h, "|%t|%s|%d|%t|%d|%d|%d|%t", k.Present, k.Value, k.Mod, k.Exact, k.Lease, k.Version, k.Create, k.CreateExact)
	}
	return h.Sum64()
}

// observe checks what a read returned of one key against the state: the new state and whether
// it could be.
func observe(k KeyState, got *history.KV, rev int64, versions bool) (KeyState, bool) {
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
func observeVersion(k KeyState, got *history.KV) (KeyState, bool) {
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

func FindKV(kvs []history.KV, key string) *history.KV {
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
func applyBranch(s State, ops []history.TxnOp, m *Input, rev int64, exact bool, check bool, kvs []history.KV, deleted int64) (State, bool, bool) {
	wrote := false
	var dels int64
	for _, t := range ops {
		i := m.Slot[t.Key]
		switch t.Kind {
		case "get":
			if check {
				var ok bool
				if s.K[i], ok = observe(s.K[i], FindKV(kvs, t.Key), rev, m.Versions); !ok {
					return s, wrote, false
				}
			}
		case "put":
			s.K[i] = put(s.K[i], t.Value, t.Lease, rev, exact)
			wrote = true
		case "delete":
			if s.K[i].Present {
				s.K[i] = KeyState{}
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

// Step is the model's transition: every state the operation can lead to (none: it cannot).
func Step(s State, m *Input) []State {
	o := m.Op
	if m.Unknown && m.SeenRev == 0 && m.Applied {
		return stepApplied(s, m)
	}
	if m.Unknown && m.SeenRev == 0 {
		return append([]State{s}, applyUnknown(s, m)...)
	}
	rev := m.SeenRev
	if o.Header != nil {
		rev = o.Header.Revision
	}
	if rev < s.Rev {
		return nil // a revision that went back
	}
	switch o.Kind {
	case "get", "range":
		n := s
		for key, i := range m.Slot {
			if !m.Cover[i] {
				continue
			}
			var ok bool
			if n.K[i], ok = observe(n.K[i], FindKV(m.KVs, key), rev, m.Versions); !ok {
				return nil
			}
		}
		n.Rev = rev
		return []State{n}
	case "put":
		if rev <= s.Rev || m.Leases && s.isRevoked(o.Lease) {
			return nil // a put on a revoked lease fails: "requested lease not found"
		}
		n := s
		n.K[m.Slot[o.Key]] = put(s.K[m.Slot[o.Key]], o.Value, o.Lease, rev, true)
		n.Rev = rev
		return []State{n}
	case "revoke":
		return stepRevoke(s, m, rev)
	case "delete":
		i := m.Slot[o.Key]
		n := s
		hit := s.K[i].Present
		if m.SeenRev == 0 && (o.Deleted == 1) != hit {
			return nil
		}
		if hit {
			if rev <= s.Rev {
				return nil
			}
			n.K[i] = KeyState{}
		}
		n.Rev = rev
		return []State{n}
	case "txn":
		var out []State
		for _, branch := range txnBranches(s, m) {
			// A transaction seen applied through a watch (its outcome was unknown) took Then.
			if (m.SeenRev == 0 && branch.then != o.OK) || (m.SeenRev != 0 && !branch.then) {
				continue
			}
			ops := o.Else
			if branch.then {
				ops = o.Then
			}
			n, wrote, ok := applyBranch(branch.s, ops, m, rev, true, m.SeenRev == 0, o.KVs, o.Deleted)
			if !ok || (wrote && rev <= s.Rev) {
				continue
			}
			n.Rev = rev
			out = append(out, n)
		}
		return out
	}
	return []State{s}
}

// stepRevoke: an acknowledged revoke at revision rev deletes the key attached to its lease (a
// revision of its own: rev must be past the store's), else leaves the revision where it was; the
// lease is gone either way.
func stepRevoke(s State, m *Input, rev int64) []State {
	n, hit := s.revoke(m.Op.Lease, m.Slot[m.Op.Key])
	if !m.Leases {
		n.Revoked = s.Revoked
	}
	if hit && rev <= s.Rev {
		return nil
	}
	n.Rev = rev
	return []State{n}
}

// stepApplied: a write known applied, at a revision not known: what it did (a put on a revoked
// lease, a delete of a key not there: nothing; a transaction may have taken a branch that wrote
// nothing).
func stepApplied(s State, m *Input) []State {
	out := applyUnknown(s, m)
	if len(out) == 0 || m.Op.Kind == "txn" {
		out = append(out, s)
	}
	return out
}

type branch struct {
	s    State
	then bool
}

// txnBranches: which branches the compare can take in state s (both, when the key's mod
// revision is only bounded), with the state refined by the compare's answer.
func txnBranches(s State, m *Input) []branch {
	k := s.K[m.Slot[m.Op.Compare]]
	mod := int64(0)
	if k.Present {
		mod = k.Mod
	}
	if !k.Present || k.Exact {
		return []branch{{s, mod == m.Op.Expect}}
	}
	out := []branch{{s, false}}
	if m.Op.Expect >= k.Mod {
		t := s
		t.K[m.Slot[m.Op.Compare]].Mod, t.K[m.Slot[m.Op.Compare]].Exact = m.Op.Expect, true
		out = append(out, branch{t, true})
	}
	return out
}

// applyUnknown: the states a write of unknown outcome leads to if it was applied, at a revision
// only known to be later.
func applyUnknown(s State, m *Input) []State {
	o := m.Op
	rev := s.Rev + 1
	switch o.Kind {
	case "put":
		if m.Leases && s.isRevoked(o.Lease) {
			return nil // its lease was gone: it failed
		}
		n := s
		n.K[m.Slot[o.Key]] = put(s.K[m.Slot[o.Key]], o.Value, o.Lease, rev, false)
		n.Rev = rev
		return []State{n}
	case "revoke":
		if !m.Leases {
			n, hit := s.revoke(o.Lease, m.Slot[o.Key])
			if !hit {
				return nil
			}
			n.Revoked, n.Rev = s.Revoked, rev
			return []State{n}
		}
		n, hit := s.revoke(o.Lease, m.Slot[o.Key])
		if hit {
			n.Rev = rev
		}
		return []State{n}
	case "delete":
		i := m.Slot[o.Key]
		if s.K[i].Present {
			n := s
			n.K[i] = KeyState{}
			n.Rev = rev
			return []State{n}
		}
		return nil
	case "txn":
		var out []State
		for _, b := range txnBranches(s, m) {
			if b.then && m.NoThen {
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

// GroupModel is the porcupine model of one group, starting from any of `init`.
func GroupModel(init []State, keyName func(int) string) porcupine.Model {
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
			for _, n := range Step(st.(State), in.(*Input)) {
				out = append(out, n)
			}
			return out
		},
		Equal: func(a, b interface{}) bool { return a.(State) == b.(State) },
		Hash:  func(s interface{}) uint64 { return hashState(s.(State)) },
		DescribeOperation: func(in, _ interface{}) string {
			return history.Describe(in.(*Input).Op)
		},
		DescribeState: func(s interface{}) string { return s.(State).Describe(keyName) },
	}
	return nm.ToModel()
}
