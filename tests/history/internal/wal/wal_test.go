package wal

// What etcd's applier refuses after raft committed it (judge), on logs built in memory.

import (
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/raft/v3/raftpb"
)

// member: a member of cluster 1 whose log holds these requests from index first, all committed.
func member(t *testing.T, first uint64, reqs ...*pb.InternalRaftRequest) *Member {
	t.Helper()
	m := &Member{cluster: 1}
	for n, r := range reqs {
		data, err := r.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		m.Entries = append(m.Entries, raftpb.Entry{Index: first + uint64(n), Term: 1, Type: raftpb.EntryNormal, Data: data})
	}
	m.commit = first + uint64(len(reqs)) - 1
	return m
}

func merged(t *testing.T, ms ...*Member) *ClusterLog {
	t.Helper()
	logs, err := Merge(ms)
	if err != nil {
		t.Fatal(err)
	}
	return logs[1]
}

func put(v string, rev uint64) *pb.InternalRaftRequest {
	return &pb.InternalRaftRequest{Header: &pb.RequestHeader{AuthRevision: rev}, Put: &pb.PutRequest{Key: []byte("k"), Value: []byte(v)}}
}

func alarm(action pb.AlarmRequest_AlarmAction, kind pb.AlarmType) *pb.InternalRaftRequest {
	return &pb.InternalRaftRequest{Alarm: &pb.AlarmRequest{Action: action, MemberID: 7, Alarm: kind}}
}

func empty() *pb.InternalRaftRequest { return &pb.InternalRaftRequest{Header: &pb.RequestHeader{}} }

func verdicts(l *ClusterLog, i uint64) string {
	switch {
	case l.Refused[i]:
		return "refused"
	case l.Doubtful[i]:
		return "doubtful"
	}
	return "applied"
}

func TestAlarmsRefuseWhatTheyCap(t *testing.T) {
	nested := &pb.InternalRaftRequest{Txn: &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestTxn{
		RequestTxn: &pb.TxnRequest{Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("k")}}}}}}}}}}
	del := &pb.InternalRaftRequest{DeleteRange: &pb.DeleteRangeRequest{Key: []byte("k")}}
	l := merged(t, member(t, 1, empty(), alarm(pb.AlarmRequest_ACTIVATE, pb.AlarmType_NOSPACE), put("a", 0), nested, del,
		alarm(pb.AlarmRequest_DEACTIVATE, pb.AlarmType_NOSPACE), put("b", 0)))
	for i, want := range map[uint64]string{3: "refused", 4: "refused", 5: "applied", 7: "applied"} {
		if got := verdicts(l, i); got != want {
			t.Errorf("index %d: %s, want %s", i, got, want)
		}
	}
}

// etcd 3.4 and 3.5 swap the applier per alarm type: CORRUPT cleared while NOSPACE stands
// leaves the base applier, whatever the alarms say. Doubtful until all are clear.
func TestAlarmsOfBothTypesLeaveWritesDoubtful(t *testing.T) {
	l := merged(t, member(t, 1, empty(), alarm(pb.AlarmRequest_ACTIVATE, pb.AlarmType_NOSPACE),
		alarm(pb.AlarmRequest_ACTIVATE, pb.AlarmType_CORRUPT), alarm(pb.AlarmRequest_DEACTIVATE, pb.AlarmType_CORRUPT),
		put("a", 0), alarm(pb.AlarmRequest_DEACTIVATE, pb.AlarmType_NOSPACE), put("b", 0)))
	if verdicts(l, 5) != "doubtful" || verdicts(l, 7) != "applied" {
		t.Fatalf("a after the mix: %s (want doubtful); b once clear: %s (want applied)", verdicts(l, 5), verdicts(l, 7))
	}
}

// A hole in the merged log (a member's log starting at a snapshot, the one before it gone):
// what the hole held is unknown, alarms included, so every write after it is Doubtful.
func TestWritesAfterAHoleAreDoubtful(t *testing.T) {
	a := member(t, 1, empty(), put("a", 0), empty())
	b := member(t, 5, empty(), put("b", 0))
	l := merged(t, a, b)
	if verdicts(l, 2) != "applied" || verdicts(l, 6) != "doubtful" {
		t.Fatalf("before the hole: %s (want applied); after it: %s (want doubtful)", verdicts(l, 2), verdicts(l, 6))
	}
}

// Authentication, once on, stays checked: a disabling may have been refused (not root's).
func TestAStaleAuthRevisionIsDoubtfulEvenAfterADisabling(t *testing.T) {
	enable := &pb.InternalRaftRequest{AuthEnable: &pb.AuthEnableRequest{}}
	role := &pb.InternalRaftRequest{Header: &pb.RequestHeader{AuthRevision: 1}, AuthRoleAdd: &pb.AuthRoleAddRequest{Name: "r"}}
	disable := &pb.InternalRaftRequest{Header: &pb.RequestHeader{AuthRevision: 1}, AuthDisable: &pb.AuthDisableRequest{}}
	l := merged(t, member(t, 1, enable, put("a", 1), role, disable, put("b", 1), put("c", 3)))
	for i, want := range map[uint64]string{2: "applied", 5: "doubtful", 6: "applied"} {
		if got := verdicts(l, i); got != want {
			t.Errorf("index %d: %s, want %s", i, got, want)
		}
	}
}
