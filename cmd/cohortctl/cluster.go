package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
)

func newClusterCommand(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "cluster",
		Short: "Cluster health, status and Raft membership",
		Long: `Cluster health, status and Raft membership.

Membership changes are safe by default: new servers enter as non-voters and
are promoted only once caught up; promote refuses a lagging server; a removal
or demotion that would leave fewer healthy voters than a quorum needs
--force; the last voter cannot be removed; removing the leader moves
leadership first. Every change is idempotent.`,
	}
	c.AddCommand(
		clusterHealthCommand(g), clusterStatusCommand(g), clusterPeersCommand(g),
		clusterAddCommand(g, false), clusterAddCommand(g, true),
		clusterPromoteCommand(g), clusterDemoteCommand(g), clusterRemoveCommand(g), clusterTransferCommand(g),
	)
	return c
}

type endpointHealth struct {
	Endpoint string          `json:"endpoint"`
	Healthy  bool            `json:"healthy"`
	Error    string          `json:"error,omitempty"`
	Health   json.RawMessage `json:"health,omitempty"`
}

func clusterHealthCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "health",
		Short: "Check that every endpoint answers and knows a leader",
		Long: `Check every endpoint: healthy when the node answers and knows a Raft
leader. Exits 0 only when every endpoint is healthy, so it serves as a
container health check. Needs no admin token.`,
		Example: `  cohortctl --endpoints 127.0.0.1:9001 cluster health
  COHORT_ENDPOINTS=127.0.0.1:9001,127.0.0.1:9002,127.0.0.1:9003 cohortctl cluster health -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := g.ctx(cmd)
			defer cancel()
			var results []endpointHealth
			var rows [][]string
			var bad []string
			for _, addr := range g.endpoints {
				r := endpointHealth{Endpoint: addr}
				h, err := g.health(ctx, addr)
				switch {
				case err != nil:
					r.Error = describeError(err)
					rows = append(rows, []string{addr, "-", "-", "-", "false", r.Error})
				default:
					r.Healthy, r.Error, r.Health = h.GetHealthy(), h.GetReason(), json.RawMessage(protoJSON(h))
					rows = append(rows, []string{addr, h.GetNodeId(), stateName(h.GetState()), dash(h.GetLeaderId()),
						strconv.FormatBool(h.GetHealthy()), h.GetReason()})
				}
				if !r.Healthy {
					bad = append(bad, fmt.Sprintf("%s: %s", addr, r.Error))
				}
				results = append(results, r)
			}
			var err error
			if g.output == "json" {
				err = printJSON(g.out(cmd), results)
			} else {
				err = table(g.out(cmd), []string{"ENDPOINT", "NODE ID", "STATE", "LEADER", "HEALTHY", "REASON"}, rows)
			}
			if err != nil {
				return err
			}
			if len(bad) > 0 {
				return fmt.Errorf("unhealthy: %s", strings.Join(bad, "; "))
			}
			return nil
		},
	}
}

func (g *globals) health(ctx context.Context, addr string) (*cohortv1.HealthResponse, error) {
	conn, err := g.dial(addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return cluster(conn).Health(ctx, &cohortv1.HealthRequest{})
}

func (g *globals) status(ctx context.Context) (*cohortv1.StatusResponse, error) {
	var resp *cohortv1.StatusResponse
	err := g.withEndpoint(ctx, func(conn *grpc.ClientConn) error {
		var err error
		resp, err = cluster(conn).Status(ctx, &cohortv1.StatusRequest{})
		return err
	})
	return resp, err
}

func clusterStatusCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the leader, term, indexes, every server and autopilot",
		Example: `  cohortctl cluster status
  cohortctl cluster status -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := g.ctx(cmd)
			defer cancel()
			st, err := g.status(ctx)
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(g.out(cmd), st)
			}
			w := g.out(cmd)
			fmt.Fprintf(w, "Leader:        %s (raft %s, gRPC %s)\n", st.GetLeaderId(), st.GetLeaderRaftAddress(), dash(st.GetLeaderGrpcAddress()))
			fmt.Fprintf(w, "Term:          %d\n", st.GetTerm())
			fmt.Fprintf(w, "Commit index:  %d\n", st.GetCommitIndex())
			fmt.Fprintf(w, "Applied index: %d\n", st.GetAppliedIndex())
			fmt.Fprintf(w, "Last index:    %d\n", st.GetLastIndex())
			fmt.Fprintf(w, "Promote limit: %d entries of lag\n", st.GetPromoteMaxLag())
			ap := st.GetAutopilot()
			if ap.GetEnabled() {
				fmt.Fprintf(w, "Autopilot:     enabled, healthy=%t, failure tolerance %d, cleanup dead servers=%t after %s, stabilization %s, min quorum %d\n",
					ap.GetHealthy(), ap.GetFailureTolerance(), ap.GetCleanupDeadServers(),
					time.Duration(ap.GetDeadServerThresholdMs())*time.Millisecond,
					time.Duration(ap.GetServerStabilizationTimeMs())*time.Millisecond, ap.GetMinQuorum())
			} else {
				fmt.Fprintf(w, "Autopilot:     disabled\n")
			}
			fmt.Fprintln(w)
			rows := make([][]string, 0, len(st.GetServers()))
			for _, s := range st.GetServers() {
				rows = append(rows, []string{s.GetNodeId(), s.GetRaftAddress(), dash(s.GetGrpcAddress()), serverState(s),
					strconv.FormatBool(s.GetVoter()), lastContact(s.GetLastContactMs()), strconv.FormatUint(s.GetLastIndex(), 10),
					strconv.FormatUint(s.GetLag(), 10), strconv.FormatBool(s.GetHealthy()), dash(s.GetAutopilotState()), s.GetReason()})
			}
			return table(w, []string{"NODE ID", "ADDRESS", "GRPC ADDRESS", "STATE", "VOTER", "LAST CONTACT", "LAST INDEX", "LAG", "HEALTHY", "AUTOPILOT", "REASON"}, rows)
		},
	}
}

func clusterPeersCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "peers",
		Short:   "List the servers of the Raft configuration",
		Example: `  cohortctl --endpoints 127.0.0.1:9001 cluster peers`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := g.ctx(cmd)
			defer cancel()
			st, err := g.status(ctx)
			if err != nil {
				return err
			}
			if g.output == "json" {
				servers := make([]json.RawMessage, 0, len(st.GetServers()))
				for _, s := range st.GetServers() {
					servers = append(servers, protoJSON(s))
				}
				return printJSON(g.out(cmd), servers)
			}
			rows := make([][]string, 0, len(st.GetServers()))
			for _, s := range st.GetServers() {
				rows = append(rows, []string{s.GetNodeId(), s.GetRaftAddress(), serverState(s), strconv.FormatBool(s.GetVoter()),
					strconv.FormatUint(s.GetLastIndex(), 10), strconv.FormatUint(s.GetLag(), 10), strconv.FormatBool(s.GetHealthy())})
			}
			return table(g.out(cmd), []string{"NODE ID", "ADDRESS", "STATE", "VOTER", "LAST INDEX", "LAG", "HEALTHY"}, rows)
		},
	}
}

// changeResult is what every membership command prints.
type changeResult struct {
	Operation string `json:"operation"`
	NodeID    string `json:"node_id,omitempty"`
	Changed   bool   `json:"changed"`
	Message   string `json:"message"`
}

func (g *globals) printChange(cmd *cobra.Command, r changeResult) error {
	if g.output == "json" {
		return printJSON(g.out(cmd), r)
	}
	_, err := fmt.Fprintln(g.out(cmd), r.Message)
	return err
}

func clusterAddCommand(g *globals, voter bool) *cobra.Command {
	var raftAddr, grpcAddr string
	use, short := "add-nonvoter NODE_ID", "Add a server as a non-voter (replicates, does not vote)"
	example := `  cohortctl cluster add-nonvoter n4 --raft-addr 10.0.0.4:7000 --grpc-addr 10.0.0.4:9000`
	if voter {
		use, short = "add-voter NODE_ID", "Add a server as a non-voter, wait until it caught up, then promote it"
		example = `  cohortctl cluster add-voter n4 --raft-addr 10.0.0.4:7000 --grpc-addr 10.0.0.4:9000 --timeout 2m`
	}
	c := &cobra.Command{
		Use: use, Short: short, Example: example, Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if raftAddr == "" {
				return errors.New("--raft-addr is required")
			}
			ctx, cancel := g.ctx(cmd)
			defer cancel()
			r := changeResult{NodeID: args[0]}
			err := g.withEndpoint(ctx, func(conn *grpc.ClientConn) error {
				if voter {
					r.Operation = "add-voter"
					resp, err := cluster(conn).AddVoter(ctx, &cohortv1.AddVoterRequest{NodeId: args[0], RaftAddress: raftAddr, GrpcAddress: grpcAddr})
					r.Changed, r.Message = resp.GetChanged(), resp.GetMessage()
					return err
				}
				r.Operation = "add-nonvoter"
				resp, err := cluster(conn).AddNonvoter(ctx, &cohortv1.AddNonvoterRequest{NodeId: args[0], RaftAddress: raftAddr, GrpcAddress: grpcAddr})
				r.Changed, r.Message = resp.GetChanged(), resp.GetMessage()
				return err
			})
			if err != nil {
				return err
			}
			return g.printChange(cmd, r)
		},
	}
	c.Flags().StringVar(&raftAddr, "raft-addr", "", "the server's Raft address (required)")
	c.Flags().StringVar(&grpcAddr, "grpc-addr", "", "the server's gRPC address (recorded in the node registry)")
	return c
}

func clusterPromoteCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "promote NODE_ID",
		Short: "Make a caught-up non-voter a voter",
		Long: `Make a non-voter a voter. Refused while the server's log lags the leader's
by more than the limit (cohortd --promote-max-lag; cluster status shows it),
with the lag in the message.`,
		Example: `  cohortctl cluster promote n4`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := g.ctx(cmd)
			defer cancel()
			r := changeResult{Operation: "promote", NodeID: args[0]}
			err := g.withEndpoint(ctx, func(conn *grpc.ClientConn) error {
				resp, err := cluster(conn).Promote(ctx, &cohortv1.PromoteRequest{NodeId: args[0]})
				r.Changed, r.Message = resp.GetChanged(), resp.GetMessage()
				return err
			})
			if err != nil {
				return err
			}
			return g.printChange(cmd, r)
		},
	}
}

func clusterDemoteCommand(g *globals) *cobra.Command {
	var force bool
	c := &cobra.Command{
		Use:   "demote NODE_ID",
		Short: "Make a voter a non-voter",
		Long: `Make a voter a non-voter. Demoting the leader moves leadership first.
Refused without --force when fewer healthy voters than a quorum would remain.`,
		Example: `  cohortctl cluster demote n5`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := g.ctx(cmd)
			defer cancel()
			r := changeResult{Operation: "demote", NodeID: args[0]}
			err := g.withEndpoint(ctx, func(conn *grpc.ClientConn) error {
				resp, err := cluster(conn).Demote(ctx, &cohortv1.DemoteRequest{NodeId: args[0], Force: force})
				r.Changed, r.Message = resp.GetChanged(), resp.GetMessage()
				return err
			})
			if err != nil {
				return err
			}
			return g.printChange(cmd, r)
		},
	}
	c.Flags().BoolVar(&force, "force", false, "demote even when fewer healthy voters than a quorum would remain")
	return c
}

func clusterRemoveCommand(g *globals) *cobra.Command {
	var force bool
	c := &cobra.Command{
		Use:   "remove NODE_ID",
		Short: "Remove a server from the cluster",
		Long: `Remove a server from the Raft configuration; the removed node stops itself.
Removing the leader moves leadership first. Refused without --force when
fewer healthy voters than a quorum would remain; the last voter can never be
removed.`,
		Example: `  # replace a dead node: remove it, then start a fresh one with --join
  cohortctl cluster remove n3`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := g.ctx(cmd)
			defer cancel()
			r := changeResult{Operation: "remove", NodeID: args[0]}
			err := g.withEndpoint(ctx, func(conn *grpc.ClientConn) error {
				resp, err := cluster(conn).RemoveServer(ctx, &cohortv1.RemoveServerRequest{NodeId: args[0], Force: force})
				r.Changed, r.Message = resp.GetChanged(), resp.GetMessage()
				return err
			})
			if err != nil {
				return err
			}
			return g.printChange(cmd, r)
		},
	}
	c.Flags().BoolVar(&force, "force", false, "remove even when fewer healthy voters than a quorum would remain")
	return c
}

func clusterTransferCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "transfer-leader [NODE_ID]",
		Short: "Hand leadership to the named voter, or to the most up-to-date one",
		Example: `  cohortctl cluster transfer-leader n2
  cohortctl cluster transfer-leader      # any voter`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			target := ""
			if len(args) == 1 {
				target = args[0]
			}
			ctx, cancel := g.ctx(cmd)
			defer cancel()
			r := changeResult{Operation: "transfer-leader", NodeID: target}
			err := g.withEndpoint(ctx, func(conn *grpc.ClientConn) error {
				resp, err := cluster(conn).TransferLeadership(ctx, &cohortv1.TransferLeadershipRequest{NodeId: target})
				r.Changed, r.Message = resp.GetChanged(), resp.GetMessage()
				return err
			})
			if err != nil {
				return err
			}
			return g.printChange(cmd, r)
		},
	}
}

func stateName(s cohortv1.RaftState) string {
	switch s {
	case cohortv1.RaftState_RAFT_STATE_LEADER:
		return "leader"
	case cohortv1.RaftState_RAFT_STATE_FOLLOWER:
		return "follower"
	case cohortv1.RaftState_RAFT_STATE_CANDIDATE:
		return "candidate"
	case cohortv1.RaftState_RAFT_STATE_SHUTDOWN:
		return "shutdown"
	}
	return "unknown"
}

func serverState(s *cohortv1.ServerStatus) string {
	if s.GetLeader() {
		return "leader"
	}
	return stateName(s.GetState())
}

func lastContact(ms int64) string {
	if ms < 0 {
		return "-"
	}
	return (time.Duration(ms) * time.Millisecond).String()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
