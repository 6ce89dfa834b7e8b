package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cohortlabs/cohort/auth"
	"github.com/cohortlabs/cohort/internal/proc"
	"github.com/cohortlabs/cohort/raftnode"
)

func TestFlags_CommandLineBeatsEnvironmentBeatsDefault(t *testing.T) {
	env := map[string]string{
		"COHORT_RAFT_ADDR":              "127.0.0.1:7100",
		"COHORT_GRPC_ADDR":              "127.0.0.1:9100",
		"COHORT_JOIN":                   "a:1,b:2",
		"COHORT_RAFT_HEARTBEAT_TIMEOUT": "300ms",
		"COHORT_BOOTSTRAP_EXPECT":       "3",
	}
	cmd := newRootCommand()
	if err := cmd.Flags().Parse([]string{"--grpc-addr", "127.0.0.1:9200"}); err != nil {
		t.Fatal(err)
	}
	if err := applyEnv(cmd.Flags(), func(k string) string { return env[k] }); err != nil {
		t.Fatalf("applyEnv: %v", err)
	}
	get := func(name string) string { return cmd.Flags().Lookup(name).Value.String() }
	for flag, want := range map[string]string{
		"raft-addr":              "127.0.0.1:7100", // environment
		"grpc-addr":              "127.0.0.1:9200", // command line wins
		"http-addr":              "127.0.0.1:8001", // default
		"join":                   "[a:1,b:2]",
		"raft-heartbeat-timeout": (300 * time.Millisecond).String(),
		"bootstrap-expect":       "3",
		// Readiness and log bounds, at their documented defaults.
		"ready-max-lag":           "1024",
		"ready-max-last-contact":  "2s",
		"raft-log-cache-bytes":    "67108864",
		"raft-snapshot-log-bytes": "268435456",
	} {
		if got := get(flag); got != want {
			t.Errorf("--%s = %q, want %q", flag, got, want)
		}
	}

	bad := newRootCommand()
	err := applyEnv(bad.Flags(), func(k string) string {
		if k == "COHORT_BOOTSTRAP_EXPECT" {
			return "three"
		}
		return ""
	})
	if err == nil || !strings.Contains(err.Error(), "COHORT_BOOTSTRAP_EXPECT") {
		t.Fatalf("bad environment value: %v, want an error naming the variable", err)
	}
}

type fakeReadiness struct {
	ok     bool
	reason string
}

func (f fakeReadiness) Ready() (bool, string) { return f.ok, f.reason }

func TestHTTP_HealthAndReadiness(t *testing.T) {
	tests := []struct {
		path     string
		ready    fakeReadiness
		wantCode int
		wantBody string
	}{
		{"/healthz", fakeReadiness{false, "no known raft leader"}, http.StatusOK, "ok"},
		{"/readyz", fakeReadiness{true, ""}, http.StatusOK, "ready"},
		{"/readyz", fakeReadiness{false, "no known raft leader"}, http.StatusServiceUnavailable, "not ready: no known raft leader"},
	}
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		httpHandler(tt.ready, prometheus.NewRegistry(), false).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tt.path, nil))
		if rec.Code != tt.wantCode || !strings.Contains(rec.Body.String(), tt.wantBody) {
			t.Errorf("GET %s (ready=%v): %d %q, want %d containing %q", tt.path, tt.ready.ok, rec.Code, rec.Body.String(), tt.wantCode, tt.wantBody)
		}
	}
}

// Runtime profiles are served only with --pprof.
func TestHTTP_ProfilesOnlyWithPprof(t *testing.T) {
	for _, on := range []bool{false, true} {
		for path, want := range map[string]string{"/debug/pprof/": "goroutine", "/debug/pprof/cmdline": "", "/debug/pprof/profile?seconds=1": ""} {
			rec := httptest.NewRecorder()
			httpHandler(fakeReadiness{true, ""}, prometheus.NewRegistry(), on).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			switch {
			case !on && rec.Code != http.StatusNotFound:
				t.Errorf("GET %s without --pprof: %d, want 404", path, rec.Code)
			case on && (rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), want) || rec.Body.Len() == 0):
				t.Errorf("GET %s with --pprof: %d, %d bytes; want 200 and a profile", path, rec.Code, rec.Body.Len())
			}
		}
	}
}

// --pprof on an address others can reach is refused before anything
// starts.
func TestRun_PprofNeedsALoopbackHTTPAddress(t *testing.T) {
	cmd := newRootCommand()
	cmd.SetArgs([]string{"--pprof", "--http-addr", "0.0.0.0:0", "--data-dir", t.TempDir()})
	cmd.SetErr(io.Discard)
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), "--pprof needs a loopback --http-addr") {
		t.Fatalf("--pprof on 0.0.0.0: %v, want it refused", err)
	}
}

// syncBuffer collects cohortd's log while it runs.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startedHTTPAddr is the http_address of the "cohortd started" line of a
// JSON log, or "" before it is written.
func startedHTTPAddr(log string) string {
	for _, line := range strings.Split(log, "\n") {
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"http_address"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "cohortd started" {
			return rec.Addr
		}
	}
	return ""
}

// /metrics of a running cohortd serves what run registers: the node's Raft
// and FSM families, the engine's and the API's, and the Go runtime and
// process collectors, with live values (a bootstrapped single node counts
// itself as the one voter).
func TestMetrics_ServesRaftEngineAndProcessFamilies(t *testing.T) {
	cmd := newRootCommand()
	logs := &syncBuffer{}
	cmd.SetOut(logs)
	cmd.SetErr(logs)
	cmd.SetArgs([]string{"--data-dir", t.TempDir(), "--bootstrap", "--log-format", "json",
		"--raft-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("cohortd: %v\n%s", err, logs)
		}
	})

	wantFamilies := []string{
		"cohort_raft_voters", "cohort_raft_state", "cohort_raft_commit_index", "cohort_fsm_topics",
		"cohort_groups", "cohort_group_heartbeats_total",
		"go_goroutines", "go_memstats_heap_alloc_bytes", "process_start_time_seconds", "process_open_fds",
	}
	proc.WaitFor(t, 30*time.Second, "/metrics serving every family with cohort_raft_voters 1", func() (bool, string) {
		select {
		case err := <-done:
			done <- err // for the cleanup
			t.Fatalf("cohortd stopped before serving /metrics: %v\n%s", err, logs)
		default:
		}
		addr := startedHTTPAddr(logs.String())
		if addr == "" {
			return false, "not started yet"
		}
		code, body := httpGet(ctx, "http://"+addr+"/metrics")
		missing := ""
		for _, name := range wantFamilies {
			if !strings.Contains(body, "\n# TYPE "+name+" ") {
				missing += " " + name
			}
		}
		// The collectors are registered before the HTTP server starts:
		// only the values wait for the election.
		if code == http.StatusOK && missing != "" {
			t.Fatalf("/metrics lacks the families%s:\n%s", missing, body)
		}
		return code == http.StatusOK && hasMetric(body, "cohort_raft_voters", "1"), fmt.Sprintf("status %d; body:\n%s", code, body)
	})
}

// The snapshot restore limits are flags with their documented defaults,
// and a bad value stops the start with an error naming it and the limit.
func TestFlags_SnapshotRestoreLimits(t *testing.T) {
	cmd := newRootCommand()
	for flag, want := range map[string]string{
		"max-snapshot-size":             "1073741824",
		"snapshot-restore-idle-timeout": "30s",
	} {
		if got := cmd.Flags().Lookup(flag).Value.String(); got != want {
			t.Errorf("--%s defaults to %q, want %q", flag, got, want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-snapshot-size", "10"}, "max snapshot size 10 bytes: must be at least 1024"},
		{[]string{"--snapshot-restore-idle-timeout", "0s"}, "snapshot restore idle timeout 0s: must be positive"},
	} {
		cmd := newRootCommand()
		var out strings.Builder
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"--data-dir", t.TempDir(), "--raft-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, tc.args...))
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("cohortd %v: %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

// The limits' flags exist with their documented defaults (docs/operations.md, Limits).
func TestFlags_LimitDefaults(t *testing.T) {
	cmd := newRootCommand()
	for flag, want := range map[string]string{
		"raft-max-conns":              "256",
		"raft-idle-timeout":           time.Minute.String(),
		"grpc-max-recv-bytes":         "16777216",
		"grpc-max-send-bytes":         "1073741824",
		"grpc-max-concurrent-streams": "65536",
		"grpc-keepalive-time":         time.Minute.String(),
		"grpc-keepalive-timeout":      (20 * time.Second).String(),
		"grpc-keepalive-min-time":     time.Second.String(),
		"grpc-max-conns":              "10000",
		"grpc-handshake-timeout":      (10 * time.Second).String(),
		"grpc-max-conn-idle":          (10 * time.Minute).String(),
		"read-page-size":              "1000",
		"read-max-page-size":          "10000",
		"read-max-page-bytes":         "3145728",
	} {
		fl := cmd.Flags().Lookup(flag)
		if fl == nil {
			t.Errorf("no flag --%s", flag)
			continue
		}
		if fl.DefValue != want {
			t.Errorf("--%s default %q, want %q", flag, fl.DefValue, want)
		}
	}
}

// The Kafka listener's flags: none by default; the advertised address is
// --kafka-advertise or else --kafka-addr, and like gRPC's it must name a
// reachable host.
func TestFlags_KafkaAddressAndAdvertise(t *testing.T) {
	cmd := newRootCommand()
	for _, flag := range []string{"kafka-addr", "kafka-advertise"} {
		if fl := cmd.Flags().Lookup(flag); fl == nil || fl.DefValue != "" {
			t.Errorf("--%s: %+v, want a flag with an empty default", flag, fl)
		}
	}
	for _, tc := range []struct {
		addr, advertise string
		want            string // the advertised address
		wantErr         string
	}{
		{"", "", "", ""},
		{"127.0.0.1:9092", "", "127.0.0.1:9092", ""},
		{"0.0.0.0:9092", "broker-1.example:9092", "broker-1.example:9092", ""},
		{"localhost:9092", "", "localhost:9092", ""},
		{"127.0.0.1:0", "", "127.0.0.1:0", ""}, // run advertises the port the listener got
		{"0.0.0.0:0", "", "", `--kafka-addr "0.0.0.0:0": must name a reachable host, not a wildcard; give --kafka-advertise`},
		{"0.0.0.0:9092", "", "", `--kafka-addr "0.0.0.0:9092": must name a reachable host, not a wildcard; give --kafka-advertise`},
		{":9092", "", "", `--kafka-addr ":9092": must name a reachable host`},
		{"127.0.0.1", "", "", `--kafka-addr "127.0.0.1"`},
		{"127.0.0.1:99999", "", "", `--kafka-addr "127.0.0.1:99999": port "99999" is not in 0..65535`},
		{"0.0.0.0:9092", "[::]:9092", "", `--kafka-advertise "[::]:9092": must name a reachable host`},
		{"", "127.0.0.1:9092", "", `--kafka-advertise "127.0.0.1:9092" needs --kafka-addr`},
	} {
		got, err := options{kafkaAddr: tc.addr, kafkaAdvertise: tc.advertise}.kafkaAdvertised()
		switch {
		case tc.wantErr == "" && (err != nil || got != tc.want):
			t.Errorf("--kafka-addr %q --kafka-advertise %q: %q, %v; want %q", tc.addr, tc.advertise, got, err, tc.want)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("--kafka-addr %q --kafka-advertise %q: %q, %v; want an error containing %q", tc.addr, tc.advertise, got, err, tc.wantErr)
		}
	}
	// cohortd refuses the flags before it binds a port.
	cmd = newRootCommand()
	var out strings.Builder
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"--data-dir", t.TempDir(), "--raft-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--kafka-addr", "0.0.0.0:9092", "--insecure"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "give --kafka-advertise") {
		t.Errorf("cohortd --kafka-addr 0.0.0.0:9092: %v, want a refusal asking for --kafka-advertise", err)
	}
}

// TestSecurity_NonLoopbackNeedsTLSOrInsecure: a node refuses to serve a
// non-loopback gRPC, Raft or Kafka address in plaintext, with or without
// tokens, unless --insecure is given; on loopback the open mode of `make
// run` stays; a half-given TLS set is refused naming what is missing.
func TestSecurity_NonLoopbackNeedsTLSOrInsecure(t *testing.T) {
	loop := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9001}
	wide := &net.TCPAddr{IP: net.IPv4zero, Port: 9001}
	dir := t.TempDir()
	ca, err := auth.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Save(dir); err != nil {
		t.Fatal(err)
	}
	files, err := ca.IssueFiles(dir, "n1", auth.Principal{Role: auth.RoleNode, Name: "n1"}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	base := func() options {
		o := options{raft: raftnode.DefaultConfig()}
		o.raft.RaftBind = "127.0.0.1:7001"
		return o
	}
	cases := []struct {
		name    string
		grpc    net.Addr
		edit    func(*options)
		wantErr string // "" for a start
	}{
		{"loopback, open", loop, func(*options) {}, ""},
		{"gRPC on all interfaces", wide, func(*options) {}, "refusing to serve gRPC 0.0.0.0:9001 without TLS"},
		{"Raft on all interfaces", loop, func(o *options) { o.raft.RaftBind = "0.0.0.0:7001" }, "refusing to serve Raft 0.0.0.0:7001 without TLS"},
		{"Raft advertised off loopback", loop, func(o *options) { o.raft.RaftAdvertise = "10.0.0.5:7001" }, "Raft 10.0.0.5:7001"},
		{"tokens without TLS", wide, func(o *options) { o.adminToken = "0123456789abcdef0123" }, "without TLS"},
		{"--insecure", wide, func(o *options) { o.insecure = true }, ""},
		{"TLS", wide, func(o *options) { o.tls = files }, ""},
		{"TLS without a key", wide, func(o *options) { o.tls = files; o.tls.Key = "" }, "--tls-cert, --tls-key and --tls-ca together"},
		{"a short admin token", loop, func(o *options) { o.adminToken = "short" }, "at least 16"},
		{"Kafka on loopback", loop, func(o *options) { o.kafkaAddr = "127.0.0.1:9092" }, ""},
		{"Kafka on all interfaces", loop, func(o *options) { o.kafkaAddr = "0.0.0.0:9092" }, "refusing to serve Kafka 0.0.0.0:9092 without TLS"},
		{"Kafka on all interfaces, --insecure", loop, func(o *options) { o.kafkaAddr = "0.0.0.0:9092"; o.insecure = true }, ""},
		{"Kafka on all interfaces, TLS", loop, func(o *options) { o.kafkaAddr = "0.0.0.0:9092"; o.tls = files }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := base()
			tc.edit(&o)
			sec, err := o.security(tc.grpc)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if (o.tls.Enabled() || o.adminToken != "") != sec.Enforced() {
					t.Fatalf("enforced=%v with tls=%v token=%q", sec.Enforced(), o.tls.Enabled(), o.adminToken)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}
