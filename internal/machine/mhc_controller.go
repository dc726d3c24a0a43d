package machine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/nodes"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// DefaultNodeStartupTimeout is how long a machine may go without a node.
const DefaultNodeStartupTimeout = 10 * time.Minute

// Event reasons of the MachineHealthCheck controller.
const (
	EventRemediationRestricted = "RemediationRestricted"
	EventDetectedUnhealthy     = "DetectedUnhealthy"
	EventSkippedNoController   = "SkippedNoController"
	EventMachineDeletionFailed = "MachineDeletionFailed"
	EventMachineDeleted        = "MachineDeleted"
)

// mhcReconciler checks the machines a MachineHealthCheck selects and
// deletes the unhealthy ones its MachineSet will replace, unless more are
// unhealthy than maxUnhealthy allows.
type mhcReconciler struct {
	client   client.Client
	recorder record.EventRecorder
}

// healthTarget is a machine under check and its node (nil: none yet;
// with an empty UID: named by the machine but gone).
type healthTarget struct {
	machine *machinev1.Machine
	node    *corev1.Node
}

func (r *mhcReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	mhc := &machinev1.MachineHealthCheck{}
	if err := r.client.Get(ctx, req.NamespacedName, mhc); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	log := klog.FromContext(ctx).WithValues("machinehealthcheck", klog.KObj(mhc))
	base := mhc.DeepCopy()
	targets, err := r.targets(ctx, mhc)
	if err != nil {
		return reconcile.Result{}, err
	}
	timeout := DefaultNodeStartupTimeout
	if mhc.Spec.NodeStartupTimeout != nil {
		timeout = mhc.Spec.NodeStartupTimeout.Duration
	}
	now := timeNow()
	var healthy []healthTarget
	var unhealthy []healthTarget
	var nextCheck time.Duration
	for _, t := range targets {
		bad, reason, next := needsRemediation(mhc, t, timeout, now)
		switch {
		case bad:
			log.V(2).Info("Machine is unhealthy", "machine", t.machine.Name, "reason", reason)
			unhealthy = append(unhealthy, t)
		case next > 0:
			r.recorder.Eventf(t.machine, corev1.EventTypeNormal, EventDetectedUnhealthy, "Machine %s/%s/%s/%s has unhealthy node %s",
				mhc.Namespace, mhc.Name, t.machine.Name, nodeName(t), nodeName(t))
			if nextCheck == 0 || next < nextCheck {
				nextCheck = next
			}
		case t.machine.DeletionTimestamp.IsZero() && t.node != nil:
			healthy = append(healthy, t)
		}
	}
	total, healthyCount := len(targets), len(healthy)
	mhc.Status.ExpectedMachines, mhc.Status.CurrentHealthy = &total, &healthyCount
	maxUnhealthy, err := maxUnhealthyOf(mhc, total)
	if err != nil {
		log.Error(err, "Remediation is not allowed")
	}
	unhealthyCount := total - healthyCount
	mhc.Status.RemediationsAllowed = int32(max(0, maxUnhealthy-unhealthyCount))
	cnow := metav1.NewTime(now)
	if err != nil || unhealthyCount > maxUnhealthy {
		mhc.Status.Conditions = setCondition(mhc.Status.Conditions, falseCondition(machinev1.RemediationAllowedCondition,
			machinev1.TooManyUnhealthyReason, machinev1.ConditionSeverityWarning,
			"Remediation is not allowed, the number of not started or unhealthy machines exceeds maxUnhealthy (total: %v, unhealthy: %v, maxUnhealthy: %v)",
			total, unhealthyCount, maxUnhealthyString(mhc)), cnow)
		if err := r.patchStatus(ctx, base, mhc); err != nil {
			return reconcile.Result{}, err
		}
		r.recorder.Eventf(mhc, corev1.EventTypeWarning, EventRemediationRestricted,
			"Remediation restricted due to exceeded number of unhealthy machines (total: %v, unhealthy: %v, maxUnhealthy: %v)",
			total, unhealthyCount, maxUnhealthyString(mhc))
		// Look again soon: machines recover, or the MachineSet grows.
		return reconcile.Result{RequeueAfter: 10 * time.Second}, nil
	}
	mhc.Status.Conditions = setCondition(mhc.Status.Conditions, trueCondition(machinev1.RemediationAllowedCondition, ""), cnow)
	if err := r.patchStatus(ctx, base, mhc); err != nil {
		return reconcile.Result{}, err
	}
	var errs []error
	base = mhc.DeepCopy()
	for _, t := range unhealthy {
		errs = append(errs, r.remediate(ctx, mhc, t))
	}
	r.cleanExternalRemediation(ctx, mhc, healthy)
	// External remediation's conditions, when it failed.
	errs = append(errs, r.patchStatus(ctx, base, mhc))
	if err := errors.Join(errs...); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: nextCheck}, nil
}

func (r *mhcReconciler) patchStatus(ctx context.Context, base, mhc *machinev1.MachineHealthCheck) error {
	if equality.Semantic.DeepEqual(base.Status, mhc.Status) {
		return nil
	}
	if err := r.client.Status().Patch(ctx, mhc, optimisticMerge(base)); err != nil {
		return fmt.Errorf("updating status of machinehealthcheck %s: %w", mhc.Name, err)
	}
	return nil
}

// remediate hands an unhealthy machine to external remediation when the
// check asks for it (see mhc_external.go); else it deletes the machine
// if a MachineSet owns (and so replaces) it, the deletion going through
// hooks and drain like any other.
func (r *mhcReconciler) remediate(ctx context.Context, mhc *machinev1.MachineHealthCheck, t healthTarget) error {
	m := t.machine
	id := fmt.Sprintf("%s/%s/%s/%s", mhc.Namespace, mhc.Name, m.Name, nodeName(t))
	if mhc.Spec.RemediationTemplate != nil {
		return r.externalRemediation(ctx, mhc, t)
	}
	if phaseOf(m) != machinev1.PhaseFailed && mhc.Annotations[RemediationStrategyAnnotation] == RemediationStrategyExternal {
		return r.annotateForExternal(ctx, id, m)
	}
	owner := metav1.GetControllerOf(m)
	if owner == nil || owner.Kind != machineSetKind.Kind {
		r.recorder.Eventf(m, corev1.EventTypeNormal, EventSkippedNoController, "Machine %v has no controller owner, skipping remediation", id)
		return nil
	}
	if !m.DeletionTimestamp.IsZero() {
		return nil
	}
	if err := r.client.Delete(ctx, m); err != nil && !apierrors.IsNotFound(err) {
		r.recorder.Eventf(m, corev1.EventTypeWarning, EventMachineDeletionFailed, "Machine %v remediation failed: unable to delete Machine object: %v", id, err)
		return fmt.Errorf("remediating machine %s: %w", m.Name, err)
	}
	mhcRemediations.WithLabelValues(mhc.Name, mhc.Namespace).Inc()
	r.recorder.Eventf(m, corev1.EventTypeNormal, EventMachineDeleted, "Machine %v has been remediated by requesting to delete Machine object", id)
	klog.FromContext(ctx).Info("Remediated unhealthy machine by deleting it", "machine", klog.KObj(m))
	return nil
}

func (r *mhcReconciler) targets(ctx context.Context, mhc *machinev1.MachineHealthCheck) ([]healthTarget, error) {
	sel, err := metav1.LabelSelectorAsSelector(&mhc.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("machinehealthcheck %s: invalid selector: %w", mhc.Name, err)
	}
	list := &machinev1.MachineList{}
	if err := r.client.List(ctx, list, client.InNamespace(mhc.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, err
	}
	out := make([]healthTarget, 0, len(list.Items))
	for i := range list.Items {
		t := healthTarget{machine: &list.Items[i]}
		if ref := t.machine.Status.NodeRef; ref != nil {
			node := &corev1.Node{}
			err := r.client.Get(ctx, types.NamespacedName{Name: ref.Name}, node)
			switch {
			case apierrors.IsNotFound(err):
				node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: ref.Name}}
			case err != nil:
				return nil, err
			}
			t.node = node
		}
		out = append(out, t)
	}
	return out, nil
}

func nodeName(t healthTarget) string {
	if t.node != nil {
		return t.node.Name
	}
	return ""
}

// needsRemediation reports whether a target is unhealthy and why; when it
// may become so later, next says when to look again.
func needsRemediation(mhc *machinev1.MachineHealthCheck, t healthTarget, startupTimeout time.Duration, now time.Time) (bool, string, time.Duration) {
	if phaseOf(t.machine) == machinev1.PhaseFailed {
		return true, "machine phase is Failed", 0
	}
	if t.node == nil {
		if startupTimeout == 0 || t.machine.Status.LastUpdated == nil {
			return false, "", startupTimeout
		}
		since := now.Sub(t.machine.Status.LastUpdated.Time)
		if since > startupTimeout {
			return true, fmt.Sprintf("machine has no node after %v", startupTimeout), 0
		}
		return false, "", startupTimeout - since + time.Second
	}
	if t.node.UID == "" {
		return true, "node is gone", 0
	}
	var next time.Duration
	for _, c := range mhc.Spec.UnhealthyConditions {
		cond := nodes.Condition(t.node, c.Type)
		if cond == nil || cond.Status != c.Status {
			continue
		}
		since := now.Sub(cond.LastTransitionTime.Time)
		if since > c.Timeout.Duration {
			return true, fmt.Sprintf("condition %s has been %s for longer than %v", c.Type, c.Status, c.Timeout.Duration), 0
		}
		if wait := c.Timeout.Duration - since + time.Second; next == 0 || wait < next {
			next = wait
		}
	}
	return false, "", next
}

// maxUnhealthyOf resolves maxUnhealthy (default 100%) against total; a
// percentage rounds down.
func maxUnhealthyOf(mhc *machinev1.MachineHealthCheck, total int) (int, error) {
	v := mhc.Spec.MaxUnhealthy
	if v == nil {
		return total, nil
	}
	if v.Type == intstr.Int {
		return max(0, v.IntValue()), nil
	}
	s := v.StrVal
	if pct, ok := strings.CutSuffix(s, "%"); ok {
		n, err := strconv.Atoi(pct)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("maxUnhealthy %q: not a percentage", s)
		}
		return int(math.Floor(float64(n) * float64(total) / 100)), nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("maxUnhealthy %q: neither a number nor a percentage", s)
	}
	return n, nil
}

func maxUnhealthyString(mhc *machinev1.MachineHealthCheck) string {
	if mhc.Spec.MaxUnhealthy == nil {
		return "100%"
	}
	return mhc.Spec.MaxUnhealthy.String()
}

// healthChecksFor maps a machine to the MachineHealthChecks selecting it.
func (r *mhcReconciler) healthChecksFor(ctx context.Context, m client.Object) []reconcile.Request {
	list := &machinev1.MachineHealthCheckList{}
	if err := r.client.List(ctx, list, client.InNamespace(m.GetNamespace())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		sel, err := metav1.LabelSelectorAsSelector(&list.Items[i].Spec.Selector)
		if err == nil && sel.Matches(labels.Set(m.GetLabels())) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return out
}

// healthChecksForNode maps a node to the checks of its machine.
func (r *mhcReconciler) healthChecksForNode(ctx context.Context, o client.Object) []reconcile.Request {
	if m := machineOfNode(ctx, r.client, o); m != nil {
		return r.healthChecksFor(ctx, m)
	}
	return nil
}
