package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/cohortlabs/cohort/raftnode"
	"github.com/hashicorp/raft"
)

// Defaults for Config.
const (
	// DefaultFormationTimeout bounds the wait for --bootstrap-expect peers.
	DefaultFormationTimeout = 10 * time.Minute
	// DefaultPollInterval paces formation polling, registration and join
	// retries, and removal detection.
	DefaultPollInterval = 500 * time.Millisecond
	// DefaultPromoteMaxLag is the largest log lag (entries) at which a
	// non-voter is promoted: Consul's MaxTrailingLogs default.
	DefaultPromoteMaxLag = 250
	// DefaultHealthyLastContact is how long a server may go without
	// hearing from the leader and still count as healthy: four times the
	// default heartbeat timeout, so one slow heartbeat is not a failure.
	DefaultHealthyLastContact = 2 * time.Second
)

// Named waits of the cluster operations.
const (
	// peerCallTimeout bounds one NodeInfo or RegisterNode call to a peer,
	// and one DNS lookup of a join address.
	peerCallTimeout = 2 * time.Second
	// joinCallTimeout bounds one AddNonvoter, Promote or Status call to a
	// peer (it may be forwarded to the leader, and Status probes every
	// server).
	joinCallTimeout = 2 * peerCallTimeout
	// probeTimeout bounds the leader's NodeInfo call to one server.
	probeTimeout = time.Second
	// leaderWait bounds the wait for a new leader after a transfer.
	leaderWait = 10 * time.Second
	// leaderPoll paces that wait.
	leaderPoll = 20 * time.Millisecond
	// addVoterPoll paces AddVoter's promotion attempts while the new
	// server catches up.
	addVoterPoll = 200 * time.Millisecond
	// voterLossSettle is how long a refusal for lack of healthy voters is
	// re-checked before it is final. Right after an election or a
	// leadership transfer (removing the leader hands leadership over
	// first, and the caller retries on the new leader) the other voters
	// have not yet heard from the new leader in its term, and would look
	// unhealthy for a moment.
	voterLossSettle = 2 * time.Second
	// voterLossPoll paces the re-checks.
	voterLossPoll = 100 * time.Millisecond
	// waitingLogEvery is how often formation logs that it still waits.
	waitingLogEvery = 10 * time.Second
	// removeFailedTimeout bounds autopilot's removal of a failed server.
	removeFailedTimeout = 10 * time.Second
	// silentLeaderHeartbeats is how many heartbeat timeouts without
	// contact make a follower ask whether it was removed.
	silentLeaderHeartbeats = 4
)

// Config configures a Cluster. Start from DefaultConfig; New validates it.
type Config struct {
	// GRPCAdvertise is this node's gRPC address as other nodes and clients
	// reach it: what the node records in the replicated node registry and
	// answers in NodeInfo. Empty for a node without gRPC (tests): it then
	// neither registers nor forms through peers.
	GRPCAdvertise string
	// KafkaAdvertise is this node's Kafka listener address as clients
	// reach it, recorded in the node registry (under command rules 5 and
	// later) so that every node can name every broker. Empty: this node
	// has no Kafka listener.
	KafkaAdvertise string

	// Bootstrap makes a node with no Raft state bootstrap a one-node
	// cluster with itself as the only voter.
	Bootstrap bool
	// BootstrapExpect > 0 makes a node with no Raft state poll the Join
	// addresses until it knows BootstrapExpect distinct nodes (itself
	// included), none of them with Raft state, and then bootstrap them all
	// as voters. Every one of the nodes computes the same configuration.
	BootstrapExpect int
	// Join lists gRPC addresses of other nodes. Without BootstrapExpect
	// (and Bootstrap), a fresh node asks them to add it to their cluster.
	Join []string
	// JoinAsNonvoter keeps a node that joins through Join a non-voter
	// instead of asking for its promotion.
	JoinAsNonvoter bool

	// FormationTimeout bounds the BootstrapExpect wait.
	FormationTimeout time.Duration
	// PollInterval paces formation polling, registration and join retries
	// and removal detection.
	PollInterval time.Duration
	// PromoteMaxLag is the largest number of log entries a non-voter may
	// be behind the leader and still be promoted.
	PromoteMaxLag uint64
	// HealthyLastContact is how long a server may go without hearing from
	// the leader and still count as healthy.
	HealthyLastContact time.Duration
	// Autopilot configures the leader's autopilot; off unless Enabled.
	Autopilot AutopilotConfig

	// Logger receives the cluster operations' logs.
	Logger *slog.Logger
}

// DefaultConfig is the configuration cohortd starts from.
func DefaultConfig() Config {
	return Config{
		FormationTimeout:   DefaultFormationTimeout,
		PollInterval:       DefaultPollInterval,
		PromoteMaxLag:      DefaultPromoteMaxLag,
		HealthyLastContact: DefaultHealthyLastContact,
		Autopilot:          DefaultAutopilotConfig(),
		Logger:             slog.Default(),
	}
}

// Validate reports every invalid field, naming it and its value.
func (c Config) Validate() error {
	var errs []error
	if c.GRPCAdvertise != "" {
		if err := raftnode.ValidateAdvertise("gRPC advertise address", c.GRPCAdvertise); err != nil {
			errs = append(errs, err)
		}
	}
	if c.KafkaAdvertise != "" {
		if err := raftnode.ValidateAdvertise("Kafka advertise address", c.KafkaAdvertise); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Bootstrap && c.BootstrapExpect > 0 {
		errs = append(errs, fmt.Errorf("bootstrap and bootstrap-expect %d are mutually exclusive", c.BootstrapExpect))
	}
	if c.BootstrapExpect < 0 {
		errs = append(errs, fmt.Errorf("bootstrap-expect %d: must not be negative", c.BootstrapExpect))
	}
	if c.BootstrapExpect > 1 && len(c.Join) == 0 {
		errs = append(errs, fmt.Errorf("bootstrap-expect %d needs join addresses", c.BootstrapExpect))
	}
	if c.BootstrapExpect > 1 && c.GRPCAdvertise == "" {
		errs = append(errs, fmt.Errorf("bootstrap-expect %d needs a gRPC advertise address", c.BootstrapExpect))
	}
	for _, j := range c.Join {
		if _, _, err := net.SplitHostPort(j); err != nil {
			errs = append(errs, fmt.Errorf("join address %q: %w", j, err))
		}
	}
	if c.FormationTimeout <= 0 || c.PollInterval <= 0 {
		errs = append(errs, fmt.Errorf("formation timeout %s, poll interval %s: must be positive", c.FormationTimeout, c.PollInterval))
	}
	if c.PromoteMaxLag == 0 {
		errs = append(errs, errors.New("promote max lag 0: must be positive"))
	}
	if c.HealthyLastContact <= 0 {
		errs = append(errs, fmt.Errorf("healthy last contact %s: must be positive", c.HealthyLastContact))
	}
	if err := c.Autopilot.validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Logger == nil {
		errs = append(errs, errors.New("logger is required"))
	}
	return errors.Join(errs...)
}

// Cluster runs the cluster operations of one node around its Raft replica.
type Cluster struct {
	cfg      Config
	node     *raftnode.Node
	raft     *raft.Raft
	id       string
	raftAddr string
	hadState bool
	log      *slog.Logger
	peers    Peers

	// bg is cancelled by Close; it bounds every background loop.
	bg     context.Context
	stopBG context.CancelFunc
	bgWG   sync.WaitGroup

	regDone  chan struct{}
	formDone chan struct{}
	// probes is the leader's knowledge of every server (probes.go).
	probes probes
	// removed is closed when this node finds itself removed from the
	// cluster (membership.go).
	removed     chan struct{}
	removedOnce sync.Once
	// autopilot is the leader's autopilot runner; nil when disabled.
	autopilot *autopilotRunner

	closeOnce sync.Once
}

// New starts the cluster operations of node in the background: formation,
// registration, joining and removal detection, and autopilot when enabled.
// peers reaches the other nodes. Close it before shutting node down.
func New(cfg Config, node *raftnode.Node, peers Peers) (*Cluster, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("cluster config: %w", err)
	}
	if node == nil || peers == nil {
		return nil, errors.New("cluster: a node and peers are required")
	}
	cl := &Cluster{
		cfg:      cfg,
		node:     node,
		raft:     node.Raft(),
		id:       node.ID(),
		raftAddr: node.RaftAddress(),
		hadState: node.HadExistingState(),
		log:      cfg.Logger.With("node_id", node.ID()),
		peers:    peers,
		regDone:  make(chan struct{}),
		formDone: make(chan struct{}),
		removed:  make(chan struct{}),
	}
	cl.bg, cl.stopBG = context.WithCancel(context.Background())
	cl.bgWG.Add(4)
	go cl.runFormation()
	go cl.runRegistration()
	go cl.watchRemoval()
	go cl.runJoin()
	if cfg.Autopilot.Enabled {
		cl.autopilot = newAutopilotRunner(cl)
		cl.bgWG.Add(1)
		go cl.autopilot.run()
	}
	return cl, nil
}

// Close stops the background work and waits for it. Idempotent.
func (cl *Cluster) Close() {
	cl.closeOnce.Do(func() {
		cl.stopBG()
		cl.bgWG.Wait()
	})
}

// Node is the Raft replica the cluster runs around.
func (cl *Cluster) Node() *raftnode.Node { return cl.node }

// GRPCAddress is this node's advertised gRPC address.
func (cl *Cluster) GRPCAddress() string { return cl.cfg.GRPCAdvertise }

// IsLeader reports whether this node leads right now.
func (cl *Cluster) IsLeader() bool { return cl.node.IsLeader() }

// Fault is why this node is unfit to serve, or nil (raftnode.Node.Fault).
func (cl *Cluster) Fault() error { return cl.node.Fault() }

// AutopilotEnabled reports whether the leader runs autopilot.
func (cl *Cluster) AutopilotEnabled() bool { return cl.cfg.Autopilot.Enabled }

// Registered reports whether the node registry holds this node's current
// addresses.
func (cl *Cluster) Registered() bool { return isClosed(cl.regDone) }

// FormationDone reports whether formation has finished (bootstrapped, or
// found it had nothing to do).
func (cl *Cluster) FormationDone() bool { return isClosed(cl.formDone) }

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
