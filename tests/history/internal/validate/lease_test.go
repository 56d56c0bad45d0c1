package validate

// Leases: grants, puts with a lease and revokes, valid and not.

import (
	"testing"
	"time"

	"etcd-asg-lifecycle/tests/history/internal/history"
)

const (
	leaseA = 0x1a
	leaseB = 0x1b
)

func withLease(k history.KV, lease int64) history.KV {
	k.Lease = lease
	return k
}

// leased is a valid history with leases, after the base: lease A granted, k2 put with it and
// read, A revoked (deleting k2 at a revision of its own) and k2 read absent; lease B granted, k3
// put with it, then put again with no lease (detached), and B revoked, deleting nothing (its
// answer at the last write's revision). Two watches deliver it all and say so.
func leased() *fx {
	f := base()
	f.op(history.Op{Kind: "grant", Lease: leaseA, TTL: 3600}, 5)
	f.op(history.Op{Kind: "put", Key: k2, Value: "l1", Lease: leaseA}, 6)
	f.get(k2, 6, withLease(kv(k2, "l1", 6, 6, 1), leaseA))
	f.op(history.Op{Kind: "revoke", Key: k2, Lease: leaseA}, 7)
	f.get(k2, 7)
	f.op(history.Op{Kind: "grant", Lease: leaseB, TTL: 3600}, 7)
	f.op(history.Op{Kind: "put", Key: k3, Value: "l2", Lease: leaseB}, 8)
	f.put(k3, "p3", 9)
	f.op(history.Op{Kind: "revoke", Key: k3, Lease: leaseB}, 9)
	f.get(k3, 9, kv(k3, "p3", 9, 8, 2))
	for w := 0; w < 2; w++ {
		f.events(w, 1, cl, putEv(withLease(kv(k2, "l1", 6, 6, 1), leaseA)))
		f.events(w, 1, cl, delEv(k2, 7))
		f.events(w, 1, cl, putEv(withLease(kv(k3, "l2", 8, 8, 1), leaseB)))
		f.events(w, 1, cl, putEv(kv(k3, "p3", 9, 8, 2)))
		f.progress(w, 1, cl, 9, time.Millisecond)
	}
	return f
}

func TestValidHistoryWithLeasesPasses(t *testing.T) {
	accepted(t, &leased().h)
}

// A revoke of unknown outcome: the lease may be gone, so a later put on it may fail ("gone");
// and the key it held may have been deleted with it.
func TestRevokeOfUnknownOutcome(t *testing.T) {
	f := newFx()
	f.op(history.Op{Kind: "grant", Lease: leaseA, TTL: 3600}, 1)
	f.op(history.Op{Kind: "put", Key: k2, Value: "l1", Lease: leaseA}, 2)
	f.failed(history.Op{Kind: "revoke", Key: k2, Lease: leaseA})
	f.get(k2, 3)
	accepted(t, &f.h)
}

var leaseCases = []ruleCase{
	{"an acknowledged put on a lease already revoked", ruleLeases, "put /h/k02=l3 lease 1a", func() *fx {
		f := leased()
		f.op(history.Op{Kind: "put", Key: k2, Value: "l3", Lease: leaseA}, 10)
		return f
	}},
	{"a put of unknown outcome on a revoked lease shown applied", ruleLeases, "put /h/k02=l4 lease 1a", func() *fx {
		f := leased()
		f.failed(history.Op{Kind: "put", Key: k2, Value: "l4", Lease: leaseA})
		f.events(0, 1, cl, putEv(withLease(kv(k2, "l4", 10, 10, 1), leaseA)))
		f.get(k0, 10, kv(k0, "c", 4, 2, 2)) // the cluster answered after it
		return f
	}},
	{"a watch that dropped a revoke's delete", ruleRevokeDeletes, "the delete of /h/k02 by the revoke of its lease 1a at revision 7", func() *fx {
		f := leased()
		var kept []history.WatchResp
		for _, r := range f.h.Watches {
			if len(r.Events) == 1 && r.Events[0].Type == "DELETE" && r.Events[0].KV.Key == k2 {
				continue
			}
			kept = append(kept, r)
		}
		f.h.Watches = kept
		return f
	}},
}
