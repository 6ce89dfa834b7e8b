package kafka_test

import (
	"runtime"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// BenchmarkDecodedSize measures how much larger a request is once decoded
// than on the wire, for the lists a client may make long: each request
// holds 100,000 minimal elements of one list, and x-wire is the bytes
// kmsg allocates decoding it over its encoded size (docs/kafka.md, on
// what the listener's in-flight bounds count).
//
//	go test -run '^$' -bench DecodedSize -benchtime 3x ./kafka/
func BenchmarkDecodedSize(b *testing.B) {
	const n = 100_000
	repeat := func(add func()) {
		for range n {
			add()
		}
	}
	cases := []struct {
		name string
		req  func() kmsg.Request
	}{
		{"Metadata-v4-topic", func() kmsg.Request {
			r := kmsg.NewPtrMetadataRequest()
			r.SetVersion(4)
			repeat(func() {
				t := kmsg.NewMetadataRequestTopic()
				t.Topic = kmsg.StringPtr("")
				r.Topics = append(r.Topics, t)
			})
			return r
		}},
		{"OffsetCommit-v9-topic", func() kmsg.Request {
			r := kmsg.NewPtrOffsetCommitRequest()
			r.SetVersion(9)
			repeat(func() { r.Topics = append(r.Topics, kmsg.NewOffsetCommitRequestTopic()) })
			return r
		}},
		{"OffsetCommit-v9-partition", func() kmsg.Request {
			r := kmsg.NewPtrOffsetCommitRequest()
			r.SetVersion(9)
			t := kmsg.NewOffsetCommitRequestTopic()
			repeat(func() { t.Partitions = append(t.Partitions, kmsg.NewOffsetCommitRequestTopicPartition()) })
			r.Topics = []kmsg.OffsetCommitRequestTopic{t}
			return r
		}},
		{"JoinGroup-v9-protocol", func() kmsg.Request {
			r := kmsg.NewPtrJoinGroupRequest()
			r.SetVersion(9)
			repeat(func() { r.Protocols = append(r.Protocols, kmsg.NewJoinGroupRequestProtocol()) })
			return r
		}},
		{"Fetch-v12-topic", func() kmsg.Request {
			r := kmsg.NewPtrFetchRequest()
			r.SetVersion(12)
			repeat(func() { r.Topics = append(r.Topics, kmsg.NewFetchRequestTopic()) })
			return r
		}},
		{"OffsetFetch-v7-partition", func() kmsg.Request {
			r := kmsg.NewPtrOffsetFetchRequest()
			r.SetVersion(7)
			t := kmsg.NewOffsetFetchRequestTopic()
			repeat(func() { t.Partitions = append(t.Partitions, 0) })
			r.Topics = []kmsg.OffsetFetchRequestTopic{t}
			return r
		}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			req := tc.req()
			wire := req.AppendTo(nil)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for b.Loop() {
				fresh := kmsg.RequestForKey(req.Key())
				fresh.SetVersion(req.GetVersion())
				if err := fresh.ReadFrom(wire); err != nil {
					b.Fatal(err)
				}
			}
			runtime.ReadMemStats(&after)
			perOp := float64(after.TotalAlloc-before.TotalAlloc) / float64(b.N)
			b.ReportMetric(float64(len(wire))/n, "wire-B/elem")
			b.ReportMetric(perOp/n, "decoded-B/elem")
			b.ReportMetric(perOp/float64(len(wire)), "x-wire")
		})
	}
}
