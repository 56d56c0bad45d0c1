// Package wal reads what the members persisted: their write-ahead logs, merged by cluster, and the
// client requests in them.
package wal

// What the members persisted: each member's write-ahead log (data-dir/member/wal), read with
// etcd's own wal package as etcd's robustness tests read it (tests/robustness/report/wal.go),
// merged by cluster and raft index, and the client requests in it, by what identifies them.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	"go.etcd.io/raft/v3/raftpb"

	"etcd-asg-lifecycle/tests/history/internal/history"
)

// Member is one member's log: its cluster, the highest commit index it persisted, and its
// entries as they stand (an entry rewritten at a lower index replaces the ones after it).
type Member struct {
	dir     string
	cluster uint64
	commit  uint64
	Entries []raftpb.Entry
	// restored: the log begins as etcdutl's `snapshot restore` writes one (a configuration
	// change per member at indexes 1..n, then a snapshot at n): the member's state came from a
	// backup, not from its log.
	restored bool
}

// walDirOf: a data directory's WAL directory (or dir itself, if it holds .wal files).
func walDirOf(dir string) string {
	if names, err := filepath.Glob(filepath.Join(dir, "*.wal")); err == nil && len(names) > 0 {
		return dir
	}
	return filepath.Join(dir, "member", "wal")
}

// ReadMember decodes every record of a member's WAL files, checking their checksums; a torn
// last record (the member stopped while writing it) ends the log there, as wal.Repair would cut
// it, without writing anything.
func ReadMember(dir string) (*Member, error) {
	walDir := walDirOf(dir)
	names, err := fileutil.ReadDir(walDir)
	if err != nil {
		return nil, err
	}
	var files []fileutil.FileReader
	for _, name := range names {
		if !strings.HasSuffix(name, ".wal") {
			continue
		}
		f, err := os.Open(filepath.Join(walDir, name))
		if err != nil {
			return nil, err
		}
		defer f.Close()
		files = append(files, fileutil.NewFileReader(f))
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no .wal files in %s", walDir)
	}
	m := &Member{dir: dir}
	dec := wal.NewDecoder(files...)
	rec := &walpb.Record{}
	for err = dec.Decode(rec); err == nil; err = dec.Decode(rec) {
		if err = m.record(rec, dec); err != nil {
			return nil, fmt.Errorf("%s: %w", walDir, err)
		}
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, fmt.Errorf("%s: %w", walDir, err)
	}
	return m, nil
}

// record takes one WAL record into the member's log.
func (m *Member) record(rec *walpb.Record, dec wal.Decoder) error {
	switch rec.Type {
	case wal.EntryType:
		var e raftpb.Entry
		if err := e.Unmarshal(rec.Data); err != nil {
			return err
		}
		i := len(m.Entries)
		for i > 0 && m.Entries[i-1].Index >= e.Index {
			i--
		}
		m.Entries = append(m.Entries[:i], e)
	case wal.StateType:
		var st raftpb.HardState
		if err := st.Unmarshal(rec.Data); err != nil {
			return err
		}
		m.commit = st.Commit
	case wal.SnapshotType:
		var snap walpb.Snapshot
		if err := snap.Unmarshal(rec.Data); err != nil {
			return err
		}
		m.restored = m.restored || restoredAt(m.Entries, snap.Index)
	case wal.MetadataType:
		var md pb.Metadata
		if err := md.Unmarshal(rec.Data); err != nil {
			return err
		}
		m.cluster = md.ClusterID
	case wal.CrcType:
		if crc := dec.LastCRC(); crc != 0 && rec.Validate(crc) != nil {
			return wal.ErrCRCMismatch
		}
		dec.UpdateCRC(rec.Crc)
	}
	return nil
}

// restoredAt: whether a snapshot at index, after these entries, is the one etcdutl's restore
// writes (etcdutl/snapshot/v3_snapshot.go, saveWALAndSnap): every entry before it a
// configuration change, the last at its index. A member's own snapshot follows the entries it
// applied (normal ones: a leader's first entry is an empty normal one), and one a member
// received from its leader has no entry before it.
func restoredAt(entries []raftpb.Entry, index uint64) bool {
	if index == 0 || len(entries) == 0 || entries[len(entries)-1].Index != index {
		return false
	}
	for _, e := range entries {
		if e.Type != raftpb.EntryConfChange && e.Type != raftpb.EntryConfChangeV2 {
			return false
		}
	}
	return true
}

// ClusterLog is one cluster's log, merged from its members': each index's entry, committed
// when some member persisted a commit index at or past it (that member's entry is the one).
type ClusterLog struct {
	Cluster   uint64
	entries   map[uint64]raftpb.Entry
	committed map[uint64]bool
	first     uint64
	last      uint64
	// GapFrom: every index from it to last is known.
	GapFrom uint64
	// commit: the highest commit index a member persisted.
	commit uint64
	// Restored: a member's log began from a restored backup, whose state no entry shows.
	Restored bool
	// where each request was persisted, committed (indexes) or not (a count).
	At      map[string][]uint64
	Pending map[string]int
	// Committed entries etcd's applier refused (Refused: a write under a NOSPACE or CORRUPT
	// alarm), or may have refused (Doubtful: authentication changed after the request was
	// stamped, or the alarms at its index are not known): committed is not applied (judge).
	Refused  map[uint64]bool
	Doubtful map[uint64]bool
}

// Merge merges the members' logs by cluster; an error if two members persisted different
// committed entries at one index (a violation of raft's safety, as etcd's merge refuses it).
func Merge(members []*Member) (map[uint64]*ClusterLog, error) {
	out := map[uint64]*ClusterLog{}
	// Members with the highest commit first: their entry stands for the index.
	sort.SliceStable(members, func(a, b int) bool { return members[a].commit > members[b].commit })
	for _, m := range members {
		l := out[m.cluster]
		if l == nil {
			l = &ClusterLog{Cluster: m.cluster, entries: map[uint64]raftpb.Entry{}, committed: map[uint64]bool{},
				At: map[string][]uint64{}, Pending: map[string]int{}}
			out[m.cluster] = l
		}
		l.Restored = l.Restored || m.restored
		if m.commit > l.commit {
			l.commit = m.commit
		}
		for _, e := range m.Entries {
			old, seen := l.entries[e.Index]
			committed := e.Index <= m.commit
			switch {
			case seen && l.committed[e.Index] && committed && (old.Term != e.Term || string(old.Data) != string(e.Data)):
				return nil, fmt.Errorf("cluster %x: members persisted different committed entries at raft index %d (%s and %s)",
					m.cluster, e.Index, members[0].dir, m.dir)
			case !seen || committed && !l.committed[e.Index] || !l.committed[e.Index] && e.Term > old.Term:
				l.entries[e.Index] = e
				l.committed[e.Index] = l.committed[e.Index] || committed
			}
		}
	}
	for _, l := range out {
		l.index()
	}
	return out, nil
}

// index finds the log's bounds and where each client request is.
func (l *ClusterLog) index() {
	for i := range l.entries {
		if l.first == 0 || i < l.first {
			l.first = i
		}
		if i > l.last {
			l.last = i
		}
	}
	l.GapFrom = l.last
	for l.GapFrom > l.first {
		if _, ok := l.entries[l.GapFrom-1]; !ok {
			break
		}
		l.GapFrom--
	}
	for i, e := range l.entries {
		if e.Type != raftpb.EntryNormal || len(e.Data) == 0 {
			continue
		}
		var req pb.InternalRaftRequest
		if req.Unmarshal(e.Data) != nil {
			continue // a v2 request of an older etcd's bootstrap
		}
		for _, sig := range requestSigs(&req) {
			if l.committed[i] {
				l.At[sig] = append(l.At[sig], i)
			} else {
				l.Pending[sig]++
			}
		}
	}
	for _, idx := range l.At {
		sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })
	}
	l.judge()
}

// judge replays the committed log in index order for what etcd's applier refuses although
// raft committed it (server/etcdserver/apply: uber_applier.go, apply.go, corrupt.go):
//   - under a NOSPACE alarm (any member's), a put, a lease grant and a transaction with a put
//     in a branch (applierV3Capped); under CORRUPT, every request (applierV3Corrupt). An alarm
//     is raised and disarmed by an entry of the log, so the state at each index is known in a
//     log whole from index 1 up to it; after a hole, and in a log begun from a restored backup
//     (which may carry an alarm: the hibernation fence does), every write is Doubtful. etcd 3.4
//     and 3.5 swap the applier per alarm type, so with both types raised, or one cleared while
//     the other stands, writes are Doubtful until every alarm is clear.
//   - with authentication on, a request stamped with an auth revision older than the store's
//     when it applies (ErrAuthOldRevision, or ErrUserEmpty for none; auth/store.go
//     isOpPermitted). A fresh store's revision is 1, and each change of users or roles, and
//     turning authentication off, moves it by one when it succeeds (commitRevision; turning it
//     on keeps the stored revision): in a log whole from its
//     first index, a request stamped below 1 + the changes before it is Doubtful (those changes
//     may have succeeded), and one stamped at or above it was checked against a store no newer.
//     Before any enabling entry nothing is checked; after one, always (a disabling by another
//     user than root is refused).
func (l *ClusterLog) judge() {
	l.Refused, l.Doubtful = map[uint64]bool{}, map[uint64]bool{}
	known := l.first == 1 && !l.Restored // until a hole
	alarms := map[[2]uint64]bool{}       // (member, alarm type) raised
	// etcd 3.4 and 3.5 swap the applier at each change of an alarm type (etcdserver/apply.go
	// applyAlarm): with both types raised, or one type cleared while the other stands, which
	// applier runs is not what the raised alarms say (3.6 rebuilds it from them). Until every
	// alarm is clear again, writes are Doubtful.
	mixed := false
	changes, enabled := uint64(0), false
	for i := l.first; i <= l.last && i <= l.commit; i++ {
		e, ok := l.entries[i]
		if !ok || !l.committed[i] {
			known = false // a hole, or an entry no member that persisted it had committed
			continue
		}
		var req pb.InternalRaftRequest
		if e.Type != raftpb.EntryNormal || len(e.Data) == 0 || req.Unmarshal(e.Data) != nil {
			continue
		}
		if a := req.Alarm; a != nil {
			switch a.Action {
			case pb.AlarmRequest_ACTIVATE:
				alarms[[2]uint64{a.MemberID, uint64(a.Alarm)}] = true
			case pb.AlarmRequest_DEACTIVATE:
				delete(alarms, [2]uint64{a.MemberID, uint64(a.Alarm)})
			}
			nospace, corrupt := raised(alarms)
			switch {
			case !nospace && !corrupt:
				mixed = false
			case nospace && corrupt,
				a.Action == pb.AlarmRequest_DEACTIVATE && a.Alarm == pb.AlarmType_NOSPACE && corrupt,
				a.Action == pb.AlarmRequest_DEACTIVATE && a.Alarm == pb.AlarmType_CORRUPT && nospace:
				mixed = true // both, or one type cleared while the other stands
			}
			continue
		}
		stamp := uint64(0)
		if req.Header != nil {
			stamp = req.Header.AuthRevision
		}
		switch {
		case !known || mixed:
			l.Doubtful[i] = true
		case refusedUnder(alarms, &req):
			l.Refused[i] = true
		case enabled && stamp < 1+changes:
			l.Doubtful[i] = true
		}
		if changesAuth(&req) {
			changes++
		}
		// Once on, checked for good: a refused disabling (not root's) leaves it on.
		enabled = enabled || req.AuthEnable != nil
	}
}

// raised: whether a NOSPACE, and a CORRUPT, alarm stands.
func raised(alarms map[[2]uint64]bool) (nospace, corrupt bool) {
	for a := range alarms {
		nospace = nospace || a[1] == uint64(pb.AlarmType_NOSPACE)
		corrupt = corrupt || a[1] == uint64(pb.AlarmType_CORRUPT)
	}
	return nospace, corrupt
}

// refusedUnder: whether etcd's applier refuses req while these alarms are raised: under CORRUPT
// every request; under NOSPACE a put, a lease grant, and a transaction that costs space (a put
// in either branch, or in a transaction nested in one: storage/quota.go costTxn).
func refusedUnder(alarms map[[2]uint64]bool, req *pb.InternalRaftRequest) bool {
	nospace, corrupt := raised(alarms)
	switch {
	case corrupt:
		return true
	case !nospace:
		return false
	case req.Put != nil, req.LeaseGrant != nil:
		return true
	case req.Txn != nil:
		return txnPuts(req.Txn)
	}
	return false
}

// txnPuts: whether a branch of the transaction, or of one nested in it, puts.
func txnPuts(t *pb.TxnRequest) bool {
	for _, op := range append(append([]*pb.RequestOp{}, t.Success...), t.Failure...) {
		if op.GetRequestPut() != nil || op.GetRequestTxn() != nil && txnPuts(op.GetRequestTxn()) {
			return true
		}
	}
	return false
}

// changesAuth: a request that changes users, roles or turns authentication off: each moves the
// auth store's revision when it succeeds (commitRevision in auth/store.go; enabling does not:
// it keeps the stored revision).
func changesAuth(r *pb.InternalRaftRequest) bool {
	return r.AuthDisable != nil || r.AuthUserAdd != nil || r.AuthUserDelete != nil ||
		r.AuthUserChangePassword != nil || r.AuthUserGrantRole != nil || r.AuthUserRevokeRole != nil ||
		r.AuthRoleAdd != nil || r.AuthRoleDelete != nil || r.AuthRoleGrantPermission != nil ||
		r.AuthRoleRevokePermission != nil
}

// Complete: the log holds every index from the cluster's first, and the cluster's state is
// its log's (not a restored backup's, which holds writes no entry of this log shows).
func (l *ClusterLog) Complete() bool { return l.first == 1 && l.GapFrom == 1 && !l.Restored }

// requestSigs: what identifies a request, as the recorder's operations are identified: a put
// by its key and (unique) value, a delete by its key, a revoke by its lease; a transaction by
// the puts in its branches.
func requestSigs(req *pb.InternalRaftRequest) []string {
	switch {
	case req.Put != nil:
		return []string{putSig(string(req.Put.Key), string(req.Put.Value))}
	case req.DeleteRange != nil && len(req.DeleteRange.RangeEnd) == 0:
		return []string{"del|" + string(req.DeleteRange.Key)}
	case req.LeaseRevoke != nil:
		return []string{fmt.Sprintf("revoke|%x", req.LeaseRevoke.ID)}
	case req.Txn != nil:
		var out []string
		for _, op := range append(append([]*pb.RequestOp{}, req.Txn.Success...), req.Txn.Failure...) {
			if p := op.GetRequestPut(); p != nil {
				out = append(out, putSig(string(p.Key), string(p.Value)))
			}
		}
		return out
	}
	return nil
}

func putSig(key, value string) string { return "put|" + key + "|" + value }

// OpSig: the signature of a recorder's write, and whether it is unique (a value).
func OpSig(o *history.Op) (string, bool) {
	switch o.Kind {
	case "put":
		return putSig(o.Key, o.Value), true
	case "txn":
		for _, t := range o.Then {
			if t.Kind == "put" {
				return putSig(t.Key, t.Value), true
			}
		}
	case "delete":
		return "del|" + o.Key, false
	case "revoke":
		return fmt.Sprintf("revoke|%x", o.Lease), false
	}
	return "", false
}
