package validate

// A restore's cut (the states a group can start the next cluster in) and the witness of a
// history porcupine could not linearize.

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"etcd-asg-lifecycle/tests/history/internal/history"
	"etcd-asg-lifecycle/tests/history/internal/model"
)

// cutState: the states a group can start epoch n in, the restored backup's revision R of epoch
// n-1: each key as the answered writes at or before R left it, or as a write of unknown
// outcome made it.
func (c *checker) cutState(epochs []*epoch, n int, g int) []model.State {
	r := c.Restores[n-1].Revision
	prev := epochs[n-1]
	slots := c.slots(g)
	cands := make([][]model.KeyState, model.GroupSize)
	last := make([]*effect, model.GroupSize)
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
	for s := 0; s < model.GroupSize; s++ {
		switch {
		case last[s] == nil:
			cands[s] = []model.KeyState{{}}
		case last[s].del:
			cands[s] = []model.KeyState{{}}
		default:
			o := &c.h.Ops[last[s].op]
			lease := o.Lease
			if o.Kind == "txn" {
				lease = 0
			}
			cands[s] = []model.KeyState{{Present: true, Value: last[s].value, Mod: last[s].rev, Exact: true, Lease: lease}}
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
			cands[s] = append(cands[s], model.KeyState{})
			continue
		}
		o := &c.h.Ops[e.op]
		lease := o.Lease
		if o.Kind == "txn" {
			lease = 0
		}
		cands[s] = append(cands[s], model.KeyState{Present: true, Value: e.value, Mod: e.rev, Exact: true, Lease: lease})
	}
	c.unknownCandidates(cands, slots, prev.end+int64(5*time.Second))
	return product(cands)
}

// unknownCandidates adds to each key's candidates what the writes of unknown outcome (and
// revokes, whose effect is not in their answer) called before `until` can have left of it: any
// of them may be what the backup holds.
func (c *checker) unknownCandidates(cands [][]model.KeyState, slots map[string]int, until int64) {
	for i := range c.h.Ops {
		o := &c.h.Ops[i]
		if o.Call > until || !(o.Status == "fail" && o.IsWrite() || o.Kind == "revoke" && o.Status == "ok") {
			continue
		}
		if o.Kind == "txn" {
			for _, t := range o.Then {
				if s, ok := slots[t.Key]; ok && t.Kind == "put" {
					cands[s] = append(cands[s], model.KeyState{Present: true, Value: t.Value})
				}
			}
			for _, t := range append(append([]history.TxnOp{}, o.Then...), o.Else...) {
				if s, ok := slots[t.Key]; ok && t.Kind == "delete" {
					cands[s] = append(cands[s], model.KeyState{})
				}
			}
			continue
		}
		s, ok := slots[o.Key]
		if !ok {
			continue
		}
		if o.Kind == "put" {
			cands[s] = append(cands[s], model.KeyState{Present: true, Value: o.Value, Lease: o.Lease})
		} else {
			cands[s] = append(cands[s], model.KeyState{})
		}
	}
}

// product: every state whose keys are each one of their candidates.
func product(cands [][]model.KeyState) []model.State {
	out := []model.State{{Rev: 0}}
	for s := 0; s < model.GroupSize; s++ {
		var next []model.State
		seen := map[model.KeyState]bool{}
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
func (c *checker) witness(pm porcupine.Model, info porcupine.LinearizationInfo, ops []porcupine.Operation, init []model.State) string {
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
	placed := map[*model.Input]bool{}
	states := []model.State{}
	states = append(states, init...)
	for _, op := range longest {
		m := op.Input.(*model.Input)
		placed[m] = true
		var next []model.State
		for _, s := range states {
			next = append(next, model.Step(s, m)...)
		}
		states = next
	}
	var culprit *porcupine.Operation
	for k := range ops {
		m := ops[k].Input.(*model.Input)
		if placed[m] || m.Unknown && m.SeenRev == 0 { // one a watch showed applied must be placed too
			continue
		}
		if culprit == nil || ops[k].Return < culprit.Return {
			culprit = &ops[k]
		}
	}
	if culprit == nil {
		return "every answered operation placed, yet no order fits"
	}
	m := culprit.Input.(*model.Input)
	var could []string
	for k, s := range states {
		if k == 3 {
			could = append(could, "…")
			break
		}
		could = append(could, s.Describe(func(i int) string {
			if i+m.Group*model.GroupSize < c.h.Meta.Keys {
				return c.keyName(m.Group*model.GroupSize + i)
			}
			return ""
		}))
	}
	return fmt.Sprintf("%s; the store before it could only be: %s", history.Describe(m.Op), strings.Join(could, " | "))
}
