package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cohortlabs/cohort/auth"
	"github.com/cohortlabs/cohort/client"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
)

// newLeaveCommand is `cohortd leave`: ask the cluster to remove this node.
// The running node sees its removal and stops itself.
func newLeaveCommand() *cobra.Command {
	var nodeID, dataDir, grpcAddr, token string
	var tlsFiles auth.Files
	var force bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "leave",
		Short: "Remove this node from its cluster; the running node then stops itself",
		Long: `leave asks the cluster (through this node's gRPC address, which forwards to
the leader) to remove this node from the Raft configuration. A leader hands
leadership over first. The running cohortd notices the removal and exits.
The node ID is read from --data-dir unless --node-id is given. The same
safety rules as 'cohortctl cluster remove' apply: a removal that leaves
fewer healthy voters than a quorum needs --force.`,
		Example: `  cohortd leave --data-dir /var/lib/cohort --grpc-addr 127.0.0.1:9001
  COHORT_ADMIN_TOKEN=3f6c0d1e9a7b2c4d cohortd leave --data-dir ./data/node3 --grpc-addr 127.0.0.1:9003`,
		Args: cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			return applyEnv(cmd.Flags(), os.Getenv)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if nodeID == "" {
				b, err := os.ReadFile(filepath.Join(dataDir, "node-id"))
				if err != nil {
					return fmt.Errorf("read the node ID from %s (or pass --node-id): %w", dataDir, err)
				}
				nodeID = strings.TrimSpace(string(b))
			}
			creds := client.Credentials{Token: token}
			if tlsFiles.Enabled() {
				tc, err := client.LoadTLS(tlsFiles.Cert, tlsFiles.Key, tlsFiles.CA)
				if err != nil {
					return err
				}
				creds.TLS = tc
			}
			conn, err := grpc.NewClient(grpcAddr, creds.DialOptions()...)
			if err != nil {
				return fmt.Errorf("dial %s: %w", grpcAddr, err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			resp, err := cohortv1.NewClusterServiceClient(conn).RemoveServer(ctx, &cohortv1.RemoveServerRequest{NodeId: nodeID, Force: force})
			if err != nil {
				return fmt.Errorf("remove %s from the cluster via %s: %w", nodeID, grpcAddr, err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), resp.GetMessage())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&nodeID, "node-id", "", "the node to remove (default: the ID stored in --data-dir)")
	f.StringVar(&dataDir, "data-dir", "./data", "the node's data dir, to read its ID from")
	f.StringVar(&grpcAddr, "grpc-addr", "127.0.0.1:9001", "gRPC address of this node (or any node of the cluster)")
	f.StringVar(&token, "admin-token", "", "a bearer token that may remove the node (admin, or this node's own), when the cluster authorizes by token")
	f.StringVar(&tlsFiles.Cert, "tls-cert", "", "certificate to call with over TLS: the node's own (a node may remove itself) or an admin's")
	f.StringVar(&tlsFiles.Key, "tls-key", "", "key of --tls-cert")
	f.StringVar(&tlsFiles.CA, "tls-ca", "", "CA bundle that signs the nodes' certificates")
	f.BoolVar(&force, "force", false, "remove even when fewer healthy voters than a quorum would remain")
	f.DurationVar(&timeout, "timeout", 30*time.Second, "bound on the removal")
	return cmd
}
