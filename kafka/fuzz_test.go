package kafka_test

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// FuzzRequest sends any bytes as one request (header and body, after the
// 4-byte size) to a node's Kafka listener, the port an anonymous client
// reaches. Whatever it is (malformed, a version not served, a valid
// request naming anything at all), the node must not crash, an answer
// must carry the request's correlation ID, and the node must go on
// serving other connections. The seeds are each served API at its oldest,
// middle and newest version, empty and naming the node's topic and
// group. `make test` replays them; `make fuzz` explores from them.
func FuzzRequest(f *testing.F) {
	c := startAuditCluster(f)
	addr := c.KafkaAddr(0)
	av := kmsg.NewPtrApiVersionsRequest()
	av.SetVersion(3)
	av.ClientSoftwareName, av.ClientSoftwareVersion = "fuzz", "1"
	served := dial(f, addr).do(av).(*kmsg.ApiVersionsResponse).ApiKeys
	if len(served) == 0 {
		f.Fatal("ApiVersions lists no APIs")
	}
	formatter := kmsg.NewRequestFormatter(kmsg.FormatterClientID("fuzz"))
	seed := func(req kmsg.Request) {
		f.Add(formatter.AppendRequest(nil, req, 7)[4:])
	}
	for _, k := range served {
		for _, v := range []int16{k.MinVersion, (k.MinVersion + k.MaxVersion) / 2, k.MaxVersion} {
			req := kmsg.RequestForKey(k.ApiKey)
			req.SetVersion(v)
			seed(req)
		}
	}
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(12)
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr("orders")
	md.Topics = []kmsg.MetadataRequestTopic{mt}
	seed(md)
	of := kmsg.NewPtrOffsetFetchRequest()
	of.SetVersion(8)
	og := kmsg.NewOffsetFetchRequestGroup()
	og.Group = "cg"
	of.Groups = []kmsg.OffsetFetchRequestGroup{og}
	seed(of)
	oc := kmsg.NewPtrOffsetCommitRequest()
	oc.SetVersion(9)
	oc.Group, oc.MemberID, oc.Generation = "cg", "member-1", 1
	ot := kmsg.NewOffsetCommitRequestTopic()
	ot.Topic = "orders"
	op := kmsg.NewOffsetCommitRequestTopicPartition()
	op.Offset = 42
	ot.Partitions = []kmsg.OffsetCommitRequestTopicPartition{op}
	oc.Topics = []kmsg.OffsetCommitRequestTopic{ot}
	seed(oc)
	hb := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	hb.Group, hb.MemberID, hb.MemberEpoch = "cg", "member-1", 1
	hb.SubscribedTopicNames = []string{"orders"}
	seed(hb)
	dg := kmsg.NewPtrDescribeGroupsRequest()
	dg.SetVersion(5)
	dg.Groups = []string{"cg", "cg", "none"}
	seed(dg)

	// The node serves on: one connection asks ApiVersions after every
	// input, redialled only after a failure.
	var probe *raw
	f.Cleanup(func() {
		if probe != nil {
			probe.nc.Close()
		}
	})
	f.Fuzz(func(t *testing.T, frame []byte) {
		exchange(t, addr, frame)
		if probe == nil || probe.t.Failed() {
			if probe != nil {
				probe.nc.Close()
			}
			nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			probe = &raw{nc: nc}
		}
		probe.t = t
		if resp := probe.do(av).(*kmsg.ApiVersionsResponse); resp.ErrorCode != 0 || len(resp.ApiKeys) != len(served) {
			t.Fatalf("ApiVersions after the input: error %d, %d APIs, want %d", resp.ErrorCode, len(resp.ApiKeys), len(served))
		}
	})
}

// unlinger makes closing nc reset it, leaving no TIME_WAIT behind: tens of
// thousands of inputs a minute would otherwise spend the ephemeral ports.
func unlinger(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
}

// exchange sends frame as a request on a connection of its own and reads
// what comes back within 300 ms. A request that waits (a JoinGroup for its
// rebalance, a Fetch for its max wait) is left waiting, and a refusal
// closes the connection; an answer must carry the request's correlation
// ID.
func exchange(t *testing.T, addr string, frame []byte) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	unlinger(nc)
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := nc.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(frame))), frame...)); err != nil {
		return
	}
	var size [4]byte
	if _, err := io.ReadFull(nc, size[:]); err != nil {
		return
	}
	answer := make([]byte, min(binary.BigEndian.Uint32(size[:]), 64<<20))
	if _, err := io.ReadFull(nc, answer); err != nil {
		return
	}
	if len(frame) < 8 || len(answer) < 4 || binary.BigEndian.Uint32(answer) != binary.BigEndian.Uint32(frame[4:8]) {
		t.Fatalf("an answer of %d bytes to a request of %d bytes does not carry its correlation ID", len(answer), len(frame))
	}
}
