package assign

import "slices"

// The exact sticky solver for heterogeneous subscriptions.
//
// Partitions of one topic are interchangeable except for who may keep them,
// so the problem aggregates to a flow network
//
//	source → topic t   capacity P_t, cost 0
//	topic t → member m capacity r_tm (partitions of t that m may keep), cost (0, 0)
//	topic t → member m capacity P_t, cost (0, 1)         [m subscribes to t]
//	member m → sink    the k-th unit costs (2k − 1, 0)
//
// Costs are pairs compared lexicographically. The first component sums to
// Σ load², whose minimisers are exactly the decreasingly-minimal load
// vectors (see Sticky); the second counts partitions a member receives
// beyond those it may keep, i.e. moves plus the constant number of
// partitions nobody may keep. A min-cost flow of value P therefore has the
// optimal balance and, among those, the fewest moves; any integral optimum
// disaggregates into partitions (each member keeps min(x_tm, r_tm) of its
// own, the rest are dealt from the free ones), since the flow never uses a
// (0,1) arc while its parallel (0,0) arc has room.
//
// The solver is primal-dual: Dijkstra on reduced costs (pairs form an
// ordered group, so Dijkstra is valid on non-negative reduced costs) sets
// potentials, then Dinic's blocking flow augments along zero-reduced-cost
// arcs until none is left, and so on until all P units are routed. A member's
// convex sink arc is implicit: its next unit costs 2·load + 1, so a member
// takes at most one unit per phase, and the number of phases is about the
// largest load. Everything is indexed by sorted topic and member order, so
// the result is deterministic.

type pair struct{ bal, mov int64 }

func (a pair) add(b pair) pair  { return pair{a.bal + b.bal, a.mov + b.mov} }
func (a pair) sub(b pair) pair  { return pair{a.bal - b.bal, a.mov - b.mov} }
func (a pair) less(b pair) bool { return a.bal < b.bal || (a.bal == b.bal && a.mov < b.mov) }

var infPair = pair{1 << 62, 1 << 62}

type flowNet struct {
	nTopics, nMembers int
	sink              int
	// CSR adjacency: arcs of node u are start[u] .. start[u+1]-1.
	start []int32
	to    []int32
	rev   []int32
	res   []int64 // residual capacity
	cost  []pair
	// load[k] is the flow on member k's sink arc.
	load []int64
	pot  []pair
}

type arcSpec struct {
	u, v int
	cap  int64
	cost pair
}

func newFlowNet(nTopics, nMembers int, arcs []arcSpec) *flowNet {
	n := nTopics + nMembers + 2
	f := &flowNet{nTopics: nTopics, nMembers: nMembers, sink: n - 1,
		start: make([]int32, n+1), load: make([]int64, nMembers), pot: make([]pair, n)}
	for _, a := range arcs {
		f.start[a.u+1]++
		f.start[a.v+1]++
	}
	for u := 0; u < n; u++ {
		f.start[u+1] += f.start[u]
	}
	m := 2 * len(arcs)
	f.to, f.rev, f.res, f.cost = make([]int32, m), make([]int32, m), make([]int64, m), make([]pair, m)
	fill := make([]int32, n)
	copy(fill, f.start[:n])
	for _, a := range arcs {
		i, j := fill[a.u], fill[a.v]
		fill[a.u]++
		fill[a.v]++
		f.to[i], f.rev[i], f.res[i], f.cost[i] = int32(a.v), j, a.cap, a.cost
		f.to[j], f.rev[j], f.res[j], f.cost[j] = int32(a.u), i, 0, pair{-a.cost.bal, -a.cost.mov}
	}
	return f
}

// member returns the member number of node u, or -1.
func (f *flowNet) member(u int) int {
	if k := u - 1 - f.nTopics; k >= 0 && k < f.nMembers {
		return k
	}
	return -1
}

func (f *flowNet) reduced(u int, e int32) pair {
	return f.cost[e].add(f.pot[u]).sub(f.pot[f.to[e]])
}

func (f *flowNet) reducedSink(u int) pair {
	k := f.member(u)
	return pair{2*f.load[k] + 1, 0}.add(f.pot[u]).sub(f.pot[f.sink])
}

// run routes total units from the source (node 0) to the sink.
func (f *flowNet) run(total int64) {
	n := len(f.pot)
	dist := make([]pair, n)
	done := make([]bool, n)
	level := make([]int32, n)
	it := make([]int32, n)
	queue := make([]int32, 0, n)
	var h pairHeap
	pushed := int64(0)
	for pushed < total {
		// Dijkstra on reduced costs.
		for u := range dist {
			dist[u], done[u] = infPair, false
		}
		dist[0] = pair{}
		h = append(h[:0], heapItem{pair{}, 0})
		for len(h) > 0 {
			top := h.pop()
			u := int(top.node)
			if done[u] {
				continue
			}
			done[u] = true
			if u == f.sink {
				continue
			}
			if f.member(u) >= 0 {
				if d := dist[u].add(f.reducedSink(u)); d.less(dist[f.sink]) {
					dist[f.sink] = d
					h.push(heapItem{d, int32(f.sink)})
				}
			}
			for e := f.start[u]; e < f.start[u+1]; e++ {
				v := f.to[e]
				if f.res[e] == 0 || done[v] {
					continue
				}
				if d := dist[u].add(f.reduced(u, e)); d.less(dist[v]) {
					dist[v] = d
					h.push(heapItem{d, v})
				}
			}
		}
		if !done[f.sink] {
			return // unreachable: every topic in the net has a subscriber
		}
		dt := dist[f.sink]
		for u := range f.pot {
			d := dist[u]
			if dt.less(d) {
				d = dt
			}
			f.pot[u] = f.pot[u].add(d)
		}
		// Blocking flows on the admissible (zero reduced cost) arcs.
		for pushed < total {
			for u := range level {
				level[u] = -1
			}
			level[0] = 0
			queue = append(queue[:0], 0)
			for qi := 0; qi < len(queue); qi++ {
				u := int(queue[qi])
				if f.member(u) >= 0 && level[f.sink] < 0 && f.reducedSink(u) == (pair{}) {
					level[f.sink] = level[u] + 1
				}
				for e := f.start[u]; e < f.start[u+1]; e++ {
					v := f.to[e]
					if f.res[e] > 0 && level[v] < 0 && int(v) != f.sink && f.reduced(u, e) == (pair{}) {
						level[v] = level[u] + 1
						queue = append(queue, v)
					}
				}
			}
			if level[f.sink] < 0 {
				break
			}
			copy(it, f.start[:n])
			progressed := false
			for pushed < total && f.augment(0, level, it) {
				pushed++
				progressed = true
			}
			if !progressed {
				break
			}
		}
	}
}

// augment pushes one unit along an admissible level path from u to the
// sink. Every such path ends with a member's sink arc, which takes one unit
// per phase, so one unit at a time loses nothing.
func (f *flowNet) augment(u int, level []int32, it []int32) bool {
	if k := f.member(u); k >= 0 && level[f.sink] == level[u]+1 && f.reducedSink(u) == (pair{}) {
		f.load[k]++
		return true
	}
	for ; it[u] < f.start[u+1]; it[u]++ {
		e := it[u]
		v := int(f.to[e])
		if f.res[e] > 0 && level[v] == level[u]+1 && v != f.sink && f.reduced(u, e) == (pair{}) && f.augment(v, level, it) {
			f.res[e]--
			f.res[f.rev[e]]++
			return true
		}
	}
	return false
}

type heapItem struct {
	d    pair
	node int32
}

// pairHeap is a binary min-heap on (d, node); node breaks ties so that the
// order of pops is fully determined.
type pairHeap []heapItem

func (h pairHeap) lessAt(i, j int) bool {
	if h[i].d != h[j].d {
		return h[i].d.less(h[j].d)
	}
	return h[i].node < h[j].node
}

func (h *pairHeap) push(x heapItem) {
	*h = append(*h, x)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s.lessAt(i, p) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *pairHeap) pop() heapItem {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && s.lessAt(l, m) {
			m = l
		}
		if r < len(s) && s.lessAt(r, m) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// assignByFlow is the exact sticky solver for any subscriptions.
func assignByFlow(pb *problem, keep []int32) []int32 {
	owner := make([]int32, pb.nparts())
	for g := range owner {
		owner[g] = -1
	}
	// Flow members are the members with a subscription, in ID order.
	node := make([]int, len(pb.members)) // member index → flow member number
	var fm []int
	for mi := range pb.members {
		node[mi] = -1
		if len(pb.members[mi].topics) > 0 {
			node[mi] = len(fm)
			fm = append(fm, mi)
		}
	}
	if len(fm) == 0 {
		return owner
	}
	nT := len(pb.topics)
	memberNode := func(mi int) int { return 1 + nT + node[mi] }

	// r[t][j]: partitions of topic t that its j-th subscriber may keep.
	r := make([][]int64, nT)
	for ti := range pb.topics {
		r[ti] = make([]int64, len(pb.topics[ti].subscribers))
	}
	for g, k := range keep {
		if k < 0 {
			continue
		}
		ti := pb.topicOf(g)
		j := subscriberPos(pb, ti, int(k))
		r[ti][j]++
	}

	var arcs []arcSpec
	type arcRef struct{ zero, move int } // indices into arcs, zero = -1 if absent
	refs := make([][]arcRef, nT)
	for ti := range pb.topics {
		t := &pb.topics[ti]
		arcs = append(arcs, arcSpec{0, 1 + ti, int64(t.count), pair{}})
		refs[ti] = make([]arcRef, len(t.subscribers))
		for j, mi := range t.subscribers {
			ref := arcRef{zero: -1}
			if r[ti][j] > 0 {
				ref.zero = len(arcs)
				arcs = append(arcs, arcSpec{1 + ti, memberNode(mi), r[ti][j], pair{}})
			}
			ref.move = len(arcs)
			arcs = append(arcs, arcSpec{1 + ti, memberNode(mi), int64(t.count), pair{0, 1}})
			refs[ti][j] = ref
		}
	}
	f := newFlowNet(nT, len(fm), arcs)
	f.run(int64(pb.nparts()))

	// Arc i of arcs is the forward arc placed at position pos[i] in the CSR;
	// its flow is the residual of its reverse.
	flowOf := arcFlows(f, arcs)
	need := make([]int, len(pb.members))
	for ti := range pb.topics {
		t := &pb.topics[ti]
		lo, hi := pb.base[ti], pb.base[ti+1]
		for j, mi := range t.subscribers {
			x := flowOf[refs[ti][j].move]
			if z := refs[ti][j].zero; z >= 0 {
				x += flowOf[z]
			}
			// Keep the member's own partitions of t, lowest first.
			kept := int64(0)
			for _, g := range ownedIn(pb.members[mi].owned, lo, hi) {
				if kept < x && keep[g] == int32(mi) {
					owner[g] = int32(mi)
					kept++
				}
			}
			need[mi] = int(x - kept)
		}
		fillRoundRobin(owner, t.subscribers, need, lo, hi)
	}
	return owner
}

// arcFlows returns the flow on each forward arc of arcs, in arcs order,
// replaying newFlowNet's placement.
func arcFlows(f *flowNet, arcs []arcSpec) []int64 {
	n := len(f.pot)
	fill := make([]int32, n)
	copy(fill, f.start[:n])
	out := make([]int64, len(arcs))
	for i, a := range arcs {
		e := fill[a.u]
		fill[a.u]++
		fill[a.v]++
		out[i] = f.res[f.rev[e]]
	}
	return out
}

func subscriberPos(pb *problem, ti, mi int) int {
	j, _ := slices.BinarySearch(pb.topics[ti].subscribers, mi)
	return j
}

// ownedIn returns the part of ascending owned inside [lo, hi).
func ownedIn(owned []int, lo, hi int) []int {
	i, _ := slices.BinarySearch(owned, lo)
	j, _ := slices.BinarySearch(owned, hi)
	return owned[i:j]
}
