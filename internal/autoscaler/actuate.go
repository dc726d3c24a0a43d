package autoscaler

import (
	"context"
	"errors"
	"fmt"
	"github.com/capstan-dev/capstan/internal/simclock"
	"strings"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/failpoint"
	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/waitfor"
)

// errSizeChanged means a MachineSet's replicas were not what the decision
// started from: someone else changed them, and the next loop decides again.
var errSizeChanged = errors.New("replicas changed since the decision")

// sizeChangedError says what the replicas were instead (-1: unknown).
type sizeChangedError struct {
	set     string
	current int
}

func (e *sizeChangedError) Error() string {
	if e.current < 0 {
		return fmt.Sprintf("machineset %s: %v", e.set, errSizeChanged)
	}
	return fmt.Sprintf("machineset %s: %v (%d now)", e.set, errSizeChanged, e.current)
}

func (e *sizeChangedError) Unwrap() error { return errSizeChanged }

// alreadyAt reports whether err says the replicas are at to already: the
// same change was made before (by this autoscaler's last loop, which a
// stale cache does not show yet, or before a restart).
func alreadyAt(err error, to int) bool {
	var sc *sizeChangedError
	return errors.As(err, &sc) && sc.current == to
}

// setReplicas moves a MachineSet's replicas from one count to another
// through its scale subresource, only if they are still from: a decision
// made on a stale view, or repeated after a restart, changes nothing. A
// successful change is remembered until the cache shows it (see
// waitForCache).
func (a *Autoscaler) setReplicas(ctx context.Context, ms *machinev1.MachineSet, from, to int) error {
	scales := a.dynamic.Resource(machineSetResource).Namespace(ms.Namespace)
	scale, err := scales.Get(ctx, ms.Name, metav1.GetOptions{}, "scale")
	if err != nil {
		return fmt.Errorf("reading the scale of machineset %s: %w", ms.Name, err)
	}
	cur, _, _ := unstructured.NestedInt64(scale.Object, "spec", "replicas")
	if int(cur) != from {
		return &sizeChangedError{set: ms.Name, current: int(cur)}
	}
	if err := unstructured.SetNestedField(scale.Object, int64(to), "spec", "replicas"); err != nil {
		return err
	}
	if _, err := scales.Update(ctx, scale, metav1.UpdateOptions{}, "scale"); err != nil {
		if apierrors.IsConflict(err) {
			return &sizeChangedError{set: ms.Name, current: -1}
		}
		return fmt.Errorf("scaling machineset %s to %d: %w", ms.Name, to, err)
	}
	a.written[ms.Namespace+"/"+ms.Name] = int32(to)
	return nil
}

// waitForCache waits (a few seconds at most) until the MachineSet cache
// shows the replicas this loop wrote: the next loop, which comes at once
// after acting, must not decide again on what it has already changed.
func (a *Autoscaler) waitForCache(ctx context.Context) {
	defer clear(a.written)
	_ = waitfor.Poll(ctx, 20*time.Millisecond, 5*time.Second, waitfor.Simple(func(context.Context) (bool, string) {
		for key, want := range a.written {
			ns, name, _ := strings.Cut(key, "/")
			ms, err := a.sets.MachineSets(ns).Get(name)
			if err != nil || ptr.Deref(ms.Spec.Replicas, 0) != want {
				return false, "machineset " + key + " not in the cache yet"
			}
		}
		return true, ""
	}))
}

// executeScaleUp applies a plan's increases and reports whether any was
// made. A group whose scale fails is backed off.
func (a *Autoscaler) executeScaleUp(ctx context.Context, st *clusterState, plan *ScaleUpPlan, status *corev1.ObjectReference) bool {
	log := klog.FromContext(ctx)
	scaled := false
	for _, inc := range plan.Increases {
		g := inc.Group
		a.recorder.Eventf(status, corev1.EventTypeNormal, ReasonScaledUpGroup, "Scale-up: setting group %s size to %d instead of %d (max: %d)", g.ID, inc.To, inc.From, g.Max)
		failpoint.Hit(failpoint.AutoscalerScaleUp)
		if err := a.setReplicas(ctx, g.Set, inc.From, inc.To); err != nil {
			if errors.Is(err, errSizeChanged) {
				log.V(2).Info("Scale-up skipped", "group", g.ID, "err", err)
				continue
			}
			until := a.backoff.fail(g.ID, "cloudProviderError", a.opts.Clock.Now())
			mFailedScaleUps.WithLabelValues("apiCallError").Inc()
			a.recorder.Eventf(status, corev1.EventTypeWarning, ReasonFailedToScaleUpGroup, "Scale-up failed for group %s: %v (backed off until %s)", g.ID, err, until.Format(time.RFC3339))
			continue
		}
		log.Info("Scaled up", "group", g.ID, "from", inc.From, "to", inc.To, "max", g.Max)
		a.rememberScaleUp(g.ID, inc.To)
		mScaledUp.Add(float64(inc.To - inc.From))
		a.recorder.Eventf(status, corev1.EventTypeNormal, ReasonScaledUpGroup, "Scale-up: group %s size set to %d instead of %d (max: %d)", g.ID, inc.To, inc.From, g.Max)
		scaled = true
	}
	return scaled
}

// settleProvisioning handles the machines of earlier scale-ups that will
// not become nodes: those the cloud refused (phase Failed) and those with
// no node after maxNodeProvisionTime. Their group is backed off, and the
// scale-up is undone: the machines are marked for deletion and the
// MachineSet's replicas lowered by as many, so it deletes those very
// machines. Everything it goes by is in the API, so a restarted autoscaler
// settles what its predecessor left. It reports whether it changed a size.
func (a *Autoscaler) settleProvisioning(ctx context.Context, st *clusterState, status *corev1.ObjectReference) (bool, error) {
	now := a.opts.Clock.Now()
	changed := false
	var errs []error
	for _, g := range st.groups {
		var failed, late []*machinev1.Machine
		live := 0
		for _, m := range g.Machines {
			if m.DeletionTimestamp.IsZero() {
				live++
			}
			if !m.DeletionTimestamp.IsZero() || m.Status.NodeRef != nil {
				continue
			}
			switch {
			case m.Status.Phase != nil && *m.Status.Phase == machinev1.PhaseFailed:
				failed = append(failed, m)
			case simclock.Elapsed(a.opts.Clock, m.CreationTimestamp.Time, now) > st.cfg.MaxNodeProvisionTime:
				late = append(late, m)
			}
		}
		// More live machines than replicas: the MachineSet is shrinking
		// already (an undo of an earlier loop whose machines it has not
		// deleted yet). Undoing again would lower it twice.
		if len(failed)+len(late) == 0 || live > g.Target {
			continue
		}
		if len(failed) > 0 {
			why := "instance creation failed"
			if m := failed[0]; m.Status.ErrorMessage != nil {
				why = *m.Status.ErrorMessage
			}
			until := a.backoff.fail(g.ID, "cloudProviderError", now)
			mFailedScaleUps.WithLabelValues("cloudProviderError").Inc()
			a.recorder.Eventf(status, corev1.EventTypeWarning, ReasonScaleUpFailed, "Failed adding %d nodes to group %s due to cloudProviderError; source errors: %s (backed off until %s)", len(failed), g.ID, why, until.Format(time.RFC3339))
		}
		if len(late) > 0 {
			until := a.backoff.fail(g.ID, "timeout", now)
			mFailedScaleUps.WithLabelValues("timeout").Inc()
			a.recorder.Eventf(status, corev1.EventTypeWarning, ReasonScaleUpTimedOut, "Nodes added to group %s failed to register within %s (backed off until %s)", g.ID, st.cfg.MaxNodeProvisionTime, until.Format(time.RFC3339))
		}
		// Never below the group's minimum (upstream's DeleteNodes refuses
		// to): the machines left stay failed, the group backed off. The
		// replicas go down only by the machines actually marked, or the
		// MachineSet would delete machines of its own choosing.
		undo := append(failed, late...)
		undo = undo[:max(0, min(len(undo), g.Target-g.Min))]
		marked := 0
		for _, m := range undo {
			if err := a.markForDeletion(ctx, m); err != nil {
				errs = append(errs, err)
				continue
			}
			marked++
		}
		if marked == 0 {
			continue
		}
		to := g.Target - marked
		if err := a.setReplicas(ctx, g.Set, g.Target, to); err != nil {
			if !errors.Is(err, errSizeChanged) {
				errs = append(errs, err)
			}
			continue
		}
		klog.FromContext(ctx).Info("Undid a failed scale-up", "group", g.ID, "machines", marked, "from", g.Target, "to", to)
		changed = true
	}
	// A machine that cannot be marked, or a size that cannot be written,
	// is tried again next loop; it does not stop this loop's scale-up and
	// scale-down of the other groups.
	if err := errors.Join(errs...); err != nil {
		klog.FromContext(ctx).Error(err, "Undoing failed scale-ups")
		a.recorder.Eventf(status, corev1.EventTypeWarning, ReasonScaleUpFailed, "Undoing failed scale-ups: %v", err)
	}
	return changed, nil
}

// markForDeletion sets the annotation that makes a MachineSet delete this
// machine first when it shrinks.
func (a *Autoscaler) markForDeletion(ctx context.Context, m *machinev1.Machine) error {
	if _, ok := m.Annotations[machine.DeleteMachineAnnotation]; ok {
		return nil
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, machine.DeleteMachineAnnotation, a.opts.Clock.Now().UTC().Format(time.RFC3339))
	_, err := a.dynamic.Resource(machineResource).Namespace(m.Namespace).Patch(ctx, m.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("marking machine %s for deletion: %w", m.Name, err)
	}
	return nil
}
