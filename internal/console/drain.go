package console

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubectl/pkg/drain"

	capdrain "github.com/capstan-dev/capstan/internal/drain"
)

// DrainTimeout bounds a drain the console runs: it is not tied to the
// request that started it (a closed tab or a proxy's idle timeout does
// not leave a node cordoned and half evicted), so it needs its own end.
const DrainTimeout = 10 * time.Minute

// drains are the drains this console runs or ran, by node: one at a time
// per node, kept until the next drain of the node.
type drains struct {
	mu    sync.Mutex
	byKey map[string]*drainRun
}

// running is the drain of the node under way, if any.
func (ds *drains) running(node string) *drainRun {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if d := ds.byKey[node]; d != nil && d.status(node).State == "Running" {
		return d
	}
	return nil
}

// start records run as the node's drain, unless another is under way
// (which it returns).
func (ds *drains) start(node string, run *drainRun) *drainRun {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if d := ds.byKey[node]; d != nil && d.status(node).State == "Running" {
		return d
	}
	if ds.byKey == nil {
		ds.byKey = map[string]*drainRun{}
	}
	ds.byKey[node] = run
	return nil
}

type drainRun struct {
	mu       sync.Mutex
	User     string    `json:"user"`
	State    string    `json:"state"` // Running, Drained, Failed
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished,omitzero"`
	Message  string    `json:"message"`
	log      bytes.Buffer
}

// Write is the drain's log.
func (d *drainRun) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.log.Len() < 64<<10 {
		d.log.Write(p)
	}
	return len(p), nil
}

type drainStatusJSON struct {
	Node     string    `json:"node"`
	User     string    `json:"user"`
	State    string    `json:"state"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished,omitzero"`
	Message  string    `json:"message"`
	Log      string    `json:"log"`
}

func (d *drainRun) status(node string) drainStatusJSON {
	d.mu.Lock()
	defer d.mu.Unlock()
	return drainStatusJSON{Node: node, User: d.User, State: d.State, Started: d.Started, Finished: d.Finished, Message: d.Message, Log: d.log.String()}
}

// drainPlanJSON is what a drain of a node would do now: the pods it
// evicts, the PodDisruptionBudgets that allow none of them to go, the
// pods whose emptyDir data goes with them, and why some pods would stop
// the drain.
type drainPlanJSON struct {
	Node     string   `json:"node"`
	Pods     []string `json:"pods"`
	EmptyDir []string `json:"emptyDir"`
	Blocking []string `json:"blocking"`
	Errors   []string `json:"errors"`
}

// drainHelper drains as `oc adm drain --ignore-daemonsets
// --delete-emptydir-data` does, logging to log.
func drainHelper(ctx context.Context, c *clients, log io.Writer) *drain.Helper {
	return &drain.Helper{Ctx: ctx, Client: c.kube, Force: false, GracePeriodSeconds: -1, IgnoreAllDaemonSets: true,
		DeleteEmptyDirData: true, Timeout: DrainTimeout - time.Minute, Out: log, ErrOut: log}
}

// drainPlan answers what a drain of the node would evict, and what would
// hold it up, as `oc adm drain --dry-run` lists it.
func (s *Server) drainPlan(w http.ResponseWriter, r *http.Request, c *clients) {
	name, err := pathName(r, "name")
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	if _, err := c.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err != nil {
		writeAPIError(w, err)
		return
	}
	list, errs := drainHelper(ctx, c, io.Discard).GetPodsForDeletion(name)
	out := drainPlanJSON{Node: name, Pods: []string{}, EmptyDir: []string{}, Blocking: []string{}, Errors: []string{}}
	for _, e := range errs {
		out.Errors = append(out.Errors, e.Error())
	}
	var pods []corev1.Pod
	if list != nil {
		pods = list.Pods()
	}
	for _, p := range pods {
		out.Pods = append(out.Pods, p.Namespace+"/"+p.Name)
		for _, v := range p.Spec.Volumes {
			if v.EmptyDir != nil {
				out.EmptyDir = append(out.EmptyDir, p.Namespace+"/"+p.Name)
				break
			}
		}
	}
	// The budgets that allow no disruption now, of the pods evicted.
	byNS := map[string][]policyv1.PodDisruptionBudget{}
	for _, p := range pods {
		if _, ok := byNS[p.Namespace]; ok {
			continue
		}
		pdbs, err := c.kube.PolicyV1().PodDisruptionBudgets(p.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			out.Errors = append(out.Errors, fmt.Sprintf("PodDisruptionBudgets of %s: %v", p.Namespace, err))
			byNS[p.Namespace] = nil
			continue
		}
		byNS[p.Namespace] = pdbs.Items
	}
	blocking := map[string]bool{}
	for _, p := range pods {
		for _, pdb := range byNS[p.Namespace] {
			if !capdrain.BudgetCovers(&pdb, &p) {
				continue
			}
			if pdb.Status.DisruptionsAllowed == 0 {
				blocking[fmt.Sprintf("%s/%s (allows no disruption now; holds %s)", pdb.Namespace, pdb.Name, p.Name)] = true
			}
		}
	}
	for b := range blocking {
		out.Blocking = append(out.Blocking, b)
	}
	sort.Strings(out.Blocking)
	writeJSON(w, http.StatusOK, out)
}

// drainNode starts a drain of the node, as `oc adm drain
// --ignore-daemonsets --delete-emptydir-data` does, as the user: it
// cordons the node now and evicts its pods in the background, detached
// from this request, for DrainTimeout at most. The status endpoint
// follows it.
func (s *Server) drainNode(w http.ResponseWriter, r *http.Request, c *clients) {
	name, err := pathName(r, "name")
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	if d := s.drains.running(name); d != nil {
		writeError(w, http.StatusConflict, "node/%s is being drained already (by %s, since %s)", name, d.User, d.Started.UTC().Format(time.RFC3339))
		return
	}
	run := &drainRun{User: c.user, State: "Running", Started: s.now()}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), DrainTimeout)
	h := drainHelper(ctx, c, run)
	fail := func(err error) {
		run.mu.Lock()
		run.State, run.Finished, run.Message = "Failed", s.now(), fmt.Sprintf("draining node/%s: %v", name, err)
		run.mu.Unlock()
	}
	// The cordon, as the user, comes first: a drain is kept only once the
	// API server let the user cordon a node that exists, so that a user
	// without the right neither grows the console's record nor overwrites
	// another's drain.
	node, err := c.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		err = drain.RunCordonOrUncordon(h, node, true)
	}
	if err != nil {
		cancel()
		writeAPIError(w, err)
		return
	}
	if d := s.drains.start(name, run); d != nil {
		cancel()
		writeError(w, http.StatusConflict, "node/%s is being drained already (by %s, since %s)", name, d.User, d.Started.UTC().Format(time.RFC3339))
		return
	}
	s.opts.Logger.Info("Console drain", "node", name, "user", c.user)
	go func() {
		defer cancel()
		if err := drain.RunNodeDrain(h, name); err != nil {
			fail(err)
			return
		}
		run.mu.Lock()
		run.State, run.Finished, run.Message = "Drained", s.now(), "node/"+name+" drained"
		run.mu.Unlock()
	}()
	writeJSON(w, http.StatusAccepted, map[string]string{"message": "node/" + name + " cordoned; its pods are being evicted"})
}

// drainStatus is the state and log of the last drain of a node this
// console started, for a user who may read what it shows: the node, and
// the pods on it.
func (s *Server) drainStatus(w http.ResponseWriter, r *http.Request, c *clients) {
	name, err := pathName(r, "name")
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	if _, err := c.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err != nil {
		writeAPIError(w, err)
		return
	}
	if _, err := c.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name, Limit: 1}); err != nil {
		writeAPIError(w, err)
		return
	}
	s.drains.mu.Lock()
	d := s.drains.byKey[name]
	s.drains.mu.Unlock()
	if d == nil {
		writeError(w, http.StatusNotFound, "this console replica started no drain of node/%s", name)
		return
	}
	writeJSON(w, http.StatusOK, d.status(name))
}
