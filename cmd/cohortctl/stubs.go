package main

import "github.com/spf13/cobra"

func newSnapshotCommand(*globals) *cobra.Command {
	return &cobra.Command{Use: "snapshot", Short: "Save, restore and inspect snapshots"}
}
func newGroupsCommand(*globals) *cobra.Command {
	return &cobra.Command{Use: "groups", Short: "List, describe and delete consumer groups"}
}
func newOffsetsCommand(*globals) *cobra.Command {
	return &cobra.Command{Use: "offsets", Short: "Read and reset committed offsets"}
}
func newTopicsCommand(*globals) *cobra.Command {
	return &cobra.Command{Use: "topics", Short: "Create, list, delete topics and add partitions"}
}
