package kafka_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohortlabs/cohort/bench/report"
	"github.com/cohortlabs/cohort/internal/testcluster"
)

// BenchmarkServe_Heartbeat: a Kafka Heartbeat of a stable group's member,
// one at a time on one connection to the leader of a one-node cluster:
// the per-request path every consumer takes several times a second
// (read, decode, serve, encode, write). cpu-µs/op is this process's CPU
// (client and node, both here) per heartbeat; allocs/op counts both too.
func BenchmarkServe_Heartbeat(b *testing.B) {
	c := testcluster.Start(b, 1, testcluster.Options{Coordinator: testcluster.DefaultCoordinator(), Kafka: true})
	r := dial(b, c.KafkaAddrs()[c.Leader()])
	jr := joinKafka(r, "bench")
	if jr.ErrorCode != 0 {
		b.Fatalf("join: %v", kerr.ErrorForCode(jr.ErrorCode))
	}
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.SetVersion(5)
	sync.Group, sync.MemberID, sync.Generation = "bench", jr.MemberID, jr.Generation
	sync.ProtocolType, sync.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("range")
	assignment := kmsg.NewConsumerMemberAssignment()
	sync.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: jr.MemberID, MemberAssignment: assignment.AppendTo(nil)}}
	if sr := r.do(sync).(*kmsg.SyncGroupResponse); sr.ErrorCode != 0 {
		b.Fatalf("sync: %v", kerr.ErrorForCode(sr.ErrorCode))
	}
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.SetVersion(4)
	hb.Group, hb.MemberID, hb.Generation = "bench", jr.MemberID, jr.Generation
	b.ReportAllocs()
	cpu0 := report.ProcessCPU()
	for b.Loop() {
		if resp := r.do(hb).(*kmsg.HeartbeatResponse); resp.ErrorCode != 0 {
			b.Fatalf("heartbeat: %v", kerr.ErrorForCode(resp.ErrorCode))
		}
	}
	b.ReportMetric(float64((report.ProcessCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}
