package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/cohortlabs/cohort/auth"
	"github.com/cohortlabs/cohort/client"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/flowcontrol"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
)

// globals are the flags every command has.
type globals struct {
	endpoints []string
	output    string
	token     string
	tls       auth.Files
	creds     client.Credentials
	timeout   time.Duration
	maxRecv   int
}

func newRootCommand() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "cohortctl",
		Short: "Operate a Cohort cluster: membership, health, snapshots, groups, offsets, topics",
		Long: `cohortctl operates a Cohort cluster over gRPC.

Every command takes --endpoints (or COHORT_ENDPOINTS): gRPC addresses of one
or more nodes. Any node answers; followers forward to the leader. Output is a
table by default, JSON with -o json.

A cluster with TLS (cohortd --tls-*) is reached with --tls-ca and, for
mutual TLS, the caller's certificate (--tls-cert/--tls-key: an admin
certificate for cluster, topic and group administration). A cluster that
accepts bearer tokens takes --token (or COHORT_TOKEN). Every flag has a
COHORT_<FLAG> variable (COHORT_TLS_CA, ...).`,
		Example: `  cohortctl --endpoints 127.0.0.1:9001 cluster health
  COHORT_ENDPOINTS=127.0.0.1:9001,127.0.0.1:9002 cohortctl cluster peers
  cohortctl groups describe orders --members -o json`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return g.complete(cmd)
		},
	}
	pf := root.PersistentFlags()
	pf.StringSliceVar(&g.endpoints, "endpoints", nil, "gRPC addresses of cluster nodes, comma-separated (env COHORT_ENDPOINTS; default 127.0.0.1:9001)")
	pf.StringVarP(&g.output, "output", "o", "table", "output format: table or json")
	pf.StringVar(&g.token, "token", "", "bearer token, when the cluster authorizes by token (env COHORT_TOKEN; COHORT_ADMIN_TOKEN and --admin-token also work)")
	pf.StringVar(&g.token, "admin-token", "", "the same as --token")
	pf.StringVar(&g.tls.Cert, "tls-cert", "", "client certificate (PEM) for mutual TLS (env COHORT_TLS_CERT)")
	pf.StringVar(&g.tls.Key, "tls-key", "", "key of --tls-cert (env COHORT_TLS_KEY)")
	pf.StringVar(&g.tls.CA, "tls-ca", "", "CA bundle (PEM) that signs the nodes' certificates: speak TLS (env COHORT_TLS_CA)")
	pf.DurationVar(&g.timeout, "timeout", 10*time.Second, "bound on each command's calls")
	pf.IntVar(&g.maxRecv, "max-recv-msg-size", client.MaxRecvMsgSize, "largest answer accepted, in bytes (a node sends at most --grpc-max-send-bytes, 1 GiB by default)")
	root.AddCommand(newClusterCommand(g), newSnapshotCommand(g), newGroupsCommand(g), newOffsetsCommand(g), newTopicsCommand(g))
	root.AddCommand(newCertsCommand())
	return root
}

func (g *globals) complete(cmd *cobra.Command) error {
	if !cmd.Flags().Changed("endpoints") {
		if env := os.Getenv("COHORT_ENDPOINTS"); env != "" {
			g.endpoints = splitList(env)
		}
	}
	if len(g.endpoints) == 0 {
		g.endpoints = []string{"127.0.0.1:9001"}
	}
	if !cmd.Flags().Changed("admin-token") && !cmd.Flags().Changed("token") {
		g.token = cmp.Or(os.Getenv("COHORT_TOKEN"), os.Getenv("COHORT_ADMIN_TOKEN"))
	}
	for _, f := range []struct {
		flag string
		v    *string
	}{{"tls-cert", &g.tls.Cert}, {"tls-key", &g.tls.Key}, {"tls-ca", &g.tls.CA}} {
		if !cmd.Flags().Changed(f.flag) {
			*f.v = os.Getenv("COHORT_" + strings.ToUpper(strings.ReplaceAll(f.flag, "-", "_")))
		}
	}
	g.creds = client.Credentials{Token: g.token}
	if g.tls.Enabled() {
		tc, err := client.LoadTLS(g.tls.Cert, g.tls.Key, g.tls.CA)
		if err != nil {
			return err
		}
		g.creds.TLS = tc
	}
	switch g.output {
	case "table", "json":
	default:
		return fmt.Errorf("output %q: want table or json", g.output)
	}
	if g.timeout <= 0 {
		return fmt.Errorf("timeout %s: must be positive", g.timeout)
	}
	if g.maxRecv < 1<<20 {
		return fmt.Errorf("max recv msg size %d: must be at least 1 MiB (%d)", g.maxRecv, 1<<20)
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// ctx returns the command's context bounded by --timeout.
func (g *globals) ctx(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return context.WithTimeout(cmd.Context(), g.timeout)
}

// dial connects to one endpoint (no I/O until the first call) with the
// credentials of the flags.
func (g *globals) dial(addr string) (*grpc.ClientConn, error) {
	opts := append(g.creds.DialOptions(), flowcontrol.DialOptions()...)
	conn, err := grpc.NewClient(addr, append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(g.maxRecv)))...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return conn, nil
}

// withEndpoint calls fn with a connection to each endpoint in turn until
// one answers. An answer that is an application error ends the attempts;
// when every endpoint is unavailable (no leader during an election, a node
// down, the leader just died), it tries them all again with a growing pause
// until --timeout. Every cohortctl operation is safe to repeat.
func (g *globals) withEndpoint(ctx context.Context, fn func(conn *grpc.ClientConn) error) error {
	pause := 100 * time.Millisecond
	for {
		var errs []error
		for _, addr := range g.endpoints {
			conn, err := g.dial(addr)
			if err != nil {
				return err
			}
			err = fn(conn)
			conn.Close()
			if err == nil {
				return nil
			}
			if !retryable(err) || ctx.Err() != nil {
				return err
			}
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
		}
		err := errors.Join(errs...)
		if len(errs) > 1 {
			err = fmt.Errorf("no endpoint answered: %w", err)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
}

func cluster(conn *grpc.ClientConn) cohortv1.ClusterServiceClient {
	return cohortv1.NewClusterServiceClient(conn)
}

func (g *globals) out(cmd *cobra.Command) io.Writer { return cmd.OutOrStdout() }
