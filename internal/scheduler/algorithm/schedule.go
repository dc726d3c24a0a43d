package algorithm

import (
	"context"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"

	"github.com/capstan-dev/capstan/internal/scheduler/policy"
)

// Algorithm decides where pods go, following one Policy.
type Algorithm struct {
	predicates []Predicate
	priorities []WeightedPriority
	// PercentageOfNodesToScore bounds the search on large clusters as the
	// legacy scheduler did: once that share of nodes is found feasible
	// (at least 100), filtering stops. 0 is adaptive (50% at 100 nodes,
	// down to 5% at 5,625 and more); 100 checks every node.
	PercentageOfNodesToScore int
	// Parallelism is how many goroutines filter nodes.
	Parallelism int

	mu        sync.Mutex
	rng       *rand.Rand
	nextStart int
	// pool keeps filtering buffers between decisions.
	pool sync.Pool
}

// New builds the algorithm of a Policy. seed makes tie-breaking
// reproducible.
func New(p *policy.Policy, seed uint64) (*Algorithm, error) {
	preds, prios, err := FromPolicy(p)
	if err != nil {
		return nil, err
	}
	preds = append(preds, dynamicResources{})
	return &Algorithm{
		predicates:  preds,
		priorities:  prios,
		Parallelism: runtime.GOMAXPROCS(0),
		rng:         rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
	}, nil
}

// Predicates returns the predicate names in evaluation order.
func (a *Algorithm) Predicates() []string {
	out := make([]string, len(a.predicates))
	for i, p := range a.predicates {
		out[i] = p.Name()
	}
	return out
}

// LabelKeys are the node label keys decisions read most: the well-known
// topology keys and those the Policy's configurable predicates and
// priorities name (NodeInfo.UseLabelKeys keeps their values at hand).
func (a *Algorithm) LabelKeys() []string {
	keys := slices.Clone(TopologyLabelKeys)
	add := func(ks ...string) {
		for _, k := range ks {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	for _, p := range a.predicates {
		switch p := p.(type) {
		case *serviceAffinity:
			add(p.labels...)
		case *labelsPresence:
			add(p.labels...)
		}
	}
	for _, wp := range a.priorities {
		switch p := wp.Priority.(type) {
		case *serviceAntiAffinity:
			add(p.label)
		case *labelPreference:
			add(p.label)
		}
	}
	return keys
}

// Priorities returns the weighted priorities.
func (a *Algorithm) Priorities() []WeightedPriority { return a.priorities }

// Options change how much of the work a decision does.
type Options struct {
	// Explain evaluates every predicate on every node (recording all
	// failures, not just the first) and scores every feasible node.
	Explain bool
}

// Schedule decides where pod goes in snap. It never writes anything.
func (a *Algorithm) Schedule(ctx context.Context, pod *corev1.Pod, snap *Snapshot, opts Options) *Decision {
	pi := NewPodInfo(pod)
	cs := a.PreFilter(pi, snap)
	d := &Decision{Pod: pod, NumNodes: len(snap.Nodes), Filtered: map[string]*Failure{}, cycle: cs, podInfo: pi}
	// The node preemption nominated the pod to is likely the only one that
	// fits it: it is tried first, as upstream does, and taken if it fits.
	if nn := pod.Status.NominatedNodeName; nn != "" && !opts.Explain {
		if ni := snap.node(nn); ni != nil {
			f := a.filterNode(cs, pi, ni, false)
			if f == nil {
				d.Scored, d.Evaluated, d.Selected, d.Ties = []NodeScore{{Node: nn}}, 1, nn, 1
				if pi.HasClaims {
					placeClaims(snap, pod, []*NodeInfo{ni}, d)
				}
				if d.Feasible() {
					return d
				}
			} else {
				d.Filtered[nn] = f
			}
			d.Scored, d.Evaluated = nil, 0
		}
	}
	feasible := a.filter(ctx, cs, pi, snap.Nodes, opts, d)
	if len(feasible) == 0 {
		return d
	}
	a.score(cs, pi, feasible, d, opts.Explain)
	a.selectHost(d, opts.Explain)
	if pi.HasClaims {
		placeClaims(snap, pod, feasible, d)
	}
	return d
}

// placeClaims binds the pod's unbound claims on the selected node, in the
// same decision, so that no other decision can count on the same volumes
// (Decision.VolumeBindings). A Policy without CheckVolumeBinding did not
// look at volumes when filtering: if the selected node cannot bind them,
// the next best node that can is taken, and with none the pod does not
// fit, as the legacy scheduler failed a pod whose volumes it could not
// assume.
func placeClaims(snap *Snapshot, pod *corev1.Pod, feasible []*NodeInfo, d *Decision) {
	infos := make(map[string]*NodeInfo, len(feasible))
	for _, ni := range feasible {
		infos[ni.Node.Name] = ni
	}
	order := make([]NodeScore, len(d.Scored))
	copy(order, d.Scored)
	sort.SliceStable(order, func(i, j int) bool {
		if (order[i].Node == d.Selected) != (order[j].Node == d.Selected) {
			return order[i].Node == d.Selected
		}
		if order[i].Total != order[j].Total {
			return order[i].Total > order[j].Total
		}
		return order[i].Node < order[j].Node
	})
	failed := map[string]bool{}
	for _, ns := range order {
		bindings, reason := bindClaims(snap, pod, infos[ns.Node].Node)
		if reason == "" {
			if ns.Node != d.Selected {
				d.Selected, d.Ties = ns.Node, 1
			}
			d.VolumeBindings = bindings
			break
		}
		failed[ns.Node] = true
		d.Filtered[ns.Node] = &Failure{Predicate: "CheckVolumeBinding", Reasons: []string{reason}}
	}
	if len(failed) == 0 {
		return
	}
	kept := d.Scored[:0]
	for _, ns := range d.Scored {
		if !failed[ns.Node] {
			kept = append(kept, ns)
		}
	}
	d.Scored = kept
	if len(kept) == 0 {
		d.Selected, d.Ties = "", 0
		return
	}
	// Keep the winner first for readers of Scored[0].
	for i := range d.Scored {
		if d.Scored[i].Node == d.Selected {
			d.Scored[0], d.Scored[i] = d.Scored[i], d.Scored[0]
		}
	}
}

// filter runs the predicates over the nodes in parallel, starting where
// the previous search stopped so that every node gets its turn.
func (a *Algorithm) filter(ctx context.Context, cs *CycleState, pi *PodInfo, nodes []*NodeInfo, opts Options, d *Decision) []*NodeInfo {
	n := len(nodes)
	if n == 0 {
		return nil
	}
	want := n
	if !opts.Explain {
		want = a.numFeasibleToFind(n)
	}
	a.mu.Lock()
	start := a.nextStart % n
	a.mu.Unlock()

	// Results are kept by evaluation order k (node (start+k)%n), in
	// buffers reused across decisions: only the evaluated prefix is used
	// and cleared.
	buf := a.buffers(n)
	defer a.release(buf)
	failures, fits := buf.failures, buf.fits
	var found, evaluated, next atomic.Int64
	// Workers take the next node by an atomic counter until every node is
	// checked or enough fit: no per-node channel send, no goroutine per
	// node.
	work := func() {
		for ctx.Err() == nil && found.Load() < int64(want) {
			k := next.Add(1) - 1
			if k >= int64(n) {
				return
			}
			i := (start + int(k)) % n
			evaluated.Add(1)
			if f := a.filterNode(cs, pi, nodes[i], opts.Explain); f != nil {
				failures[k] = f
				continue
			}
			fits[k] = true
			found.Add(1)
		}
	}
	workers := min(max(1, a.Parallelism), (n+minNodesPerWorker-1)/minNodesPerWorker)
	var wg sync.WaitGroup
	for range workers - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()

	used := min(int(next.Load()), n)
	buf.used = used
	var feasible []*NodeInfo
	for k := 0; k < used; k++ {
		i := (start + k) % n
		switch {
		case fits[k]:
			feasible = append(feasible, nodes[i])
		case failures[k] != nil:
			d.Filtered[nodes[i].Name] = failures[k]
		}
	}
	if len(feasible) > want {
		feasible = feasible[:want]
	}
	d.Evaluated = int(evaluated.Load())
	a.mu.Lock()
	a.nextStart = start + d.Evaluated
	a.mu.Unlock()
	return feasible
}

// runPredicates returns nil when the node fits, else the failure of the
// first predicate that rejects it (of every one, when explaining).
func (a *Algorithm) runPredicates(cs *CycleState, pi *PodInfo, ni *NodeInfo, all bool) *Failure {
	if r := cs.rejected; r != nil {
		f := *r
		return &f
	}
	var first *Failure
	for _, p := range a.predicates {
		reasons := p.Filter(cs, pi, ni)
		if len(reasons) == 0 {
			continue
		}
		if first == nil {
			first = &Failure{Predicate: p.Name(), Reasons: reasons, Unresolvable: !isResolvable(p, pi, ni, reasons)}
			if !all {
				return first
			}
			continue
		}
		first.More = append(first.More, Failure{Predicate: p.Name(), Reasons: reasons})
	}
	return first
}

// isResolvable reports whether removing pods from the node could fix a
// predicate's failure there.
func isResolvable(p Predicate, pi *PodInfo, ni *NodeInfo, reasons []string) bool {
	r, ok := p.(resolvable)
	return ok && r.resolvable(pi, ni, reasons)
}

// filterBuffers hold one decision's per-node results.
type filterBuffers struct {
	failures []*Failure
	fits     []bool
	used     int
}

// buffers returns cleared result buffers for n nodes.
func (a *Algorithm) buffers(n int) *filterBuffers {
	if b, ok := a.pool.Get().(*filterBuffers); ok && len(b.fits) >= n {
		return b
	}
	return &filterBuffers{failures: make([]*Failure, n), fits: make([]bool, n)}
}

// release clears what a decision used and keeps the buffers.
func (a *Algorithm) release(b *filterBuffers) {
	clear(b.failures[:b.used])
	clear(b.fits[:b.used])
	b.used = 0
	a.pool.Put(b)
}

// minNodesPerWorker is the fewest nodes worth another filtering goroutine.
const minNodesPerWorker = 32

func (a *Algorithm) numFeasibleToFind(n int) int {
	const minFeasible, minPercentage = 100, 5
	if n < minFeasible || a.PercentageOfNodesToScore >= 100 {
		return n
	}
	pct := a.PercentageOfNodesToScore
	if pct <= 0 {
		pct = max(50-n/125, minPercentage)
	}
	return max(n*pct/100, minFeasible)
}

// score runs every priority over the feasible nodes and adds up weighted
// scores. Only an explanation keeps each priority's score of each node:
// a decision needs the totals, and at 1,000 nodes the breakdown was most
// of what the scheduler allocated per pod.
func (a *Algorithm) score(cs *CycleState, pi *PodInfo, nodes []*NodeInfo, d *Decision, explain bool) {
	d.Scored = make([]NodeScore, len(nodes))
	for i, ni := range nodes {
		d.Scored[i].Node = ni.Name
	}
	if explain {
		// One array holds every node's scores.
		all := make([]PriorityScore, 0, len(nodes)*len(a.priorities))
		for i := range nodes {
			d.Scored[i].Scores = all[len(all) : len(all) : len(all)+len(a.priorities)]
			all = all[:len(all)+len(a.priorities)]
		}
	}
	if len(a.priorities) == 0 {
		// No priorities: every feasible node is as good as any other.
		return
	}
	scores := make([]int64, len(nodes))
	for _, wp := range a.priorities {
		clear(scores)
		wp.Score(cs, pi, nodes, scores)
		name := wp.Name()
		for i := range nodes {
			s := min(max(scores[i], 0), MaxPriority)
			if explain {
				d.Scored[i].Scores = append(d.Scored[i].Scores, PriorityScore{Priority: name, Score: s, Weight: wp.Weight})
			}
			d.Scored[i].Total += s * wp.Weight
		}
	}
}

// selectHost picks the highest total; ties are broken at random among the
// tied nodes in name order, so a seed reproduces a choice. Explanations
// also get every node sorted, best first.
func (a *Algorithm) selectHost(d *Decision, sortAll bool) {
	if sortAll {
		sort.SliceStable(d.Scored, func(i, j int) bool {
			if d.Scored[i].Total != d.Scored[j].Total {
				return d.Scored[i].Total > d.Scored[j].Total
			}
			return d.Scored[i].Node < d.Scored[j].Node
		})
	}
	best := d.Scored[0].Total
	var tied []int
	for i := range d.Scored {
		switch t := d.Scored[i].Total; {
		case t > best:
			best, tied = t, tied[:0]
			tied = append(tied, i)
		case t == best:
			tied = append(tied, i)
		}
	}
	a.mu.Lock()
	pick := a.rng.IntN(len(tied))
	a.mu.Unlock()
	w := nthByName(d.Scored, tied, pick)
	d.Selected, d.Ties = d.Scored[w].Node, len(tied)
	if !sortAll {
		// Keep the winner first for readers of Scored[0].
		d.Scored[0], d.Scored[w] = d.Scored[w], d.Scored[0]
	}
}

// nthByName returns the index (into scored) of the tied node that is n-th
// in name order, without sorting them all: a quickselect over the tied
// indexes, which it reorders.
func nthByName(scored []NodeScore, tied []int, n int) int {
	lo, hi := 0, len(tied)-1
	for lo < hi {
		// Median of three as the pivot keeps already ordered input linear.
		mid := lo + (hi-lo)/2
		name := func(i int) string { return scored[tied[i]].Node }
		if name(mid) < name(lo) {
			tied[mid], tied[lo] = tied[lo], tied[mid]
		}
		if name(hi) < name(lo) {
			tied[hi], tied[lo] = tied[lo], tied[hi]
		}
		if name(hi) < name(mid) {
			tied[hi], tied[mid] = tied[mid], tied[hi]
		}
		pivot := name(mid)
		i, j := lo, hi
		for i <= j {
			for name(i) < pivot {
				i++
			}
			for name(j) > pivot {
				j--
			}
			if i <= j {
				tied[i], tied[j] = tied[j], tied[i]
				i++
				j--
			}
		}
		switch {
		case n <= j:
			hi = j
		case n >= i:
			lo = i
		default:
			return tied[n]
		}
	}
	return tied[lo]
}
