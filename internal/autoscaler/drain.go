package autoscaler

import (
	"context"
	"errors"
	"fmt"
	"github.com/capstan-dev/capstan/internal/simclock"
	"math"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// A node whose pods must move is drained by the autoscaler before its
// machine is marked and its MachineSet lowered, as upstream's actuator
// does: each pod is evicted with its grace period bounded by
// maxPodGracePeriod, evictions refused (a disruption budget) are tried
// again until the pod eviction time runs out, and the pods must be gone
// within the longest grace and a headroom. A drain that fails leaves the
// machine and its MachineSet as they were: the node's taint comes off.
// Drains run beside the loop, one at a time (upstream's
// --max-drain-parallelism); the loop finishes the removals of those done.

// DrainOptions are upstream's drain flags.
type DrainOptions struct {
	// MaxPodEvictionTime bounds the retries of one pod's eviction
	// (--max-pod-eviction-time, 2m).
	MaxPodEvictionTime time.Duration
	// EvictionRetryTime is the wait between refused evictions (10s).
	EvictionRetryTime time.Duration
	// PodEvictionHeadroom is how much longer than the longest grace
	// period the evicted pods may take to go (30s).
	PodEvictionHeadroom time.Duration
}

// DefaultDrainOptions are upstream's.
func DefaultDrainOptions() DrainOptions {
	return DrainOptions{MaxPodEvictionTime: 2 * time.Minute, EvictionRetryTime: 10 * time.Second, PodEvictionHeadroom: 30 * time.Second}
}

// drainState is one node's drain: running, then done with its outcome.
type drainState struct {
	verdict *NodeVerdict
	done    bool
	err     error
}

// drains tracks the autoscaler's drains.
type drains struct {
	mu    sync.Mutex
	nodes map[string]*drainState
}

func (d *drains) active(node string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.nodes[node] != nil
}

func (d *drains) running() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.nodes {
		if !s.done {
			return true
		}
	}
	return false
}

// finished takes the drains that are done.
func (d *drains) finished() []*drainState {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []*drainState
	for n, s := range d.nodes {
		if s.done {
			out = append(out, s)
			delete(d.nodes, n)
		}
	}
	return out
}

// startDrain drains a node tainted for removal beside the loop, which it
// wakes when done.
func (a *Autoscaler) startDrain(ctx context.Context, v *NodeVerdict, maxGrace time.Duration) {
	s := &drainState{verdict: v}
	a.drains.mu.Lock()
	a.drains.nodes[v.Node] = s
	a.drains.mu.Unlock()
	go func() {
		err := a.drainNode(ctx, v.Node, v.PodsToMove, maxGrace)
		a.drains.mu.Lock()
		s.done, s.err = true, err
		a.drains.mu.Unlock()
		a.poke()
	}()
}

// drainNode evicts the pods that must leave a node and waits for them to
// be gone.
func (a *Autoscaler) drainNode(ctx context.Context, node string, pods []*corev1.Pod, maxGrace time.Duration) error {
	opts := a.opts.Drain
	c := a.opts.Clock
	// The pods' grace periods are what their kubelets wait, real time in
	// a simulation; the ClusterAutoscaler's maximum is the cluster's.
	maxGrace = simclock.Real(c, maxGrace)
	longest := time.Duration(0)
	var evicted []*corev1.Pod
	for _, p := range pods {
		if p.Spec.NodeName != node {
			continue // moved here in the simulation only
		}
		grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
		if p.Spec.TerminationGracePeriodSeconds != nil {
			grace = *p.Spec.TerminationGracePeriodSeconds
		}
		grace = min(grace, int64(math.Ceil(maxGrace.Seconds())))
		longest = max(longest, time.Duration(grace)*time.Second)
		if err := a.evict(ctx, p, grace, opts); err != nil {
			a.recorder.Eventf(p, corev1.EventTypeWarning, ReasonScaleDownFailed, "failed to delete pod for ScaleDown")
			return err
		}
		a.recorder.Event(p, corev1.EventTypeNormal, ReasonScaleDown, "deleting pod for node scale down")
		evicted = append(evicted, p)
	}
	deadline := simclock.Add(c, c.Now().Add(longest), opts.PodEvictionHeadroom)
	for {
		var left []string
		for _, p := range evicted {
			cur, err := a.client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
			if err == nil && cur.UID == p.UID && cur.Spec.NodeName == node && cur.Status.Phase != corev1.PodSucceeded && cur.Status.Phase != corev1.PodFailed {
				left = append(left, p.Namespace+"/"+p.Name)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if c.Now().After(deadline) {
			return fmt.Errorf("failed to drain node %s: pods remaining after timeout: %v", node, left)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.After(time.Second):
		}
	}
}

// evict evicts one pod with a grace period, trying again while the
// eviction is refused, up to the pod eviction time.
func (a *Autoscaler) evict(ctx context.Context, p *corev1.Pod, grace int64, opts DrainOptions) error {
	c := a.opts.Clock
	deadline := simclock.Add(c, c.Now(), opts.MaxPodEvictionTime)
	for {
		err := a.client.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{
			ObjectMeta:    metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
			DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: &p.UID}},
		})
		if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		if simclock.Add(c, c.Now(), opts.EvictionRetryTime).After(deadline) {
			return fmt.Errorf("failed to evict pod %s/%s within allowed timeout (last error: %w)", p.Namespace, p.Name, err)
		}
		klog.FromContext(ctx).V(2).Info("Eviction refused; trying again", "pod", klog.KObj(p), "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.After(opts.EvictionRetryTime):
		}
	}
}

// finishDrains ends the removals whose drains are done: a drained node's
// machine is marked and its MachineSet lowered; a failed drain gives the
// node back. It reports whether it lowered a MachineSet.
func (a *Autoscaler) finishDrains(ctx context.Context, st *clusterState, status *corev1.ObjectReference) bool {
	now := a.opts.Clock.Now()
	lowered := false
	for _, s := range a.drains.finished() {
		v := s.verdict
		err := s.err
		if err == nil {
			err = a.removeDrained(ctx, st, v.Node)
		}
		if err != nil {
			_ = a.untaintToBeDeleted(ctx, v.Node, st.cfg.CordonBeforeDelete)
			a.recorder.Eventf(status, corev1.EventTypeWarning, ReasonScaleDownFailed, "Scale-down: couldn't delete node %q, error: %v", v.Node, err)
			klog.FromContext(ctx).Info("Scale-down failed: the node stays", "node", v.Node, "err", err)
			a.stamp(ctx, lastScaleDownFailAnnotaton, now)
			continue
		}
		a.recorder.Eventf(status, corev1.EventTypeNormal, ReasonScaleDown, "Scale-down: node %s removed with drain", v.Node)
		a.stamp(ctx, lastScaleDownAnnotation, now)
		lowered = true
	}
	return lowered
}

// removeDrained marks a drained node's machine and lowers its MachineSet.
func (a *Autoscaler) removeDrained(ctx context.Context, st *clusterState, node string) error {
	for _, g := range st.groups {
		m := machineOfNode(g, node)
		if m == nil {
			continue
		}
		if err := a.markForDeletion(ctx, m); err != nil {
			return err
		}
		err := a.setReplicas(ctx, g.Set, g.Target, g.Target-1)
		// The cache may be behind another removal: once more from the
		// replicas the scale has now.
		if sc := (*sizeChangedError)(nil); errors.As(err, &sc) && sc.current > g.Min && sc.current != g.Target-1 {
			err = a.setReplicas(ctx, g.Set, sc.current, sc.current-1)
		}
		if err != nil && !alreadyAt(err, g.Target-1) {
			_ = a.unmarkForDeletion(ctx, m)
			return err
		}
		return nil
	}
	return errors.New("the node has no machine in an autoscaled MachineSet")
}
