package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestExpandJoin(t *testing.T) {
	records := map[string][]string{
		"cohort-peers.default.svc": {"10.0.0.3", "10.0.0.1", "10.0.0.2"},
		"cohort-1":                 {"10.0.0.1"},
		"dual":                     {"10.0.0.9", "fd00::9"},
		"empty":                    {},
	}
	lookup := func(_ context.Context, host string) ([]string, error) {
		ips, ok := records[host]
		if !ok {
			return nil, fmt.Errorf("lookup %s: no such host", host)
		}
		return ips, nil
	}
	tests := []struct {
		name         string
		join         []string
		wantAddrs    []string
		wantProblems int
	}{
		{"IP literals pass through", []string{"127.0.0.1:9001", "[::1]:9002"}, []string{"127.0.0.1:9001", "[::1]:9002"}, 0},
		{"a headless name becomes every record, sorted",
			[]string{"cohort-peers.default.svc:9000"},
			[]string{"10.0.0.1:9000", "10.0.0.2:9000", "10.0.0.3:9000"}, 0},
		{"duplicates across entries are dropped",
			[]string{"cohort-1:9000", "cohort-peers.default.svc:9000", "10.0.0.2:9000"},
			[]string{"10.0.0.1:9000", "10.0.0.2:9000", "10.0.0.3:9000"}, 0},
		{"IPv6 records are joined with brackets", []string{"dual:9000"}, []string{"10.0.0.9:9000", "[fd00::9]:9000"}, 0},
		{"an unresolvable name is a problem, the rest still count",
			[]string{"not-yet:9000", "cohort-1:9000"}, []string{"10.0.0.1:9000"}, 1},
		{"a name without records is a problem", []string{"empty:9000"}, nil, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addrs, problems := expandJoin(context.Background(), lookup, tc.join)
			if !slices.Equal(addrs, tc.wantAddrs) {
				t.Errorf("addresses %v, want %v", addrs, tc.wantAddrs)
			}
			if len(problems) != tc.wantProblems {
				t.Errorf("problems %q, want %d", problems, tc.wantProblems)
			}
		})
	}
}

func TestExpandJoin_LookupIsBoundedByContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	lookup := func(ctx context.Context, host string) ([]string, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	addrs, problems := expandJoin(ctx, lookup, []string{"cohort-peers:9000"})
	if len(addrs) != 0 || len(problems) != 1 || !strings.Contains(problems[0], context.Canceled.Error()) {
		t.Fatalf("addresses %v problems %q, want none and one cancelled lookup", addrs, problems)
	}
}

func TestConfig_Validate(t *testing.T) {
	tests := []struct {
		name    string
		mod     func(c *Config)
		wantErr string
	}{
		{"defaults are valid", func(*Config) {}, ""},
		{"bootstrap and expect", func(c *Config) { c.Bootstrap = true; c.BootstrapExpect = 3 }, "mutually exclusive"},
		{"expect needs join", func(c *Config) { c.BootstrapExpect = 3; c.GRPCAdvertise = "127.0.0.1:9000" }, "needs join"},
		{"expect needs an advertised address", func(c *Config) { c.BootstrapExpect = 3; c.Join = []string{"127.0.0.1:9001"} }, "needs a gRPC advertise address"},
		{"bad join address", func(c *Config) { c.Join = []string{"no-port"} }, `join address "no-port"`},
		{"wildcard advertise", func(c *Config) { c.GRPCAdvertise = "0.0.0.0:9000" }, "wildcard"},
		{"kafka advertise", func(c *Config) { c.KafkaAdvertise = "127.0.0.1:9092" }, ""},
		{"wildcard kafka advertise", func(c *Config) { c.KafkaAdvertise = "[::]:9092" }, `Kafka advertise address "[::]:9092"`},
		{"kafka advertise without a port", func(c *Config) { c.KafkaAdvertise = "broker-1" }, `Kafka advertise address "broker-1"`},
		{"zero poll interval is not a default", func(c *Config) { c.PollInterval = 0 }, "poll interval 0s"},
		{"zero promote lag", func(c *Config) { c.PromoteMaxLag = 0 }, "promote max lag 0"},
		{"autopilot interval", func(c *Config) { c.Autopilot.Interval = 0 }, "autopilot"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mod(&c)
			err := c.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Validate: %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}
