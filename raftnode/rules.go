package raftnode

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cohortlabs/cohort/fsm"
	"github.com/hashicorp/raft"
)

// Command rules across a rolling upgrade (fsm/rules.go explains the
// rules): the node stamps the commands it proposes with the oldest rules
// any server of the Raft configuration applies, as the node registry says
// (a server that never said applies rules 1), and stops applying, rather
// than diverge, at an entry under rules newer than its binary knows.

// rulesRefreshInterval is how often the node recomputes the rules it
// writes under, for configuration changes; a server's registration,
// applied through this node, recomputes them at once.
const rulesRefreshInterval = 250 * time.Millisecond

// ErrHalted: the node met a log entry it cannot apply and stopped applying.
var ErrHalted = errors.New("halted")

// CommandRules is the command rules this node writes entries under now.
func (n *Node) CommandRules() uint32 { return n.rules.Load() }

// MaxCommandRules is the newest command rules this node applies (what it
// registers as its max_command_version).
func (n *Node) MaxCommandRules() uint32 { return n.fsm.MaxRules() }

// refreshRules recomputes CommandRules from the configuration and the
// node registry.
func (n *Node) refreshRules() {
	n.rulesMu.Lock()
	defer n.rulesMu.Unlock()
	c, err := n.Configuration()
	if err != nil || len(c.Servers) == 0 {
		return
	}
	n.rules.Store(clusterRules(n.fsm.MaxRules(), c, n.fsm.Nodes()))
}

// clusterRules is the oldest rules any server of c applies, at most own.
func clusterRules(own uint32, c raft.Configuration, registry []fsm.Node) uint32 {
	stated := map[string]uint32{}
	for _, node := range registry {
		stated[node.ID] = node.MaxCommandVersion
	}
	v := own
	for _, s := range c.Servers {
		r := stated[string(s.ID)]
		if r == 0 {
			r = 1 // a binary older than the registry field applies rules 1
		}
		v = min(v, r)
	}
	return v
}

func (n *Node) runRules() {
	defer n.bgWG.Done()
	t := time.NewTicker(rulesRefreshInterval)
	defer t.Stop()
	for {
		n.refreshRules()
		select {
		case <-n.bg.Done():
			return
		case <-t.C:
		}
	}
}

// halter stops the node's applying at an entry it cannot apply.
type halter struct {
	err    atomic.Pointer[error]
	onHalt func(error)
	stop   <-chan struct{} // closed when the node shuts down
}

// halt records err, tells onHalt (which may end the process), and blocks
// the applying goroutine until the node shuts down: no later entry is
// applied and no snapshot taken, so nothing is lost (the entries stay in
// the log) and this replica never differs from the others.
func (h *halter) halt(err error) {
	err = fmt.Errorf("%w: %w", ErrHalted, err)
	h.err.Store(&err)
	if h.onHalt != nil {
		h.onHalt(err)
	}
	<-h.stop
}

// halted is the error the node halted on, nil if it did not.
func (h *halter) halted() error {
	if p := h.err.Load(); p != nil {
		return *p
	}
	return nil
}
