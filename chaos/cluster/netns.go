package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
)

func (c *Cluster) bridge() string { return c.prefix + "-br" }

func run(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func inNS(ns string, args ...string) error {
	return run(append([]string{"ip", "netns", "exec", ns}, args...)...)
}

func forwardRule(prefix string) []string {
	br := prefix + "-br"
	return []string{"FORWARD", "-i", br, "-o", br, "-m", "comment", "--comment", "cohort-chaos " + prefix, "-j", "ACCEPT"}
}

// removeForwardRules deletes every copy of the instance's FORWARD rule.
func removeForwardRules(prefix string) {
	if _, err := exec.LookPath("iptables"); err != nil {
		return
	}
	for range 16 {
		if exec.Command("iptables", append([]string{"-D"}, forwardRule(prefix)...)...).Run() != nil {
			return
		}
	}
}

// setupNetwork creates the bridge with the host's address .1, and for each
// node a namespace with loopback up and a veth (eth0 inside) on the bridge.
// Bridged traffic may pass the host's FORWARD chain (br_netfilter, whose
// policy Docker sets to DROP), so one rule accepts our bridge's traffic.
func (c *Cluster) setupNetwork() error {
	br := c.bridge()
	steps := [][]string{
		{"ip", "link", "add", br, "type", "bridge"},
		{"ip", "addr", "add", c.subnet + ".1/24", "dev", br},
		{"ip", "link", "set", br, "up"},
		append([]string{"iptables", "-I"}, forwardRule(c.prefix)...),
	}
	c.netUp = true
	for _, s := range steps {
		if err := run(s...); err != nil {
			return fmt.Errorf("cluster network: %w", err)
		}
	}
	for _, n := range c.Nodes {
		host, peer := fmt.Sprintf("%s-v%d", c.prefix, n.Index), fmt.Sprintf("%s-p%d", c.prefix, n.Index)
		steps := [][]string{
			{"ip", "netns", "add", n.NetNS},
			{"ip", "link", "add", host, "type", "veth", "peer", "name", peer},
			{"ip", "link", "set", peer, "netns", n.NetNS},
			{"ip", "link", "set", host, "master", br},
			{"ip", "link", "set", host, "up"},
			{"ip", "netns", "exec", n.NetNS, "ip", "link", "set", "lo", "up"},
			{"ip", "netns", "exec", n.NetNS, "ip", "link", "set", peer, "name", "eth0"},
			{"ip", "netns", "exec", n.NetNS, "ip", "addr", "add", n.IP + "/24", "dev", "eth0"},
			{"ip", "netns", "exec", n.NetNS, "ip", "link", "set", "eth0", "up"},
		}
		for _, s := range steps {
			if err := run(s...); err != nil {
				return fmt.Errorf("cluster network for %s: %w", n.ID, err)
			}
		}
	}
	c.log.Info("network ready", "bridge", br, "subnet", c.subnet+".0/24")
	return nil
}

func (c *Cluster) teardownNetwork() {
	c.mu.Lock()
	up := c.netUp
	c.netUp = false
	c.mu.Unlock()
	if !up {
		return
	}
	for _, n := range c.Nodes {
		_ = run("ip", "netns", "del", n.NetNS)
	}
	for _, l := range links(c.prefix + "-") {
		_ = run("ip", "link", "del", l)
	}
	removeForwardRules(c.prefix)
}

// ErrNoNetwork: partitions need netns mode.
var ErrNoNetwork = errors.New("partitions need netns mode")

// Partition makes each node drop packets from the nodes in its grudge
// (node ID → IDs it must not hear). Traffic from the host (the clients)
// still flows, as in Jepsen. It replaces any earlier partition.
func (c *Cluster) Partition(grudge map[string][]string) error {
	if c.cfg.Mode != ModeNetns {
		return ErrNoNetwork
	}
	if err := c.Heal(); err != nil {
		return err
	}
	c.mu.Lock()
	c.partitioned = true
	c.mu.Unlock()
	for _, n := range c.Nodes {
		drop := slices.Clone(grudge[n.ID])
		slices.Sort(drop)
		for _, id := range drop {
			peer := c.Node(id)
			if peer == nil || peer == n {
				continue
			}
			if err := inNS(n.NetNS, "iptables", "-A", "INPUT", "-s", peer.IP, "-j", "DROP"); err != nil {
				return fmt.Errorf("partition: %w", err)
			}
		}
	}
	return nil
}

// Heal removes every partition.
func (c *Cluster) Heal() error {
	if c.cfg.Mode != ModeNetns {
		return nil
	}
	c.mu.Lock()
	was := c.partitioned
	c.partitioned = false
	c.mu.Unlock()
	if !was {
		return nil
	}
	var errs []error
	for _, n := range c.Nodes {
		if err := inNS(n.NetNS, "iptables", "-F", "INPUT"); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Preflight says why netns mode cannot run here ("" when it can).
func Preflight() string {
	if os.Geteuid() != 0 {
		return "not root"
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " not installed (chaos/install-deps.sh installs it)"
		}
	}
	probe := fmt.Sprintf("cchprobe-%d", os.Getpid())
	if err := run("ip", "netns", "add", probe); err != nil {
		return "cannot create network namespaces: " + err.Error()
	}
	defer func() { _ = run("ip", "netns", "del", probe) }()
	if err := inNS(probe, "iptables", "-L", "INPUT", "-n"); err != nil {
		return "iptables does not work inside a namespace: " + err.Error()
	}
	return ""
}
