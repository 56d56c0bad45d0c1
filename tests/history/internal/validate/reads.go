package validate

// What reads returned, beyond porcupine's model: only the keys they asked for, and serializable
// reads checked against the store at their own revision (etcd's robustness tests check them
// against the replayed state at their revision; here the replay is what the acknowledged writes
// and the watches say, which other writers' revisions and writes of unknown outcome leave
// incomplete, so only what it shows for certain is held against them).

import (
	"fmt"
	"sort"

	"etcd-asg-lifecycle/tests/history/internal/history"
	"etcd-asg-lifecycle/tests/history/internal/model"
)

// readBounds: a get returns its key or nothing; a range only keys within [Key, End), each once,
// in order; a transaction only the keys its branch got.
func (c *checker) readBounds() {
	if !c.on(ruleReadBounds) {
		return
	}
	for i := range c.h.Ops {
		o := &c.h.Ops[i]
		if o.Status != "ok" {
			continue
		}
		if why := readOutOfBounds(o); why != "" {
			c.violation("%s: %s", history.Describe(o), why)
			return
		}
	}
}

func readOutOfBounds(o *history.Op) string {
	var asked []string // the keys asked for, in order (nil: a range)
	switch o.Kind {
	case "get", "sget":
		asked = []string{o.Key}
	case "txn":
		branch := o.Else
		if o.OK {
			branch = o.Then
		}
		asked = []string{}
		for _, t := range branch {
			if t.Kind == "get" {
				asked = append(asked, t.Key)
			}
		}
	case "range":
	default:
		if len(o.KVs) > 0 {
			return "a write that returned keys"
		}
		return ""
	}
	for n, kv := range o.KVs {
		switch {
		case asked == nil && (kv.Key < o.Key || kv.Key >= o.End):
			return fmt.Sprintf("returned %s, outside [%s, %s)", kv.Key, o.Key, o.End)
		case asked == nil && n > 0 && kv.Key <= o.KVs[n-1].Key:
			return fmt.Sprintf("returned %s after %s: not in order, or twice", kv.Key, o.KVs[n-1].Key)
		case asked != nil && (len(asked) == 0 || asked[0] != kv.Key):
			return fmt.Sprintf("returned %s, which it did not ask for (or not there)", kv.Key)
		case asked != nil:
			asked = asked[1:]
		}
	}
	return ""
}

// change is one write to a key as the replay knows it.
type change struct {
	rev   int64
	del   bool
	value string
}

// replay: per cluster and key, the writes the acknowledged answers and the watches show, by
// revision.
func (c *checker) replay() map[uint64]map[string][]change {
	out := map[uint64]map[string][]change{}
	add := func(cluster uint64, key string, ch change) {
		if out[cluster] == nil {
			out[cluster] = map[string][]change{}
		}
		out[cluster][key] = append(out[cluster][key], ch)
	}
	for i := range c.h.Ops {
		o := &c.h.Ops[i]
		for _, x := range effects(o, i) {
			add(o.Header.Cluster, x.key, change{rev: x.rev, del: x.del, value: x.value})
		}
	}
	for _, w := range c.h.Watches {
		for _, e := range w.Events {
			add(w.Header.Cluster, e.KV.Key, change{rev: e.KV.Mod, del: e.Type == "DELETE", value: e.KV.Value})
		}
	}
	for _, keys := range out {
		for k, chs := range keys {
			sort.Slice(chs, func(a, b int) bool { return chs[a].rev < chs[b].rev })
			keys[k] = chs
		}
	}
	return out
}

// serializableReads: what a serializable read returned is a state its own revision had: a
// value written to that key, at a mod revision no later than the read's, the same one (and the
// same version) the write was acknowledged at or a watch delivered it at, with no write the
// replay knows of between it and the read's revision; nothing, only if the key can have been
// deleted since its last known put. Stale revisions are allowed (counted in staleReads).
func (c *checker) serializableReads() {
	if !c.on(ruleSerializable) {
		return
	}
	replay := c.replay()
	delivered := map[string]history.KV{}
	for _, w := range c.h.Watches {
		for _, e := range w.Events {
			if e.Type == "PUT" {
				delivered[e.KV.Value] = e.KV
			}
		}
	}
	for i := range c.h.Ops {
		o := &c.h.Ops[i]
		if o.Kind != "sget" || o.Status != "ok" {
			continue
		}
		if why := c.serializableRead(o, replay[o.Header.Cluster][o.Key], delivered); why != "" {
			c.violation("serializable read %s: %s", history.Describe(o), why)
			return
		}
	}
}

func (c *checker) serializableRead(o *history.Op, chs []change, delivered map[string]history.KV) string {
	rev := o.Header.Revision
	kv := model.FindKV(o.KVs, o.Key)
	if kv == nil {
		return c.absentRead(o, chs)
	}
	i, ok := c.writer[kv.Value]
	switch {
	case !ok || !contains(c.h.Ops[i].KeysWritten(), kv.Key):
		return fmt.Sprintf("%s=%s, a value no client wrote there", kv.Key, kv.Value)
	case kv.Mod > rev:
		return fmt.Sprintf("mod revision %d, above the read's own revision %d", kv.Mod, rev)
	case c.h.Ops[i].Status == "ok" && c.h.Ops[i].Header.Cluster == o.Header.Cluster && c.h.Ops[i].Header.Revision != kv.Mod:
		return fmt.Sprintf("mod revision %d, but its write was acknowledged at revision %d", kv.Mod, c.h.Ops[i].Header.Revision)
	}
	if d, ok := delivered[kv.Value]; ok && (d.Mod != kv.Mod || c.on(ruleVersions) && (d.Version != kv.Version || d.Create != kv.Create)) {
		return fmt.Sprintf("mod revision %d, version %d, created %d; a watch delivered it with mod revision %d, version %d, created %d",
			kv.Mod, kv.Version, kv.Create, d.Mod, d.Version, d.Create)
	}
	for _, ch := range chs {
		if ch.rev > kv.Mod && ch.rev <= rev {
			return fmt.Sprintf("%s as of revision %d, but it changed at revision %d (%s), before the read's own revision %d",
				kv.Key, kv.Mod, ch.rev, changeText(ch), rev)
		}
	}
	return ""
}

// absentRead: a serializable read found nothing; the key's last known write at or before the
// read's revision must be a delete, or a put that a delete of unknown outcome (or a revoke)
// called before the read returned can have undone.
func (c *checker) absentRead(o *history.Op, chs []change) string {
	rev := o.Header.Revision
	var last *change
	for k := range chs {
		if chs[k].rev <= rev {
			last = &chs[k]
		}
	}
	if last == nil || last.del {
		return ""
	}
	for i := range c.h.Ops {
		d := &c.h.Ops[i]
		if d.Deletes(o.Key) && d.Call < o.Return && (d.Status == "fail" || d.Kind == "revoke" && d.Status == "ok") {
			return ""
		}
	}
	return fmt.Sprintf("nothing, but %s was put at revision %d (%s) and nothing can have deleted it by the read's revision %d",
		o.Key, last.rev, changeText(*last), rev)
}

func changeText(ch change) string {
	if ch.del {
		return "deleted"
	}
	return "value " + ch.value
}
