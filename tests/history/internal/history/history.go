// Package history holds what the recorder wrote: the operations, watch responses and sessions of a
// history file, and reading and writing that file.
package history

// The recorded history: one JSON object a line, each an operation (`op`), a watch response
// (`watch`) or the start of a watch session (`session`). Times are nanoseconds since the
// recorder started, on one monotonic clock, as etcd's robustness tests record them
// (https://github.com/etcd-io/etcd/blob/main/tests/robustness/model/history.go).

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// Header is etcd's response header: which cluster and member answered, at which revision.
type Header struct {
	Cluster  uint64 `json:"cluster,string"`
	Member   uint64 `json:"member,string"`
	Revision int64  `json:"rev"`
}

// KV is a key as etcd returned it.
type KV struct {
	Key     string `json:"key"`
	Value   string `json:"value,omitempty"`
	Mod     int64  `json:"mod,omitempty"`
	Create  int64  `json:"create,omitempty"`
	Version int64  `json:"version,omitempty"`
	Lease   int64  `json:"lease,omitempty"`
}

// TxnOp is one operation inside a transaction's branch: put, delete or get of one key.
type TxnOp struct {
	Kind  string `json:"kind"`
	Key   string `json:"key"`
	Value string `json:"value,omitempty"`
	Lease int64  `json:"lease,omitempty"`
}

// Op is one client operation, with its call and return times and what came back.
//
// Kinds: get (linearizable), sget (serializable), range (a key range, linearizable), put,
// delete, txn (If mod_revision(Compare) == Expect Then... Else...), grant, revoke, keepalive.
type Op struct {
	Stream   int     `json:"stream"` // a new stream after each failed write, as etcd's robustness tests
	Worker   int     `json:"worker"`
	Endpoint string  `json:"endpoint"` // "lb" or the member's URL it is pinned to
	Kind     string  `json:"kind"`
	Key      string  `json:"key,omitempty"`
	End      string  `json:"end,omitempty"` // range end (exclusive)
	Value    string  `json:"value,omitempty"`
	Lease    int64   `json:"lease,omitempty"`
	Compare  string  `json:"compare,omitempty"`
	Expect   int64   `json:"expect,omitempty"`
	Then     []TxnOp `json:"then,omitempty"`
	Else     []TxnOp `json:"else,omitempty"`
	Call     int64   `json:"call"`
	Return   int64   `json:"return"`
	Status   string  `json:"status"` // ok, fail (a write that failed may have been applied), gone (lease not found)
	Error    string  `json:"error,omitempty"`
	Header   *Header `json:"header,omitempty"`
	KVs      []KV    `json:"kvs,omitempty"`
	Deleted  int64   `json:"deleted,omitempty"`
	OK       bool    `json:"succeeded,omitempty"` // a transaction's branch: true = Then
	TTL      int64   `json:"ttl,omitempty"`
	Final    bool    `json:"final,omitempty"` // the recorder's last write and read
}

// Event is one watch event.
type Event struct {
	Type string `json:"type"` // PUT or DELETE
	KV   KV     `json:"kv"`
}

// WatchResp is one response on a watch session.
type WatchResp struct {
	Watcher  int     `json:"watcher"`
	Session  int     `json:"session"`
	Time     int64   `json:"time"`
	Header   Header  `json:"header"`
	Events   []Event `json:"events,omitempty"`
	Progress bool    `json:"progress,omitempty"`
	Canceled bool    `json:"canceled,omitempty"`
	Compact  int64   `json:"compact,omitempty"`
	Error    string  `json:"error,omitempty"`
}

// Session is a watch started from a revision: the first, or one after a cancellation.
type Session struct {
	Watcher int    `json:"watcher"`
	Session int    `json:"session"`
	Time    int64  `json:"time"`
	From    int64  `json:"from"` // first revision the watch asked for
	Why     string `json:"why"`
}

// Line is one line of a history file.
type Line struct {
	Op      *Op        `json:"op,omitempty"`
	Watch   *WatchResp `json:"watch,omitempty"`
	Session *Session   `json:"session,omitempty"`
	Meta    *Meta      `json:"meta,omitempty"`
}

// Meta describes the recording.
type Meta struct {
	Prefix  string `json:"prefix"`
	Keys    int    `json:"keys"`
	Clients int    `json:"clients"`
	Started string `json:"started"` // wall clock at time 0 (RFC 3339)
}

// History is a whole recording.
type History struct {
	Meta     Meta
	Ops      []Op
	Watches  []WatchResp
	Sessions []Session
}

func Read(path string) (*History, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(f)
}

func Parse(r io.Reader) (*History, error) {
	h := &History{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	n := 0
	for sc.Scan() {
		n++
		if len(sc.Bytes()) == 0 {
			continue
		}
		var l Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if err := l.validate(); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		switch {
		case l.Op != nil:
			h.Ops = append(h.Ops, *l.Op)
		case l.Watch != nil:
			h.Watches = append(h.Watches, *l.Watch)
		case l.Session != nil:
			h.Sessions = append(h.Sessions, *l.Session)
		case l.Meta != nil:
			h.Meta = *l.Meta
		default:
			return nil, fmt.Errorf("line %d: neither op, watch, session nor meta", n)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if h.Meta.Keys == 0 {
		return nil, fmt.Errorf("no meta line: not a history this recorder wrote")
	}
	return h, nil
}

func Write(w io.Writer, h *History) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	if err := enc.Encode(Line{Meta: &h.Meta}); err != nil {
		return err
	}
	for i := range h.Sessions {
		if err := enc.Encode(Line{Session: &h.Sessions[i]}); err != nil {
			return err
		}
	}
	for i := range h.Ops {
		if err := enc.Encode(Line{Op: &h.Ops[i]}); err != nil {
			return err
		}
	}
	for i := range h.Watches {
		if err := enc.Encode(Line{Watch: &h.Watches[i]}); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// IsWrite says whether an operation can change the store.
func (o *Op) IsWrite() bool {
	switch o.Kind {
	case "put", "delete", "revoke":
		return true
	case "txn":
		for _, t := range append(append([]TxnOp{}, o.Then...), o.Else...) {
			if t.Kind != "get" {
				return true
			}
		}
	}
	return false
}

// Keys is every key an operation touches.
func (o *Op) Keys() []string {
	switch o.Kind {
	case "txn":
		seen := map[string]bool{}
		var out []string
		for _, k := range append([]string{o.Compare}, txnKeys(o)...) {
			if k != "" && !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
		return out
	case "grant":
		return nil
	default:
		return []string{o.Key}
	}
}

// KeysWritten: the keys an operation puts.
func (o *Op) KeysWritten() []string {
	if o.Kind == "put" {
		return []string{o.Key}
	}
	var out []string
	for _, t := range append(append([]TxnOp{}, o.Then...), o.Else...) {
		if t.Kind == "put" {
			out = append(out, t.Key)
		}
	}
	return out
}

// Values: every value an operation tries to write.
func (o *Op) Values() []string {
	if o.Kind == "put" {
		return []string{o.Value}
	}
	var out []string
	for _, t := range append(append([]TxnOp{}, o.Then...), o.Else...) {
		if t.Kind == "put" {
			out = append(out, t.Value)
		}
	}
	return out
}

// Deletes says whether an operation can delete key: a delete of it, a revoke of the lease it
// was put with, a transaction with a delete of it in either branch.
func (o *Op) Deletes(key string) bool {
	switch o.Kind {
	case "delete", "revoke":
		return o.Key == key
	case "txn":
		for _, t := range append(append([]TxnOp{}, o.Then...), o.Else...) {
			if t.Kind == "delete" && t.Key == key {
				return true
			}
		}
	}
	return false
}

// BranchWrites says whether a transaction's branch can change the store.
func BranchWrites(ops []TxnOp) bool {
	for _, t := range ops {
		if t.Kind != "get" {
			return true
		}
	}
	return false
}

func txnKeys(o *Op) []string {
	var out []string
	for _, t := range o.Then {
		out = append(out, t.Key)
	}
	for _, t := range o.Else {
		out = append(out, t.Key)
	}
	return out
}

func Secs(ns int64) string { return fmt.Sprintf("%.3fs", float64(ns)/1e9) }

// The kinds the recorder writes: anything else is not a history it wrote.
var (
	opKinds    = map[string]bool{"get": true, "sget": true, "range": true, "put": true, "delete": true, "txn": true, "grant": true, "revoke": true, "keepalive": true}
	txnKinds   = map[string]bool{"get": true, "put": true, "delete": true}
	statuses   = map[string]bool{"ok": true, "fail": true, "gone": true}
	eventTypes = map[string]bool{"PUT": true, "DELETE": true}
)

// validate refuses a line the recorder cannot have written: the checker would otherwise judge
// nonsense (or fail on it) instead of saying the input is wrong.
func (l *Line) validate() error {
	switch {
	case l.Op != nil:
		return l.Op.validate()
	case l.Watch != nil:
		for _, e := range l.Watch.Events {
			if !eventTypes[e.Type] {
				return fmt.Errorf("watch %d session %d: event type %q (PUT or DELETE)", l.Watch.Watcher, l.Watch.Session, e.Type)
			}
		}
		if l.Watch.Time < 0 {
			return fmt.Errorf("watch %d session %d: a response at a negative time", l.Watch.Watcher, l.Watch.Session)
		}
	}
	return nil
}

func (o *Op) validate() error {
	switch {
	case !opKinds[o.Kind]:
		return fmt.Errorf("operation of unknown kind %q (stream %d, worker %d)", o.Kind, o.Stream, o.Worker)
	case !statuses[o.Status]:
		return fmt.Errorf("%s: unknown status %q (ok, fail or gone)", Describe(o), o.Status)
	case o.Call < 0 || o.Return < o.Call:
		return fmt.Errorf("%s: returns before its call (call %d, return %d)", Describe(o), o.Call, o.Return)
	case o.Status == "ok" && o.Header == nil:
		return fmt.Errorf("%s: answered with no response header", Describe(o))
	case o.Kind == "txn" && o.Compare == "":
		return fmt.Errorf("%s: a transaction with no compare", Describe(o))
	}
	for _, t := range append(append([]TxnOp{}, o.Then...), o.Else...) {
		if !txnKinds[t.Kind] {
			return fmt.Errorf("%s: transaction operation of unknown kind %q", Describe(o), t.Kind)
		}
	}
	return nil
}
