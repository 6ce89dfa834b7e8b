package nemesis

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Grudge maps a node to the nodes whose packets it drops. Partitions are
// built symmetric: if a drops b, b drops a.
type Grudge map[string][]string

func (g Grudge) cut(a, b string) {
	g[a] = append(g[a], b)
	g[b] = append(g[b], a)
}

// Sees reports whether a hears b.
func (g Grudge) Sees(a, b string) bool {
	for _, x := range g[a] {
		if x == b {
			return false
		}
	}
	return true
}

// Isolate cuts one node off from all others.
func Isolate(nodes []string, victim string) Grudge {
	g := Grudge{}
	for _, n := range nodes {
		if n != victim {
			g.cut(victim, n)
		}
	}
	return g
}

// between cuts every link between two sides.
func between(g Grudge, a, b []string) {
	for _, x := range a {
		for _, y := range b {
			g.cut(x, y)
		}
	}
}

// Halves splits the (already shuffled) nodes into a minority and a majority.
func Halves(perm []string) (Grudge, string) {
	k := len(perm) / 2
	g := Grudge{}
	between(g, perm[:k], perm[k:])
	return g, fmt.Sprintf("%s | %s", strings.Join(perm[:k], ","), strings.Join(perm[k:], ","))
}

// Ring arranges the (shuffled) nodes in a ring where each sees only its
// neighbours: with five nodes each sees a majority (itself and two
// neighbours) and no two see the same one. Three nodes have no such ring
// with symmetric links, so there one link is cut: its two ends each see a
// different majority (themselves and the third node), which sees everyone.
func Ring(perm []string) (Grudge, string) {
	g := Grudge{}
	n := len(perm)
	if n <= 3 {
		if n >= 2 {
			g.cut(perm[0], perm[1])
			return g, fmt.Sprintf("link %s-%s cut", perm[0], perm[1])
		}
		return g, "single node"
	}
	var links []string
	for i := range n {
		for j := i + 1; j < n; j++ {
			d := j - i
			if d != 1 && d != n-1 {
				g.cut(perm[i], perm[j])
			}
		}
		links = append(links, perm[i])
	}
	return g, "ring " + strings.Join(links, "-") + "-" + perm[0]
}

// Bridge splits the nodes into two sides that cannot hear each other and
// one bridge node that hears both.
func Bridge(perm []string) (Grudge, string) {
	g := Grudge{}
	if len(perm) < 3 {
		return g, "too few nodes for a bridge"
	}
	bridge, rest := perm[0], perm[1:]
	k := len(rest) / 2
	between(g, rest[:k], rest[k:])
	return g, fmt.Sprintf("%s | bridge %s | %s", strings.Join(rest[:k], ","), bridge, strings.Join(rest[k:], ","))
}

// voterIn reports whether `cohortctl cluster peers -o json` lists id as a
// voter.
func voterIn(peersJSON, id string) bool {
	v, _ := peerState(peersJSON, id)
	return v
}

// peerState reads whether id is a voter and whether it is listed at all,
// from either shape cohortctl has printed: a JSON array of servers, or an
// object with a "servers" array.
func peerState(peersJSON, id string) (voter, present bool) {
	type server struct {
		NodeID string `json:"nodeId"`
		Voter  bool   `json:"voter"`
	}
	var servers []server
	if err := json.Unmarshal([]byte(peersJSON), &servers); err != nil {
		var obj struct {
			Servers []server `json:"servers"`
		}
		if err := json.Unmarshal([]byte(peersJSON), &obj); err != nil {
			return false, false
		}
		servers = obj.Servers
	}
	for _, s := range servers {
		if s.NodeID == id {
			return s.Voter, true
		}
	}
	return false, false
}
