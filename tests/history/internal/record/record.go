// Package record is the recorder: clientv3 clients and watches on a live cluster, every operation
// written to a history file.
package record

// The recorder: concurrent clientv3 clients doing etcd's operations on a few keys under one
// prefix, with unique values, and watches from a known revision with progress requests; every
// operation with its call and return times, outcome, header and result. Traffic as etcd's
// robustness tests make it (tests/robustness/traffic/etcd.go): gets, stale (serializable) gets,
// ranges, puts, deletes, compare-and-swap and multi-op transactions, puts with a lease, lease
// revokes and keepalives; some clients pinned to one member.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"etcd-asg-lifecycle/tests/history/internal/history"
)

type recorder struct {
	start   time.Time
	prefix  string
	keys    int
	mu      sync.Mutex
	hist    history.History
	stopped chan struct{}
}

func (r *recorder) now() int64 { return time.Since(r.start).Nanoseconds() }

func (r *recorder) key(i int) string { return fmt.Sprintf("%sk%02d", r.prefix, i) }

func (r *recorder) addOp(o history.Op) {
	r.mu.Lock()
	r.hist.Ops = append(r.hist.Ops, o)
	r.mu.Unlock()
}

func header(h interface {
	GetClusterId() uint64
	GetMemberId() uint64
	GetRevision() int64
}) *history.Header {
	return &history.Header{Cluster: h.GetClusterId(), Member: h.GetMemberId(), Revision: h.GetRevision()}
}

func kvs(in []*mvccpb.KeyValue) []history.KV {
	out := make([]history.KV, 0, len(in))
	for _, kv := range in {
		out = append(out, history.KV{Key: string(kv.Key), Value: string(kv.Value), Mod: kv.ModRevision,
			Create: kv.CreateRevision, Version: kv.Version, Lease: kv.Lease})
	}
	return out
}

// client is one sequential stream of operations on one connection.
type client struct {
	r        *recorder
	id       int
	stream   *int
	streamMu *sync.Mutex
	cli      *clientv3.Client
	endpoint string
	rng      *rand.Rand
	seq      int
	mods     map[string]int64 // the mod revision this client last saw of each key
	lease    clientv3.LeaseID
	leaseKey string
	timeout  time.Duration
	curr     int
	failed   bool // the last operation failed
	onlySget bool // reads serializably and does nothing else
}

func (c *client) value() string {
	c.seq++
	return fmt.Sprintf("%d-%d", c.id, c.seq)
}

func (c *client) newStream() {
	c.streamMu.Lock()
	*c.stream++
	c.curr = *c.stream
	c.streamMu.Unlock()
}

// do runs one operation and records it.
func (c *client) do(ctx context.Context, o history.Op, run func(ctx context.Context, o *history.Op) error) history.Op {
	o.Worker, o.Endpoint, o.Stream = c.id, c.endpoint, c.curr
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	o.Call = c.r.now()
	err := run(ctx, &o)
	o.Return = c.r.now()
	cancel()
	switch {
	case err == nil:
		o.Status = "ok"
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		o.Status, o.Error = "gone", err.Error()
	default:
		o.Status, o.Error = "fail", err.Error()
	}
	c.r.addOp(o)
	c.failed = o.Status == "fail"
	if o.Status == "fail" && o.IsWrite() {
		c.newStream()
	}
	return o
}

func (c *client) step(ctx context.Context) {
	k := c.r.key(c.rng.Intn(c.r.keys))
	if c.onlySget {
		c.get(ctx, k, true)
		return
	}
	group := c.rng.Intn((c.r.keys + 1) / 2)
	pick := c.rng.Intn(100)
	switch {
	case pick < 22:
		c.get(ctx, k, false)
	case pick < 27:
		c.get(ctx, k, true)
	case pick < 37:
		c.rangeGroup(ctx, group)
	case pick < 60:
		v := c.value()
		c.do(ctx, history.Op{Kind: "put", Key: k, Value: v}, func(ctx context.Context, o *history.Op) error {
			resp, err := c.cli.Put(ctx, k, v)
			if err == nil {
				o.Header = header(resp.Header)
				c.mods[k] = resp.Header.Revision
			}
			return err
		})
	case pick < 65:
		c.do(ctx, history.Op{Kind: "delete", Key: k}, func(ctx context.Context, o *history.Op) error {
			resp, err := c.cli.Delete(ctx, k)
			if err == nil {
				o.Header, o.Deleted = header(resp.Header), resp.Deleted
				c.mods[k] = 0
			}
			return err
		})
	case pick < 77:
		// Compare-and-swap on what this client last saw of the key.
		v := c.value()
		c.txn(ctx, k, []history.TxnOp{{Kind: "put", Key: k, Value: v}}, []history.TxnOp{{Kind: "get", Key: k}})
	case pick < 82:
		// Several operations at once on both keys of a group.
		a, b := c.r.key(2*group), c.r.key(2*group+1)
		if 2*group+1 >= c.r.keys {
			b = a
		}
		c.txn(ctx, a, []history.TxnOp{{Kind: "put", Key: a, Value: c.value()}, {Kind: "put", Key: b, Value: c.value()}},
			[]history.TxnOp{{Kind: "get", Key: a}, {Kind: "delete", Key: b}})
	case pick < 90:
		c.leasePut(ctx)
	case pick < 95:
		if c.lease != 0 {
			c.revoke(ctx)
		} else {
			c.get(ctx, k, false)
		}
	default:
		if c.lease != 0 {
			c.keepalive(ctx)
		} else {
			c.get(ctx, k, true)
		}
	}
}

// rangeGroup reads both keys of a group at once.
func (c *client) rangeGroup(ctx context.Context, group int) {
	start := c.r.key(2 * group)
	end := c.r.key(2*group + 2)
	c.do(ctx, history.Op{Kind: "range", Key: start, End: end}, func(ctx context.Context, o *history.Op) error {
		resp, err := c.cli.Get(ctx, start, clientv3.WithRange(end))
		if err == nil {
			o.Header, o.KVs = header(resp.Header), kvs(resp.Kvs)
		}
		return err
	})
}

// revoke revokes the client's lease (and with it the key put with it).
func (c *client) revoke(ctx context.Context) {
	id, key := c.lease, c.leaseKey
	o := c.do(ctx, history.Op{Kind: "revoke", Key: key, Lease: int64(id)}, func(ctx context.Context, o *history.Op) error {
		resp, err := c.cli.Revoke(ctx, id)
		if err == nil {
			o.Header = header(resp.Header)
		}
		return err
	})
	if o.Status != "fail" {
		c.lease = 0
	}
}

// keepalive renews the client's lease once.
func (c *client) keepalive(ctx context.Context) {
	id := c.lease
	c.do(ctx, history.Op{Kind: "keepalive", Key: c.leaseKey, Lease: int64(id)}, func(ctx context.Context, o *history.Op) error {
		resp, err := c.cli.KeepAliveOnce(ctx, id)
		if err == nil {
			o.Header, o.TTL = header(resp.ResponseHeader), resp.TTL
		}
		return err
	})
}

func (c *client) get(ctx context.Context, k string, serializable bool) {
	kind := "get"
	var opts []clientv3.OpOption
	if serializable {
		kind, opts = "sget", []clientv3.OpOption{clientv3.WithSerializable()}
	}
	c.do(ctx, history.Op{Kind: kind, Key: k}, func(ctx context.Context, o *history.Op) error {
		resp, err := c.cli.Get(ctx, k, opts...)
		if err == nil {
			o.Header, o.KVs = header(resp.Header), kvs(resp.Kvs)
			c.mods[k] = 0
			if len(resp.Kvs) > 0 {
				c.mods[k] = resp.Kvs[0].ModRevision
			}
		}
		return err
	})
}

func toOp(t history.TxnOp) clientv3.Op {
	switch t.Kind {
	case "put":
		if t.Lease != 0 {
			return clientv3.OpPut(t.Key, t.Value, clientv3.WithLease(clientv3.LeaseID(t.Lease)))
		}
		return clientv3.OpPut(t.Key, t.Value)
	case "delete":
		return clientv3.OpDelete(t.Key)
	default:
		return clientv3.OpGet(t.Key)
	}
}

// txn: If mod_revision(cmp) == what this client last saw Then ... Else ....
func (c *client) txn(ctx context.Context, cmp string, then, els []history.TxnOp) {
	expect := c.mods[cmp]
	c.do(ctx, history.Op{Kind: "txn", Compare: cmp, Expect: expect, Then: then, Else: els}, func(ctx context.Context, o *history.Op) error {
		var t, e []clientv3.Op
		for _, x := range then {
			t = append(t, toOp(x))
		}
		for _, x := range els {
			e = append(e, toOp(x))
		}
		resp, err := c.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(cmp), "=", expect)).Then(t...).Else(e...).Commit()
		if err != nil {
			return err
		}
		o.Header, o.OK = header(resp.Header), resp.Succeeded
		for _, r := range resp.Responses {
			if g := r.GetResponseRange(); g != nil {
				o.KVs = append(o.KVs, kvs(g.Kvs)...)
			}
			if d := r.GetResponseDeleteRange(); d != nil {
				o.Deleted += d.Deleted
			}
		}
		return nil
	})
}

// leasePut grants a lease (kept for the whole test: an hour) and puts one key with it; each lease
// holds one key, so revoking it touches only that key's group.
func (c *client) leasePut(ctx context.Context) {
	if c.lease == 0 {
		o := c.do(ctx, history.Op{Kind: "grant"}, func(ctx context.Context, o *history.Op) error {
			resp, err := c.cli.Grant(ctx, 3600)
			if err == nil {
				o.Header, o.Lease, o.TTL = header(resp.ResponseHeader), int64(resp.ID), resp.TTL
			}
			return err
		})
		if o.Status != "ok" {
			return
		}
		c.lease = clientv3.LeaseID(o.Lease)
		c.leaseKey = c.r.key(c.rng.Intn(c.r.keys))
	}
	k, id, v := c.leaseKey, c.lease, c.value()
	o := c.do(ctx, history.Op{Kind: "put", Key: k, Value: v, Lease: int64(id)}, func(ctx context.Context, o *history.Op) error {
		resp, err := c.cli.Put(ctx, k, v, clientv3.WithLease(id))
		if err == nil {
			o.Header = header(resp.Header)
			c.mods[k] = resp.Header.Revision
		}
		return err
	})
	if o.Status == "gone" {
		c.lease = 0 // revoked by a revoke whose answer was lost: a new lease next time
	}
}

// watch follows the prefix from a revision; on a cancellation (a compaction: a restore marks its
// revisions compacted) it lists the prefix again and watches from there. It asks for progress
// every second, so each session says up to which revision it has seen everything.
func (r *recorder) watch(ctx context.Context, cli *clientv3.Client, id int, from int64, done *sync.WaitGroup) {
	defer done.Done()
	session := 0
	why := "start"
	for ctx.Err() == nil {
		session++
		r.mu.Lock()
		r.hist.Sessions = append(r.hist.Sessions, history.Session{Watcher: id, Session: session, Time: r.now(), From: from, Why: why})
		r.mu.Unlock()
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		ch := cli.Watch(wctx, r.prefix, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithProgressNotify())
		ticker := time.NewTicker(time.Second)
		lastRev := from - 1
		ended := false
		for !ended {
			select {
			case <-ticker.C:
				pctx, pcancel := context.WithTimeout(wctx, 2*time.Second)
				_ = cli.RequestProgress(pctx)
				pcancel()
			case resp, ok := <-ch:
				if !ok {
					ended = true
					break
				}
				w := history.WatchResp{Watcher: id, Session: session, Time: r.now(), Header: *header(&resp.Header),
					Progress: resp.IsProgressNotify(), Canceled: resp.Canceled, Compact: resp.CompactRevision}
				if err := resp.Err(); err != nil {
					w.Error = err.Error()
				}
				for _, e := range resp.Events {
					w.Events = append(w.Events, history.Event{Type: e.Type.String(), KV: kvs([]*mvccpb.KeyValue{e.Kv})[0]})
					lastRev = e.Kv.ModRevision
				}
				r.mu.Lock()
				r.hist.Watches = append(r.hist.Watches, w)
				r.mu.Unlock()
				if resp.Canceled || resp.CompactRevision != 0 {
					ended = true
					why = fmt.Sprintf("cancelled: %s", w.Error)
					if resp.CompactRevision != 0 {
						why = fmt.Sprintf("compacted at %d", resp.CompactRevision)
					}
				}
			}
		}
		ticker.Stop()
		cancel()
		if ctx.Err() != nil {
			return
		}
		// Listed again, as a client does after "compacted": the listing is a read like any other.
		for ctx.Err() == nil {
			c := &client{r: r, id: 1000 + id, stream: new(int), streamMu: &sync.Mutex{}, cli: cli, endpoint: "lb", timeout: 3 * time.Second}
			*c.stream = 100000*(id+1) + session
			c.curr = *c.stream
			o := c.do(ctx, history.Op{Kind: "range", Key: r.prefix, End: clientv3.GetPrefixRangeEnd(r.prefix)}, func(ctx context.Context, o *history.Op) error {
				resp, err := cli.Get(ctx, r.prefix, clientv3.WithPrefix())
				if err == nil {
					o.Header, o.KVs = header(resp.Header), kvs(resp.Kvs)
				}
				return err
			})
			if o.Status == "ok" {
				from = o.Header.Revision + 1
				break
			}
			if lastRev >= from {
				from = lastRev + 1
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
}

func newClient(endpoints []string, tlsInfo *transport.TLSInfo) (*clientv3.Client, error) {
	var tc *tls.Config
	if tlsInfo != nil {
		var err error
		if tc, err = tlsInfo.ClientConfig(); err != nil {
			return nil, err
		}
	}
	return clientv3.New(clientv3.Config{
		Endpoints:            endpoints,
		TLS:                  tc,
		DialTimeout:          3 * time.Second,
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		AutoSyncInterval:     0, // through the load balancer: the members' own URLs are not the clients' to use
		Logger:               zap.NewNop(),
	})
}
