package kafka_test

import (
	"encoding/binary"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohortlabs/cohort/internal/testcluster"
)

// BenchmarkServe_Heartbeat: a Kafka Heartbeat of a stable group's member,
// one at a time on one connection to the leader of a one-node cluster:
// the per-request path every consumer takes several times a second
// (read, decode, serve, encode, write). cpu-µs/op is this process's CPU
// (client and node, both here) per heartbeat; allocs/op counts both too.
func BenchmarkServe_Heartbeat(b *testing.B) {
	c := testcluster.Start(b, 1, testcluster.Options{Coordinator: testcluster.DefaultCoordinator(), Kafka: true})
	nc, err := net.DialTimeout("tcp", c.KafkaAddrs()[c.Leader()], 5*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	var corr int32
	format := kmsg.NewRequestFormatter(kmsg.FormatterClientID("bench"))
	do := func(req kmsg.Request) kmsg.Response {
		corr++
		if _, err := nc.Write(format.AppendRequest(nil, req, corr)); err != nil {
			b.Fatal(err)
		}
		body := readFrame(b, nc)
		resp := req.ResponseKind()
		resp.SetVersion(req.GetVersion())
		if req.IsFlexible() {
			body = body[1:]
		}
		if err := resp.ReadFrom(body[4:]); err != nil {
			b.Fatal(err)
		}
		return resp
	}
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Topics = []string{"orders"}
	join := kmsg.NewPtrJoinGroupRequest()
	join.SetVersion(9)
	join.Group, join.ProtocolType, join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = "bench", "consumer", 30_000, 30_000
	join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: meta.AppendTo(nil)}}
	jr := do(join).(*kmsg.JoinGroupResponse)
	if jr.ErrorCode == kerr.MemberIDRequired.Code {
		join.MemberID = jr.MemberID
		jr = do(join).(*kmsg.JoinGroupResponse)
	}
	if jr.ErrorCode != 0 {
		b.Fatalf("join: %v", kerr.ErrorForCode(jr.ErrorCode))
	}
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.SetVersion(5)
	sync.Group, sync.MemberID, sync.Generation = "bench", jr.MemberID, jr.Generation
	sync.ProtocolType, sync.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("range")
	assignment := kmsg.NewConsumerMemberAssignment()
	sync.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: jr.MemberID, MemberAssignment: assignment.AppendTo(nil)}}
	if sr := do(sync).(*kmsg.SyncGroupResponse); sr.ErrorCode != 0 {
		b.Fatalf("sync: %v", kerr.ErrorForCode(sr.ErrorCode))
	}
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.SetVersion(4)
	hb.Group, hb.MemberID, hb.Generation = "bench", jr.MemberID, jr.Generation
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	for b.Loop() {
		if r := do(hb).(*kmsg.HeartbeatResponse); r.ErrorCode != 0 {
			b.Fatalf("heartbeat: %v", kerr.ErrorForCode(r.ErrorCode))
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}

func readFrame(b *testing.B, nc net.Conn) []byte {
	var size [4]byte
	if _, err := io.ReadFull(nc, size[:]); err != nil {
		b.Fatal(err)
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(nc, body); err != nil {
		b.Fatal(err)
	}
	return body
}

// cpuTime is this process's user and system CPU so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
