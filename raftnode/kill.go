package raftnode

// Kill stops the node the way a crash would look to the rest of the
// cluster: no leadership transfer. The data dir stays as it is, for a
// restart. Failure tests use it; an operator's node uses Shutdown.
func (n *Node) Kill() error { return n.kill() }
