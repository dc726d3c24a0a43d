package algorithm

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"

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
}

// New builds the algorithm of a Policy. seed makes tie-breaking
// reproducible.
func New(p *policy.Policy, seed uint64) (*Algorithm, error) {
	preds, prios, err := FromPolicy(p)
	if err != nil {
		return nil, err
	}
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
	cs := NewCycleState(snap)
	for _, p := range a.predicates {
		if pf, ok := p.(PreFilter); ok {
			pf.PreFilter(cs, pi)
		}
	}
	d := &Decision{Pod: pod, NumNodes: len(snap.Nodes), Filtered: map[string]*Failure{}}
	feasible := a.filter(ctx, cs, pi, snap.Nodes, opts, d)
	if len(feasible) == 0 {
		return d
	}
	a.score(cs, pi, feasible, d)
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

	failures := make([]*Failure, n)
	fits := make([]bool, n)
	var found, evaluated atomic.Int64
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	check := func(k int) {
		if found.Load() >= int64(want) {
			return
		}
		i := (start + k) % n
		evaluated.Add(1)
		if f := a.runPredicates(cs, pi, nodes[i], opts.Explain); f != nil {
			failures[i] = f
			return
		}
		fits[i] = true
		if found.Add(1) >= int64(want) {
			cancel()
		}
	}
	workqueue.ParallelizeUntil(ctx, max(1, a.Parallelism), n, check)

	var feasible []*NodeInfo
	for k := 0; k < n; k++ {
		i := (start + k) % n
		switch {
		case fits[i]:
			feasible = append(feasible, nodes[i])
		case failures[i] != nil:
			d.Filtered[nodes[i].Node.Name] = failures[i]
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
	var first *Failure
	for _, p := range a.predicates {
		reasons := p.Filter(cs, pi, ni)
		if len(reasons) == 0 {
			continue
		}
		if first == nil {
			first = &Failure{Predicate: p.Name(), Reasons: reasons}
			if !all {
				return first
			}
			continue
		}
		first.More = append(first.More, Failure{Predicate: p.Name(), Reasons: reasons})
	}
	return first
}

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
// scores.
func (a *Algorithm) score(cs *CycleState, pi *PodInfo, nodes []*NodeInfo, d *Decision) {
	d.Scored = make([]NodeScore, len(nodes))
	for i, ni := range nodes {
		d.Scored[i] = NodeScore{Node: ni.Node.Name, Scores: make([]PriorityScore, 0, len(a.priorities))}
	}
	if len(a.priorities) == 0 {
		// No priorities: every feasible node is as good as any other.
		return
	}
	scores := make([]int64, len(nodes))
	for _, wp := range a.priorities {
		clear(scores)
		wp.Score(cs, pi, nodes, scores)
		for i := range nodes {
			s := min(max(scores[i], 0), MaxPriority)
			d.Scored[i].Scores = append(d.Scored[i].Scores, PriorityScore{Priority: wp.Name(), Score: s, Weight: wp.Weight})
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
	sort.Slice(tied, func(x, y int) bool { return d.Scored[tied[x]].Node < d.Scored[tied[y]].Node })
	a.mu.Lock()
	pick := a.rng.IntN(len(tied))
	a.mu.Unlock()
	d.Selected, d.Ties = d.Scored[tied[pick]].Node, len(tied)
	if !sortAll {
		// Keep the winner first for readers of Scored[0].
		w := tied[pick]
		d.Scored[0], d.Scored[w] = d.Scored[w], d.Scored[0]
	}
}
