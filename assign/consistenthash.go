package assign

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// ErrInvalidConfig is returned by NewConsistentHash for an unusable
// configuration.
var ErrInvalidConfig = errors.New("assign: invalid assignor configuration")

// Defaults of ConsistentHashConfig.
const (
	DefaultLoadFactor   = 1.25
	DefaultVirtualNodes = 64
	maxVirtualNodes     = 4096
)

// ConsistentHashConfig configures ConsistentHash. Zero fields take their
// defaults.
type ConsistentHashConfig struct {
	// LoadFactor c ≥ 1 bounds every member's load by c times the average
	// (see ConsistentHash). Default 1.25.
	LoadFactor float64
	// VirtualNodes is the number of ring points per member, 1..4096.
	// More points give a more even first choice and fewer moves on
	// membership changes, at N·VirtualNodes hashes and a sort per
	// assignment. Default 64.
	VirtualNodes int
}

// ConsistentHash is consistent hashing with bounded loads (Mirrokni, Thorup,
// Zadimoghaddam, "Consistent Hashing with Bounded Loads", SODA 2018 /
// arXiv 2016). It needs no previous-assignment metadata: stickiness comes
// from the ring alone.
//
// Each member with a subscription has VirtualNodes points on a 64-bit ring,
// hashed from its instance ID if it has one (so a restarted static member
// gets its place back) or else its member ID. Partitions are placed in
// (topic, partition) order: a partition hashes to a ring position and goes
// to the first member clockwise that subscribes to its topic and is below
// the cap. With N subscribing members and P partitions the cap is
// max(⌈P/N⌉, ⌊c·P/N⌋). The paper's ⌈c·P/N⌉ can exceed c times the average
// (P = 120, N = 11: 14 > 1.25 · 10.9); the floor keeps max/avg ≤ c whenever
// any assignment can (that is, whenever ⌈P/N⌉ ≤ c·P/N), and ⌈P/N⌉ keeps the
// cap feasible. If every subscriber of a partition's topic is at the cap
// (possible only with differing subscriptions), partitions already placed
// are shifted along a chain of subscribers to a member below the cap (an
// augmenting path, see makeRoom), so loads stay within the cap whenever any
// assignment can keep them there. Only if none can does the partition go
// to its least-loaded subscriber (ties: lowest member ID), above the cap.
//
// The hash is 64-bit FNV-1a over the key bytes followed by murmur3's fmix64
// finalizer. Raw FNV-1a is not enough: its last step multiplies by the
// prime, which carries a change in the final bytes only towards the high
// bits, so keys like "orders/0" … "orders/N" cluster on the ring. fmix64 is
// a bijection with full avalanche, so ring positions are uniform, and the
// pair costs a few nanoseconds per key where SHA-256 would dominate a large
// rebalance (N·VirtualNodes + P keys). Keys: member identity followed by
// the point number as 4 big-endian bytes; topic name followed by the
// partition as 4 big-endian bytes. Changing any of this changes every
// assignment; it is part of the protocol.
type ConsistentHash struct {
	loadFactor   float64
	virtualNodes int
}

// NewConsistentHash validates cfg and returns the assignor.
func NewConsistentHash(cfg ConsistentHashConfig) (*ConsistentHash, error) {
	c := &ConsistentHash{loadFactor: cfg.LoadFactor, virtualNodes: cfg.VirtualNodes}
	if c.loadFactor == 0 {
		c.loadFactor = DefaultLoadFactor
	}
	if c.virtualNodes == 0 {
		c.virtualNodes = DefaultVirtualNodes
	}
	if math.IsNaN(c.loadFactor) || math.IsInf(c.loadFactor, 0) || c.loadFactor < 1 {
		return nil, fmt.Errorf("%w: consistent-hash load factor %v must be a finite number ≥ 1", ErrInvalidConfig, cfg.LoadFactor)
	}
	if c.virtualNodes < 1 || c.virtualNodes > maxVirtualNodes {
		return nil, fmt.Errorf("%w: consistent-hash virtual nodes %d must be in 1..%d", ErrInvalidConfig, cfg.VirtualNodes, maxVirtualNodes)
	}
	return c, nil
}

// Name implements Assignor.
func (*ConsistentHash) Name() string { return NameConsistentHash }

// LoadFactor returns the configured c.
func (c *ConsistentHash) LoadFactor() float64 { return c.loadFactor }

// Cap returns the most partitions a member may get when n members subscribe
// to the same topics holding p partitions in all: max(⌈p/n⌉, ⌊c·p/n⌋).
func (c *ConsistentHash) Cap(p, n int) int {
	if n == 0 {
		return 0
	}
	ceil := (p + n - 1) / n
	// c·p/n in float64: a product and a quotient, both correctly rounded
	// by IEEE 754 on every platform, so every replica gets the same cap.
	bound := int(math.Floor(c.loadFactor * float64(p) / float64(n)))
	return max(ceil, bound)
}

type ringPoint struct {
	hash   uint64
	member int32
}

// Assign implements Assignor.
func (c *ConsistentHash) Assign(members []Member, topics map[string]int32) (Plan, error) {
	pb, err := newProblem(members, topics)
	if err != nil {
		return Plan{}, err
	}
	owner := make([]int32, pb.nparts())
	var eligible []int
	for mi := range pb.members {
		if len(pb.members[mi].topics) > 0 {
			eligible = append(eligible, mi)
		}
	}
	if len(eligible) == 0 {
		return pb.plan(owner), nil // no topic has a subscriber: no partitions
	}
	limit := c.Cap(pb.nparts(), len(eligible))

	ring := make([]ringPoint, 0, len(eligible)*c.virtualNodes)
	var key []byte
	for _, mi := range eligible {
		m := &pb.members[mi]
		id := m.instance
		if id == "" {
			id = m.id
		}
		key = append(key[:0], id...)
		n := len(key)
		for i := 0; i < c.virtualNodes; i++ {
			key = binary.BigEndian.AppendUint32(key[:n], uint32(i))
			ring = append(ring, ringPoint{hash64(key), int32(mi)})
		}
	}
	slices.SortFunc(ring, func(a, b ringPoint) int {
		if a.hash != b.hash {
			return cmp.Compare(a.hash, b.hash)
		}
		return cmp.Compare(a.member, b.member)
	})

	st := chState{pb: pb, owner: owner, limit: limit,
		load: make([]int, len(pb.members)), held: make([][]int, len(pb.members)),
		open: make([]int, len(pb.topics))}
	for ti := range pb.topics {
		st.open[ti] = len(pb.topics[ti].subscribers)
	}
	for ti := range pb.topics {
		t := &pb.topics[ti]
		key = append(key[:0], t.name...)
		n := len(key)
		for p := 0; p < t.count; p++ {
			g := pb.base[ti] + p
			if st.open[ti] == 0 && st.makeRoom(ti, g) {
				continue // makeRoom placed g by shifting others
			}
			var mi int
			if st.open[ti] > 0 {
				key = binary.BigEndian.AppendUint32(key[:n], uint32(p))
				h := hash64(key)
				i, _ := slices.BinarySearchFunc(ring, h, func(rp ringPoint, h uint64) int { return cmp.Compare(rp.hash, h) })
				for {
					if i == len(ring) {
						i = 0
					}
					mi = int(ring[i].member)
					if st.load[mi] < limit && pb.subscribes(mi, ti) {
						break
					}
					i++
				}
			} else {
				mi = t.subscribers[0]
				for _, s := range t.subscribers[1:] {
					if st.load[s] < st.load[mi] {
						mi = s
					}
				}
			}
			st.give(g, mi)
		}
	}
	return pb.plan(owner), nil
}

// chState is ConsistentHash's placement in progress.
type chState struct {
	pb    *problem
	owner []int32
	limit int
	load  []int
	held  [][]int // partitions of each member, in placement order
	open  []int   // per topic, subscribers below the limit
}

func (st *chState) give(g, mi int) {
	st.owner[g] = int32(mi)
	st.held[mi] = append(st.held[mi], g)
	if st.load[mi]++; st.load[mi] == st.limit {
		for _, tj := range st.pb.members[mi].topics {
			st.open[tj]--
		}
	}
}

// makeRoom handles a partition of topic ti, all of whose subscribers are at
// the cap: it looks (breadth first, in member and placement order) for a
// chain subscriber → partition it holds → another subscriber of that
// partition's topic → … ending at a member below the cap, shifts each
// partition one step along the chain and gives the new partition to the
// chain's first member. If no chain exists, no assignment of the partitions
// placed so far plus this one fits under the cap (the augmenting-path
// theorem for bipartite b-matchings), and makeRoom returns false.
func (st *chState) makeRoom(ti, g int) bool {
	pb := st.pb
	type step struct{ from, part int }
	parent := make(map[int]step)
	queue := slices.Clone(pb.topics[ti].subscribers)
	for _, mi := range queue {
		parent[mi] = step{-1, -1}
	}
	for qi := 0; qi < len(queue); qi++ {
		u := queue[qi]
		for _, x := range st.held[u] {
			for _, v := range pb.topics[pb.topicOf(x)].subscribers {
				if _, seen := parent[v]; seen {
					continue
				}
				parent[v] = step{u, x}
				if st.load[v] < st.limit {
					// Shift along the chain back to a subscriber of ti.
					w := v
					for parent[w].from >= 0 {
						p := parent[w]
						st.move(p.part, p.from, w)
						w = p.from
					}
					// w lost one partition and gets g: its load is unchanged.
					st.owner[g] = int32(w)
					st.held[w] = append(st.held[w], g)
					if st.load[v]++; st.load[v] == st.limit {
						for _, tj := range pb.members[v].topics {
							st.open[tj]--
						}
					}
					return true
				}
				queue = append(queue, v)
			}
		}
	}
	return false
}

// move hands partition x from member a to member b without touching loads.
func (st *chState) move(x, a, b int) {
	st.owner[x] = int32(b)
	i := slices.Index(st.held[a], x)
	st.held[a] = slices.Delete(st.held[a], i, i+1)
	st.held[b] = append(st.held[b], x)
}

// hash64 is 64-bit FNV-1a followed by murmur3's fmix64 finalizer.
func hash64(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}
