package simulate

import (
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"
)

// WorkloadAvailability is a workload whose ready pods went down during
// the run: how low, against how many it wants.
type WorkloadAvailability struct {
	Workload string `json:"workload"`
	// Desired is the pods the workload wants at the end (its replicas,
	// or a DaemonSet's nodes to run on).
	Desired int32 `json:"desired"`
	// ReadyAtStart, LowestReady and ReadyAtEnd count its Ready pods
	// that were not being deleted: when the changes began, at the
	// fewest since, and at the end.
	ReadyAtStart int `json:"readyAtStart"`
	LowestReady  int `json:"lowestReady"`
	ReadyAtEnd   int `json:"readyAtEnd"`
}

// BudgetAvailability is a PodDisruptionBudget whose healthy pods fell
// below what it wants during the run.
type BudgetAvailability struct {
	Budget string `json:"budget"`
	// DesiredHealthy is what the budget wants (status.desiredHealthy);
	// LowestHealthy the fewest healthy pods it counted.
	DesiredHealthy int32 `json:"desiredHealthy"`
	LowestHealthy  int32 `json:"lowestHealthy"`
	// Below is the simulated time it spent below DesiredHealthy.
	Below Duration `json:"below"`
}

// availability follows, from the changes' beginning, each workload's
// Ready pods and each budget's healthy ones.
type availability struct {
	mu       sync.Mutex
	started  time.Time
	workload func(*corev1.Pod) string
	// ready are the Ready pods, by key, with their workload; count the
	// Ready pods of each workload, start and lowest since started.
	ready         map[string]string
	count         map[string]int
	start, lowest map[string]int
	budgets       map[string]*budgetState
}

type budgetState struct {
	desired, lowest int32
	belowSince      time.Time
	below           time.Duration
}

func newAvailability(workload func(*corev1.Pod) string) *availability {
	return &availability{workload: workload, ready: map[string]string{}, count: map[string]int{}, budgets: map[string]*budgetState{}}
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Spec.NodeName == "" {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// pod notes a pod as it is now (gone: deleted).
func (a *availability) pod(obj any, gone bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	key := objectKey(p)
	ready := !gone && podReady(p)
	a.mu.Lock()
	_, was := a.ready[key]
	a.mu.Unlock()
	if ready == was {
		return
	}
	w := ""
	if ready {
		if w = a.workload(p); w == "" {
			return
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if ready {
		a.ready[key] = w
		a.count[w]++
		return
	}
	w = a.ready[key]
	delete(a.ready, key)
	a.count[w]--
	if a.lowest != nil {
		if l, ok := a.lowest[w]; !ok || a.count[w] < l {
			a.lowest[w] = a.count[w]
		}
	}
}

// budget notes a budget's status.
func (a *availability) budget(obj any) {
	b, ok := obj.(*policyv1.PodDisruptionBudget)
	if !ok || b.Status.ObservedGeneration == 0 {
		return
	}
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started.IsZero() {
		return
	}
	key := b.Namespace + "/" + b.Name
	s := a.budgets[key]
	if s == nil {
		s = &budgetState{lowest: b.Status.CurrentHealthy}
		a.budgets[key] = s
	}
	s.desired, s.lowest = b.Status.DesiredHealthy, min(s.lowest, b.Status.CurrentHealthy)
	below := b.Status.CurrentHealthy < b.Status.DesiredHealthy
	switch {
	case below && s.belowSince.IsZero():
		s.belowSince = now
	case !below && !s.belowSince.IsZero():
		s.below += now.Sub(s.belowSince)
		s.belowSince = time.Time{}
	}
}

// begin starts the count from the changes' beginning. Each Ready pod's
// workload is named again first: a restored pod's controllers adopt it
// (and its ReplicaSet) after it was Ready, so the name it had then may be
// its ReplicaSet's rather than its Deployment's. pod is a pod by key, as
// the cluster has it now.
func (a *availability) begin(at time.Time, pod func(key string) *corev1.Pod) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.count = map[string]int{}
	for key, w := range a.ready {
		if p := pod(key); p != nil {
			if now := a.workload(p); now != "" {
				w = now
			}
		}
		a.ready[key] = w
		a.count[w]++
	}
	a.started = at
	a.start, a.lowest = map[string]int{}, map[string]int{}
	for w, n := range a.count {
		a.start[w], a.lowest[w] = n, n
	}
}

// desiredOf is how many pods a workload ("Kind namespace/name") wants.
type desiredOf func(workload string) (int32, bool)

func workloadDesired(deploys appslisters.DeploymentLister, sts appslisters.StatefulSetLister, ds appslisters.DaemonSetLister, rs appslisters.ReplicaSetLister) desiredOf {
	return func(w string) (int32, bool) {
		kind, nsName, _ := strings.Cut(w, " ")
		ns, name, _ := strings.Cut(nsName, "/")
		replicas := func(r *int32) int32 {
			if r == nil {
				return 1
			}
			return *r
		}
		switch kind {
		case "Deployment":
			if d, err := deploys.Deployments(ns).Get(name); err == nil {
				return replicas(d.Spec.Replicas), true
			}
		case "StatefulSet":
			if s, err := sts.StatefulSets(ns).Get(name); err == nil {
				return replicas(s.Spec.Replicas), true
			}
		case "ReplicaSet":
			if s, err := rs.ReplicaSets(ns).Get(name); err == nil {
				return replicas(s.Spec.Replicas), true
			}
		case "DaemonSet":
			if d, err := ds.DaemonSets(ns).Get(name); err == nil {
				return d.Status.DesiredNumberScheduled, true
			}
		}
		return 0, false
	}
}

// report is the workloads whose Ready pods went down, or end below what
// they want, and the budgets that fell below theirs; sim converts real
// durations to simulated ones.
func (a *availability) report(desired desiredOf, sim func(time.Duration) time.Duration) ([]WorkloadAvailability, []BudgetAvailability) {
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	workloads, budgets := []WorkloadAvailability{}, []BudgetAvailability{}
	seen := map[string]bool{}
	for w := range a.lowest {
		seen[w] = true
	}
	for w := range a.count {
		seen[w] = true
	}
	for w := range seen {
		want, ok := desired(w)
		wa := WorkloadAvailability{Workload: w, Desired: want, ReadyAtStart: a.start[w], LowestReady: a.lowest[w], ReadyAtEnd: a.count[w]}
		if _, counted := a.lowest[w]; !counted {
			wa.LowestReady = 0 // a workload made during the run
		}
		if ok && (wa.LowestReady < wa.ReadyAtStart || int32(wa.ReadyAtEnd) < want) {
			workloads = append(workloads, wa)
		}
	}
	sort.Slice(workloads, func(i, j int) bool { return workloads[i].Workload < workloads[j].Workload })
	for key, s := range a.budgets {
		below := s.below
		if !s.belowSince.IsZero() {
			below += now.Sub(s.belowSince)
		}
		if below > 0 || s.lowest < s.desired {
			budgets = append(budgets, BudgetAvailability{Budget: key, DesiredHealthy: s.desired, LowestHealthy: s.lowest, Below: Duration(sim(below))})
		}
	}
	sort.Slice(budgets, func(i, j int) bool { return budgets[i].Budget < budgets[j].Budget })
	return workloads, budgets
}
