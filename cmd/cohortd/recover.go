package main

import (
	"fmt"
	"os"

	"github.com/cohortlabs/cohort/raftnode"
	"github.com/spf13/cobra"
)

// newRecoverCommand is `cohortd recover`: the way out of a lost quorum.
func newRecoverCommand() *cobra.Command {
	var dataDir, raftAddr string
	cmd := &cobra.Command{
		Use:   "recover",
		Short: "Make a stopped node the only voter of its cluster (after losing quorum for good)",
		Long: `recover rewrites the Raft configuration in a STOPPED node's data dir so that
this node is the cluster's only voter. Use it only when a majority of the
voters is gone for good and the cluster cannot elect a leader: start cohortd
on the data dir afterwards (same --raft-addr) and it elects itself with every
entry it has; then add fresh nodes with --join. Entries that only the lost
nodes had are lost. Make sure the lost nodes never come back with their old
data dirs: wipe them first. docs/operations.md has the whole procedure.`,
		Example: `  systemctl stop cohortd
  cohortd recover --data-dir /var/lib/cohort --raft-addr 10.0.0.1:7000
  systemctl start cohortd`,
		Args: cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			return applyEnv(cmd.Flags(), os.Getenv)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(cmd.ErrOrStderr(), "warn", "text")
			if err != nil {
				return err
			}
			id, err := raftnode.RecoverAsSingleNode(dataDir, raftAddr, log)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "node %s in %s is now the only voter, at %s: start cohortd on this data dir, then grow the cluster with --join\n", id, dataDir, raftAddr)
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "./data", "the stopped node's data dir")
	cmd.Flags().StringVar(&raftAddr, "raft-addr", "127.0.0.1:7001", "the Raft address the node will advertise when it runs again")
	return cmd
}
