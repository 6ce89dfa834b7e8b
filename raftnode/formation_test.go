package raftnode

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
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

// Test_MultiNode_BootstrapExpect_JoinByHostName forms a cluster whose join
// addresses are host names (localhost), as a headless service's are, so
// formation goes through the resolver rather than IP literals.
func Test_MultiNode_BootstrapExpect_JoinByHostName(t *testing.T) {
	c := newTestCluster(t, 3, func(_ int, cfg *Config) {
		named := make([]string, len(cfg.Join))
		for i, j := range cfg.Join {
			named[i] = strings.Replace(j, "127.0.0.1", "localhost", 1)
		}
		cfg.Join = named
	})
	c.leader()
	for _, tn := range c.nodes {
		waitFor(t, 10*time.Second, tn.node.ID()+" sees three voters", func() (bool, string) {
			got := voters(t, tn.node)
			return slices.Equal(got, []string{"n1", "n2", "n3"}), fmt.Sprintf("voters %v", got)
		})
	}
}
