package validate

// Hand-made histories in the recorder's own format, small enough to read: a builder, and the
// valid history most fixtures start from.

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"etcd-asg-lifecycle/tests/history/internal/history"
)

const (
	cl = 0xc1 // the cluster every fixture's operations are answered by
	k0 = "/h/k00"
	k1 = "/h/k01"
	k2 = "/h/k02"
	k3 = "/h/k03"
)

// fx builds a history: operations one after another (each takes 5 ms, 10 ms apart), watch
// responses at the time they are added.
type fx struct {
	h     history.History
	clock int64
}

func newFx() *fx {
	return &fx{h: history.History{Meta: history.Meta{Prefix: "/h/", Keys: 4, Clients: 2}}}
}

func (f *fx) tick(ns int64) int64 {
	f.clock += ns
	return f.clock
}

// op adds an operation; answered (status ok) at revision rev of cluster cl unless it says
// otherwise. Its index.
func (f *fx) op(o history.Op, rev int64) int {
	o.Call = f.tick(10e6)
	o.Return = o.Call + 5e6
	if o.Status == "" {
		o.Status = "ok"
	}
	if o.Status == "ok" && o.Header == nil {
		o.Header = &history.Header{Cluster: cl, Member: 1, Revision: rev}
	}
	o.Stream = len(f.h.Ops) + 1
	f.h.Ops = append(f.h.Ops, o)
	return len(f.h.Ops) - 1
}

func (f *fx) put(key, value string, rev int64) int {
	return f.op(history.Op{Kind: "put", Key: key, Value: value}, rev)
}

func (f *fx) get(key string, rev int64, kvs ...history.KV) int {
	return f.op(history.Op{Kind: "get", Key: key, KVs: kvs}, rev)
}

func (f *fx) sget(key string, rev int64, kvs ...history.KV) int {
	return f.op(history.Op{Kind: "sget", Key: key, KVs: kvs}, rev)
}

func (f *fx) del(key string, rev, deleted int64) int {
	return f.op(history.Op{Kind: "delete", Key: key, Deleted: deleted}, rev)
}

// failed adds an operation whose answer was lost (a write of unknown outcome).
func (f *fx) failed(o history.Op) int {
	o.Status, o.Error = "fail", "context deadline exceeded"
	return f.op(o, 0)
}

// session starts watch w's session s from revision from.
func (f *fx) session(w, s int, from int64) {
	why := "start"
	if s > 1 {
		why = "compacted"
	}
	f.h.Sessions = append(f.h.Sessions, history.Session{Watcher: w, Session: s, Time: f.tick(1e6), From: from, Why: why})
}

// events: a response of watch w's session s with these events, from cluster.
func (f *fx) events(w, s int, cluster uint64, evs ...history.Event) {
	rev := int64(0)
	if len(evs) > 0 {
		rev = evs[len(evs)-1].KV.Mod
	}
	f.h.Watches = append(f.h.Watches, history.WatchResp{Watcher: w, Session: s, Time: f.tick(1e6),
		Header: history.Header{Cluster: cluster, Member: 1, Revision: rev}, Events: evs})
}

// progress: a progress notification at rev, after `after` (it says everything up to rev was
// delivered).
func (f *fx) progress(w, s int, cluster uint64, rev int64, after time.Duration) {
	f.h.Watches = append(f.h.Watches, history.WatchResp{Watcher: w, Session: s, Time: f.tick(int64(after)),
		Header: history.Header{Cluster: cluster, Member: 1, Revision: rev}, Progress: true})
}

// kv: a key as read, put at mod, created at create, at version.
func kv(key, value string, mod, create, version int64) history.KV {
	return history.KV{Key: key, Value: value, Mod: mod, Create: create, Version: version}
}

func putEv(k history.KV) history.Event { return history.Event{Type: "PUT", KV: k} }

func delEv(key string, rev int64) history.Event {
	return history.Event{Type: "DELETE", KV: history.KV{Key: key, Mod: rev}}
}

// base is a valid history: k0 put twice, k1 put and deleted, read every way; two watches from
// the start that deliver it all, and say so. Revision 1 is the empty store's.
func base() *fx {
	f := newFx()
	f.put(k0, "a", 2)
	f.put(k1, "b", 3)
	f.put(k0, "c", 4)
	f.get(k0, 4, kv(k0, "c", 4, 2, 2))
	f.del(k1, 5, 1)
	f.op(history.Op{Kind: "range", Key: k0, End: "/h/k99", KVs: []history.KV{kv(k0, "c", 4, 2, 2)}}, 5)
	f.sget(k0, 5, kv(k0, "c", 4, 2, 2))
	f.sget(k1, 5)
	for w := 0; w < 2; w++ {
		f.session(w, 1, 2)
	}
	for w := 0; w < 2; w++ {
		f.events(w, 1, cl, putEv(kv(k0, "a", 2, 2, 1)))
		f.events(w, 1, cl, putEv(kv(k1, "b", 3, 3, 1)))
		f.events(w, 1, cl, putEv(kv(k0, "c", 4, 2, 2)))
		f.events(w, 1, cl, delEv(k1, 5))
		f.progress(w, 1, cl, 5, time.Millisecond)
	}
	return f
}

// run checks a history with some rules off: the summary.
func run(t *testing.T, h *history.History, off ...string) Summary {
	t.Helper()
	opts := Options{Timeout: 5 * time.Second, HTML: filepath.Join(t.TempDir(), "h.html"), Off: map[string]bool{}}
	for _, r := range off {
		opts.Off[r] = true
	}
	c := &checker{h: h, Options: opts}
	c.run()
	return c.sum
}

func accepted(t *testing.T, h *history.History, off ...string) {
	t.Helper()
	if s := run(t, h, off...); s.Result != "ok" {
		t.Fatalf("rejected (rules off: %v): %s %v", off, s.Result, s.Violations)
	}
}

func rejected(t *testing.T, h *history.History, want string) {
	t.Helper()
	s := run(t, h)
	if s.Result != "violation" {
		t.Fatalf("accepted: %s %v", s.Result, s.Violations)
	}
	if text := strings.Join(s.Violations, " | "); !strings.Contains(text, want) {
		t.Fatalf("rejected, but not for %q: %s", want, text)
	}
}
