package console

import (
	"context"
	"crypto/sha256"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
	"k8s.io/apimachinery/pkg/util/cache"

	"github.com/capstan-dev/capstan/internal/autoscaler"
	"github.com/capstan-dev/capstan/internal/explain"
)

// Bounds of the explanations the pages ask for. At 5,000 nodes a pod's
// verdict node by node is 5,000 rows: nodes are grouped by why they
// were rejected (a count and the first names), and the fitting ones are
// the best few. The Pending page asks for every pending pod at once:
// one read of the cluster and one autoscaler simulation for all of
// them, for the oldest MaxPendingExplained, computed once per user and
// shared for PendingExplainTTL by every tab and request of that user.
const (
	MaxPendingExplained = 100
	PendingExplainTTL   = 10 * time.Second
	maxFitsShown        = 10
	maxNamesPerReason   = 20
)

type nodeVerdictJSON struct {
	Name     string  `json:"name"`
	Selected bool    `json:"selected,omitempty"`
	Scores   []int64 `json:"scores,omitempty"`
	Total    int64   `json:"total"`
}

// rejectionJSON is the nodes one reason rejects.
type rejectionJSON struct {
	Reason string   `json:"reason"`
	Count  int      `json:"count"`
	Nodes  []string `json:"nodes"`
}

type priorityJSON struct {
	Name   string `json:"name"`
	Weight int64  `json:"weight"`
}

type podExplanationJSON struct {
	Namespace  string         `json:"namespace"`
	Name       string         `json:"name"`
	Node       string         `json:"node,omitempty"`
	Scheduler  string         `json:"scheduler"`
	Pending    bool           `json:"pending"`
	Predicates []string       `json:"predicates"`
	Priorities []priorityJSON `json:"priorities"`
	// Fitting counts the nodes the pod fits; Nodes are the best of them.
	Fitting  int               `json:"fitting"`
	Nodes    []nodeVerdictJSON `json:"nodes"`
	Rejected []rejectionJSON   `json:"rejected"`
	Summary  string            `json:"summary,omitempty"`
	Winner   string            `json:"winner,omitempty"`
	Gates    []string          `json:"gates,omitempty"`
	// Autoscaler is its verdict on a pending pod; AutoscalerError says
	// why there is none (not configured, not allowed to read it).
	Autoscaler      *scaleUpJSON `json:"autoscaler,omitempty"`
	AutoscalerError string       `json:"autoscalerError,omitempty"`
	// Preemption says what preemption does for a pending pod that fits
	// nowhere, or where an earlier one nominated it.
	Preemption string `json:"preemption,omitempty"`
}

type scaleUpJSON struct {
	Message string            `json:"message"`
	Groups  map[string]string `json:"groups,omitempty"`
}

// pendingJSON is every pending pod's explanation, as of At.
type pendingJSON struct {
	Total int                  `json:"total"`
	Pods  []podExplanationJSON `json:"pods"`
	At    time.Time            `json:"at"`
}

// explanations keeps each user's last answer of the Pending page.
type explanations struct {
	answers *cache.LRUExpireCache
	flight  singleflight.Group
	// builders bounds the explanations computed at once, over every
	// user: each reads the whole cluster into memory.
	builders chan struct{}
	// building and peak count them, for the tests.
	building, peak atomic.Int64
}

// MaxBuilders is how many explanations the console computes at once;
// a request beyond them gets 429.
const MaxBuilders = 4

func newExplanations() *explanations {
	return &explanations{answers: cache.NewLRUExpireCache(64), builders: make(chan struct{}, MaxBuilders)}
}

// bounded runs build if fewer than MaxBuilders explanations are being
// computed, and answers 429 otherwise (false).
func (e *explanations) bounded(w http.ResponseWriter, build func()) bool {
	select {
	case e.builders <- struct{}{}:
	default:
		w.Header().Set("Retry-After", "2")
		writeError(w, http.StatusTooManyRequests, "the console is computing %d explanations already: try again in a moment", MaxBuilders)
		return false
	}
	defer func() { <-e.builders }()
	n := e.building.Add(1)
	defer e.building.Add(-1)
	for p := e.peak.Load(); n > p && !e.peak.CompareAndSwap(p, n); p = e.peak.Load() {
	}
	build()
	return true
}

// cached answers what key's last computation answered within ttl, or
// computes it once for every request that asks meanwhile (within the
// bound on builders).
func (s *Server) cached(w http.ResponseWriter, r *http.Request, key string, ttl time.Duration, compute func(ctx context.Context) (any, error)) {
	sum := sha256.Sum256([]byte(key))
	if v, ok := s.explained.answers.Get(sum); ok {
		writeJSON(w, http.StatusOK, v)
		return
	}
	var v any
	var err error
	if !s.explained.bounded(w, func() {
		v, err, _ = s.explained.flight.Do(string(sum[:]), func() (any, error) {
			// Detached from the request that happened to ask first: the
			// others wait on the same answer.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), time.Minute)
			defer cancel()
			v, err := compute(ctx)
			if err == nil {
				s.explained.answers.Add(sum, v, ttl)
			}
			return v, err
		})
	}) {
		return
	}
	if err != nil {
		writeAPIError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// podJSON is a decision as a page shows it; e is the autoscaler's view
// (nil with aerr when it could not be had).
func podJSON(d *explain.PodDecision, e *autoscaler.Explanation, aerr error) podExplanationJSON {
	out := podExplanationJSON{Namespace: d.Pod.Namespace, Name: d.Pod.Name, Node: d.Pod.Spec.NodeName, Scheduler: d.Pod.Spec.SchedulerName,
		Pending: d.Pending(), Predicates: d.Algorithm.Predicates(), Winner: d.Decision.Selected,
		Nodes: []nodeVerdictJSON{}, Rejected: []rejectionJSON{}}
	for _, p := range d.Algorithm.Priorities() {
		out.Priorities = append(out.Priorities, priorityJSON{Name: strings.TrimSuffix(p.Name(), "Priority"), Weight: p.Weight})
	}
	out.Fitting = len(d.Decision.Scored)
	for _, ns := range d.Decision.Scored {
		v := nodeVerdictJSON{Name: ns.Node, Selected: ns.Node == d.Decision.Selected, Total: ns.Total}
		for _, sc := range ns.Scores {
			v.Scores = append(v.Scores, sc.Score)
		}
		out.Nodes = append(out.Nodes, v)
	}
	sort.SliceStable(out.Nodes, func(i, j int) bool {
		a, b := out.Nodes[i], out.Nodes[j]
		if a.Selected != b.Selected {
			return a.Selected
		}
		if a.Total != b.Total {
			return a.Total > b.Total
		}
		return a.Name < b.Name
	})
	out.Nodes = out.Nodes[:min(len(out.Nodes), maxFitsShown)]
	byReason := map[string]*rejectionJSON{}
	for n, f := range d.Decision.Filtered {
		reasons := []string{f.Predicate + ": " + strings.Join(f.Reasons, "; ")}
		for _, more := range f.More {
			reasons = append(reasons, more.Predicate+": "+strings.Join(more.Reasons, "; "))
		}
		reason := strings.Join(reasons, " · ")
		r := byReason[reason]
		if r == nil {
			r = &rejectionJSON{Reason: reason}
			byReason[reason] = r
		}
		r.Count++
		r.Nodes = append(r.Nodes, n)
	}
	for _, r := range byReason {
		sort.Strings(r.Nodes)
		r.Nodes = r.Nodes[:min(len(r.Nodes), maxNamesPerReason)]
		out.Rejected = append(out.Rejected, *r)
	}
	sort.Slice(out.Rejected, func(i, j int) bool {
		a, b := out.Rejected[i], out.Rejected[j]
		if a.Count != b.Count {
			return a.Count > b.Count
		}
		return a.Reason < b.Reason
	})
	if !d.Decision.Feasible() {
		out.Summary = d.Decision.Summary()
	}
	if w := d.Waiting(); w != "" {
		out.Preemption = w
	} else {
		out.Preemption = d.Preempting()
	}
	if d.Pod.Spec.NodeName == "" {
		for _, g := range d.Pod.Spec.SchedulingGates {
			out.Gates = append(out.Gates, g.Name)
		}
	}
	if out.Pending {
		switch {
		case aerr != nil:
			out.AutoscalerError = aerr.Error()
		case e == nil || !e.Configured:
			out.AutoscalerError = "not configured (no ClusterAutoscaler default)"
		default:
			switch v := explain.ScaleUp(e, d.Pod.Namespace, d.Pod.Name); {
			case v != nil:
				out.Autoscaler = &scaleUpJSON{Message: v.Message, Groups: v.Groups}
			case d.Pod.Status.NominatedNodeName != "":
				out.AutoscalerError = explain.NominatedNotCounted(d.Pod.Status.NominatedNodeName)
			default:
				out.AutoscalerError = explain.NotMarkedUnschedulable
			}
		}
	}
	return out
}

func (s *Server) explainPod(w http.ResponseWriter, r *http.Request, c *clients) {
	ns, err := pathName(r, "namespace")
	if err == nil {
		_, err = pathName(r, "name")
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	s.explained.bounded(w, func() {
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		d, err := explain.Pod(ctx, c.kube, s.opts.Policy, ns, r.PathValue("name"))
		if err != nil {
			writeAPIError(w, err)
			return
		}
		var e *autoscaler.Explanation
		var aerr error
		if d.Pending() {
			e, aerr = explain.Autoscaler(ctx, c.cfg, c.kube, s.opts.Policy)
		}
		writeJSON(w, http.StatusOK, podJSON(d, e, aerr))
	})
}

// explainPending explains every pending pod (the oldest
// MaxPendingExplained) at once: one answer per user every
// PendingExplainTTL, however many tabs ask.
func (s *Server) explainPending(w http.ResponseWriter, r *http.Request, c *clients) {
	s.cached(w, r, "pending\x00"+c.token, PendingExplainTTL, func(ctx context.Context) (any, error) {
		decisions, total, err := explain.Pending(ctx, c.kube, s.opts.Policy, MaxPendingExplained)
		if err != nil {
			return nil, err
		}
		out := pendingJSON{Total: total, Pods: []podExplanationJSON{}, At: s.now().UTC()}
		var e *autoscaler.Explanation
		var aerr error
		if len(decisions) > 0 {
			e, aerr = explain.Autoscaler(ctx, c.cfg, c.kube, s.opts.Policy)
		}
		for _, d := range decisions {
			out.Pods = append(out.Pods, podJSON(d, e, aerr))
		}
		return out, nil
	})
}
