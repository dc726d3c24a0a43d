package autoscaler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/capstan-dev/capstan/internal/simclock"
	"k8s.io/utils/clock"
	"strconv"
	"strings"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/capstan-dev/capstan/internal/failpoint"
	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/scheduler/algorithm"
)

// What the autoscaler keeps in the API so that a restarted autoscaler goes
// on where its predecessor stopped (upstream keeps them in memory and
// starts its timers again, kubernetes/autoscaler#7873).
const (
	// UnneededSinceAnnotation on a node: when it was first found unneeded.
	UnneededSinceAnnotation = "autoscaler.capstan.dev/unneeded-since"
	// ScaleDownStatusAnnotation on a node: why it stays, or that it goes,
	// as of the last loop.
	ScaleDownStatusAnnotation = "autoscaler.capstan.dev/scale-down-status"
	// On the status ConfigMap: when the last scale-up, node deletion and
	// failed scale-down happened, for the scale-down's cooldowns.
	lastScaleUpAnnotation      = "autoscaler.capstan.dev/last-scale-up"
	lastScaleDownAnnotation    = "autoscaler.capstan.dev/last-scale-down"
	lastScaleDownFailAnnotaton = "autoscaler.capstan.dev/last-scale-down-failure"
)

// stamp records an activity's time on the status ConfigMap.
func (a *Autoscaler) stamp(ctx context.Context, key string, t time.Time) {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, key, t.UTC().Format(time.RFC3339Nano))
	if _, err := a.client.CoreV1().ConfigMaps(a.opts.Namespace).Patch(ctx, StatusConfigMap, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		klog.FromContext(ctx).Error(err, "Recording activity on the status ConfigMap", "activity", key)
	}
}

// stamped reads an activity's time off the status ConfigMap (zero when
// never).
func stamped(cm *corev1.ConfigMap, key string) time.Time {
	if cm == nil {
		return time.Time{}
	}
	t, _ := time.Parse(time.RFC3339Nano, cm.Annotations[key])
	return t
}

// cooldown says why scale-down may not remove nodes now, or "".
func cooldown(cfg *Config, cm *corev1.ConfigMap, c clock.PassiveClock, now time.Time) string {
	for _, d := range []struct {
		key, field string
		delay      time.Duration
	}{
		{lastScaleUpAnnotation, "delayAfterAdd", cfg.DelayAfterAdd},
		{lastScaleDownAnnotation, "delayAfterDelete", cfg.DelayAfterDelete},
		{lastScaleDownFailAnnotaton, "delayAfterFailure", cfg.DelayAfterFailure},
	} {
		if t := stamped(cm, d.key); !t.IsZero() && now.Before(simclock.Add(c, t, d.delay)) {
			return fmt.Sprintf("scale-down is in cooldown until %s (%s %s)", simclock.Add(c, t, d.delay).UTC().Format(time.RFC3339), d.field, d.delay)
		}
	}
	return ""
}

// planScaleDown runs the scale-down decision on the loop's state. The
// pending pods the scale-up found a registered node for count as on that
// node: a node about to take a pod is not empty.
func (a *Autoscaler) planScaleDown(st *clusterState, cm *corev1.ConfigMap, up *ScaleUpPlan) (*ScaleDownPlan, error) {
	now := a.opts.Clock.Now()
	pdbs, err := a.pdbs.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	registered := map[string]bool{}
	for _, n := range st.nodes {
		registered[n.Name] = true
	}
	var arriving []*corev1.Pod
	for _, v := range up.Verdicts {
		if v.Verdict == VerdictFits && registered[v.Node] {
			p := v.Pod.DeepCopy()
			p.Spec.NodeName = v.Node
			arriving = append(arriving, p)
		}
	}
	in := st.scaleDownInput(a.alg, a.listers, arriving, now)
	in.PDBs, in.ControllerExists, in.Cooldown = pdbs, a.controllerExists, cooldown(st.cfg, cm, a.opts.Clock, now)
	return PlanScaleDown(in), nil
}

// scaleDownInput is what the scale-down decides on, from the loop's state
// and the pods arriving on registered nodes. Removals under way count: the
// nodes being deleted (tainted ToBeDeletedByClusterAutoscaler, or of a
// deleting machine) are left out of the usage the minimums are checked
// against, and are named so that the decision finds their pods a place.
func (st *clusterState) scaleDownInput(alg *algorithm.Algorithm, l algorithm.Listers, arriving []*corev1.Pod, now time.Time) *ScaleDownInput {
	since := map[string]time.Time{}
	for _, n := range st.nodes {
		if t, err := time.Parse(time.RFC3339, n.Annotations[UnneededSinceAnnotation]); err == nil {
			since[n.Name] = t
		}
	}
	deleting := map[string]bool{}
	for _, m := range st.machines {
		if m.DeletionTimestamp != nil && m.Status.NodeRef != nil {
			deleting[m.Status.NodeRef.Name] = true
		}
	}
	var usage Usage
	for _, n := range st.nodes {
		if hasToBeDeletedTaint(n) || n.DeletionTimestamp != nil {
			deleting[n.Name] = true
		}
		if !deleting[n.Name] {
			usage.Add(n, 1)
		}
	}
	return &ScaleDownInput{
		Config: st.cfg, Algorithm: alg, Snapshot: st.snapshot(alg, l, arriving...),
		Groups: st.groups, Pods: st.podsByNode(arriving...), Usage: usage, Deleting: deleting,
		UnneededSince: since, Now: now, Clock: st.clock, PodInfos: st.podInfos,
	}
}

// controllerExists looks a pod's controller up in the informers' caches.
func (a *Autoscaler) controllerExists(ns string, ref *metav1.OwnerReference) bool {
	var err error
	switch ref.Kind {
	case "ReplicaSet":
		_, err = a.listers.ReplicaSets.ReplicaSets(ns).Get(ref.Name)
	case "ReplicationController":
		_, err = a.listers.ReplicationControllers.ReplicationControllers(ns).Get(ref.Name)
	case "StatefulSet":
		_, err = a.listers.StatefulSets.StatefulSets(ns).Get(ref.Name)
	case "Job":
		_, err = a.jobs.Jobs(ns).Get(ref.Name)
	case "DaemonSet":
		_, err = a.daemonSets.DaemonSets(ns).Get(ref.Name)
	default:
		return true
	}
	return !apierrors.IsNotFound(err)
}

// recordNodeVerdicts writes on each node why it stays or that it goes,
// and when it was first found unneeded; only what changed is written.
func (a *Autoscaler) recordNodeVerdicts(ctx context.Context, st *clusterState, plan *ScaleDownPlan) {
	for _, n := range st.nodes {
		v := plan.Verdicts[n.Name]
		if v == nil {
			continue
		}
		want := map[string]*string{ScaleDownStatusAnnotation: &v.Reason, UnneededSinceAnnotation: nil}
		if v.Unneeded {
			s := v.Since.UTC().Format(time.RFC3339)
			want[UnneededSinceAnnotation] = &s
		}
		changed := false
		for k, val := range want {
			cur, has := n.Annotations[k]
			if (val == nil && has) || (val != nil && (!has || cur != *val)) {
				changed = true
			}
		}
		if !changed {
			continue
		}
		raw, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": want}})
		if _, err := a.client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, raw, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			klog.FromContext(ctx).Error(err, "Recording the scale-down status of a node", "node", n.Name)
		}
	}
}

// executeScaleDown removes the plan's nodes: each is tainted
// ToBeDeletedByClusterAutoscaler; an empty node's Machine is marked for
// deletion and its MachineSet's replicas lowered at once, so that the
// Machine API runs its lifecycle hooks and deletes it; a node whose pods
// must move is drained first (drain.go). It reports whether it lowered a
// MachineSet.
func (a *Autoscaler) executeScaleDown(ctx context.Context, st *clusterState, plan *ScaleDownPlan, status *corev1.ObjectReference) bool {
	now := a.opts.Clock.Now()
	byGroup := map[*NodeGroup][]*NodeVerdict{}
	var order []*NodeGroup
	for _, v := range plan.Remove {
		if byGroup[v.Group] == nil {
			order = append(order, v.Group)
		}
		byGroup[v.Group] = append(byGroup[v.Group], v)
	}
	nodesByName := map[string]*corev1.Node{}
	for _, n := range st.nodes {
		nodesByName[n.Name] = n
	}
	removed := false
	for _, g := range order {
		var marked []*NodeVerdict
		var machines []*machinev1.Machine
		var errs []error
		for _, v := range byGroup[g] {
			m := machineOfNode(g, v.Node)
			if m == nil {
				errs = append(errs, fmt.Errorf("node %s has no machine in %s", v.Node, g.ID))
				continue
			}
			if a.drains.active(v.Node) {
				continue
			}
			if err := a.taintToBeDeleted(ctx, v.Node, now, st.cfg.CordonBeforeDelete); err != nil {
				errs = append(errs, err)
				continue
			}
			if !v.Empty {
				// Its pods must move: drained first, then removed by a
				// later loop (finishDrains); a failed drain keeps it.
				a.startDrain(ctx, v, st.cfg.MaxPodGracePeriod)
				a.announceRemoval(ctx, nodesByName[v.Node], v, g, status)
				continue
			}
			if err := a.markForDeletion(ctx, m); err != nil {
				errs = append(errs, err)
				_ = a.untaintToBeDeleted(ctx, v.Node, st.cfg.CordonBeforeDelete)
				continue
			}
			marked, machines = append(marked, v), append(machines, m)
		}
		if len(marked) > 0 {
			failpoint.Hit(failpoint.AutoscalerScaleDown)
			switch err := a.setReplicas(ctx, g.Set, g.Target, g.Target-len(marked)); {
			case err == nil:
			case alreadyAt(err, g.Target-len(marked)):
				// The replicas are where this removal takes them: it was
				// made already (the last loop, seen through a cache that
				// had not caught up). Undoing the marks would let the
				// MachineSet pick another machine.
				klog.FromContext(ctx).V(2).Info("Scale-down already made", "group", g.ID, "replicas", g.Target-len(marked))
				marked = nil
			default:
				errs = append(errs, err)
				for i, v := range marked {
					_ = a.untaintToBeDeleted(ctx, v.Node, st.cfg.CordonBeforeDelete)
					_ = a.unmarkForDeletion(ctx, machines[i])
				}
				marked = nil
			}
		}
		for _, v := range marked {
			a.announceRemoval(ctx, nodesByName[v.Node], v, g, status)
			removed = true
		}
		if err := errors.Join(errs...); err != nil && !errors.Is(err, errSizeChanged) {
			a.recorder.Eventf(status, corev1.EventTypeWarning, ReasonScaleDownFailed, "Scale-down of %s failed: %v", g.ID, err)
			a.stamp(ctx, lastScaleDownFailAnnotaton, now)
		}
	}
	if removed {
		a.stamp(ctx, lastScaleDownAnnotation, now)
	}
	return removed
}

// announceRemoval says that a node goes: events on it and on the status
// ConfigMap, the metric, the log.
func (a *Autoscaler) announceRemoval(ctx context.Context, n *corev1.Node, v *NodeVerdict, g *NodeGroup, status *corev1.ObjectReference) {
	a.recorder.Event(n, corev1.EventTypeNormal, ReasonScaleDown, "marked the node as toBeDeleted/unschedulable")
	reason := "underutilized"
	switch {
	case v.Unready:
		reason = "unready"
	case v.Empty:
		reason = "empty"
	}
	mScaledDown.WithLabelValues(reason).Inc()
	if v.Empty {
		a.recorder.Eventf(status, corev1.EventTypeNormal, ReasonScaleDownEmpty, "Scale-down: removing empty node %q", v.Node)
	} else {
		a.recorder.Eventf(status, corev1.EventTypeNormal, ReasonScaleDown, "Scale-down: removing node %s, utilization: %.2f, pods to reschedule: %s", v.Node, v.Utilization, podNames(v.PodsToMove))
	}
	klog.FromContext(ctx).Info("Scaling down", "node", v.Node, "group", g.ID, "empty", v.Empty, "unready", v.Unready, "utilization", v.Utilization)
}

func podNames(pods []*corev1.Pod) string {
	names := make([]string, len(pods))
	for i, p := range pods {
		names[i] = p.Namespace + "/" + p.Name
	}
	return strings.Join(names, ",")
}

func machineOfNode(g *NodeGroup, node string) *machinev1.Machine {
	for _, m := range g.Machines {
		if m.Status.NodeRef != nil && m.Status.NodeRef.Name == node && m.DeletionTimestamp.IsZero() {
			return m
		}
	}
	return nil
}

// taintToBeDeleted adds the ToBeDeletedByClusterAutoscaler taint (value:
// the Unix time), keeping the scheduler off the node, and cordons it
// when cordon (cordonNodeBeforeTerminating, on by default as upstream's).
func (a *Autoscaler) taintToBeDeleted(ctx context.Context, name string, now time.Time, cordon bool) error {
	return a.updateTaints(ctx, name, cordon, func(ts []corev1.Taint) []corev1.Taint {
		for _, t := range ts {
			if t.Key == ToBeDeletedTaint {
				return ts
			}
		}
		return append(ts, corev1.Taint{Key: ToBeDeletedTaint, Value: strconv.FormatInt(now.Unix(), 10), Effect: corev1.TaintEffectNoSchedule})
	})
}

// untaintToBeDeleted gives a node back: the taint off, and uncordoned
// when it was cordoned for the removal.
func (a *Autoscaler) untaintToBeDeleted(ctx context.Context, name string, uncordon bool) error {
	return a.updateTaints(ctx, name, uncordon, func(ts []corev1.Taint) []corev1.Taint {
		var out []corev1.Taint
		for _, t := range ts {
			if t.Key != ToBeDeletedTaint {
				out = append(out, t)
			}
		}
		return out
	})
}

// updateTaints rewrites a node's taints, read fresh, retrying on conflict;
// with cordon, spec.unschedulable follows the ToBeDeleted taint.
func (a *Autoscaler) updateTaints(ctx context.Context, name string, cordon bool, change func([]corev1.Taint) []corev1.Taint) error {
	for range 5 {
		n, err := a.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading node %s: %w", name, err)
		}
		n.Spec.Taints = change(n.Spec.Taints)
		if cordon {
			n.Spec.Unschedulable = hasToBeDeletedTaint(n)
		}
		_, err = a.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			if err != nil {
				return fmt.Errorf("tainting node %s: %w", name, err)
			}
			return nil
		}
	}
	return fmt.Errorf("tainting node %s: too many conflicts", name)
}

// unmarkForDeletion takes the delete-machine mark off a machine again.
func (a *Autoscaler) unmarkForDeletion(ctx context.Context, m *machinev1.Machine) error {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, machine.DeleteMachineAnnotation)
	_, err := a.dynamic.Resource(machineResource).Namespace(m.Namespace).Patch(ctx, m.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// staleDeletionAge is how long a removal may show no progress (its
// machine not deleting, its MachineSet not shrinking) before a running
// autoscaler undoes it; at start, any such removal is undone.
const staleDeletionAge = time.Minute

// cleanUpStaleDeletions undoes the removals that began and did not go on:
// those a previous autoscaler left (minAge 0, at start), and those whose
// MachineSet deleted another machine than the one marked. A node tainted
// ToBeDeleted for at least minAge whose MachineSet was not lowered for it
// gets its taint and its machine's mark taken off. A node whose removal
// is under way (its machine deleting, or more live machines than
// replicas) is left to go.
func (a *Autoscaler) cleanUpStaleDeletions(ctx context.Context, st *clusterState, minAge time.Duration) {
	now := a.opts.Clock.Now()
	for _, n := range st.nodes {
		if !hasToBeDeletedTaint(n) || a.drains.active(n.Name) {
			continue
		}
		if minAge > 0 {
			since, ok := toBeDeletedSince(n)
			if !ok || simclock.Elapsed(a.opts.Clock, since, now) < minAge {
				continue
			}
		}
		var group *NodeGroup
		var m *machinev1.Machine
		for _, g := range st.groups {
			for _, gm := range g.Machines {
				if gm.Status.NodeRef != nil && gm.Status.NodeRef.Name == n.Name {
					group, m = g, gm
				}
			}
		}
		if m != nil && !m.DeletionTimestamp.IsZero() {
			continue
		}
		if group != nil {
			live := 0
			for _, gm := range group.Machines {
				if gm.DeletionTimestamp.IsZero() {
					live++
				}
			}
			if live > group.Target {
				continue
			}
		}
		if err := a.untaintToBeDeleted(ctx, n.Name, st.cfg.CordonBeforeDelete); err != nil {
			klog.FromContext(ctx).Error(err, "Cleaning up a stale ToBeDeleted taint", "node", n.Name)
			continue
		}
		if m != nil {
			_ = a.unmarkForDeletion(ctx, m)
		}
		if minAge == 0 {
			a.recorder.Event(n, corev1.EventTypeNormal, ReasonClusterAutoscalerInit, "removed the ToBeDeletedByClusterAutoscaler taint of a scale-down that did not finish")
		} else {
			a.recorder.Eventf(n, corev1.EventTypeWarning, ReasonScaleDownFailed, "removed the ToBeDeletedByClusterAutoscaler taint: the node's machine was not deleted within %s of its MachineSet being lowered", minAge)
		}
	}
}

// toBeDeletedSince reads when a node was tainted ToBeDeleted (the taint's
// value, Unix seconds).
func toBeDeletedSince(n *corev1.Node) (time.Time, bool) {
	for _, t := range n.Spec.Taints {
		if t.Key == ToBeDeletedTaint {
			sec, err := strconv.ParseInt(t.Value, 10, 64)
			if err != nil {
				return time.Time{}, false
			}
			return time.Unix(sec, 0), true
		}
	}
	return time.Time{}, false
}
