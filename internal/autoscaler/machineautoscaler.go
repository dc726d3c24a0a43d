package autoscaler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	autoscalingv1beta1 "github.com/capstan-dev/capstan/internal/autoscaler/apis/v1beta1"
)

// The annotations through which a MachineSet becomes a node group, with
// OpenShift's keys.
const (
	// MinSizeAnnotation and MaxSizeAnnotation bound a MachineSet's replicas.
	MinSizeAnnotation = "machine.openshift.io/cluster-api-autoscaler-node-group-min-size"
	MaxSizeAnnotation = "machine.openshift.io/cluster-api-autoscaler-node-group-max-size"
	// TargetOwnerAnnotation on a MachineSet names the MachineAutoscaler
	// (namespace/name) that wrote its bounds.
	TargetOwnerAnnotation = "autoscaling.openshift.io/machineautoscaler"
	// TargetFinalizer keeps a MachineAutoscaler until its bounds are taken
	// off its target.
	TargetFinalizer = "machinetarget.autoscaling.openshift.io"
)

// machineAutoscalerReconciler writes a MachineAutoscaler's bounds onto its
// MachineSet, and takes them off when the MachineAutoscaler goes or points
// elsewhere, as OpenShift's cluster-autoscaler-operator does.
type machineAutoscalerReconciler struct {
	client   client.Client
	recorder record.EventRecorder
}

func addMachineAutoscalerController(mgr ctrl.Manager) error {
	r := &machineAutoscalerReconciler{client: mgr.GetClient(), recorder: mgr.GetEventRecorderFor("machine-autoscaler-controller")}
	return ctrl.NewControllerManagedBy(mgr).Named("machine-autoscaler-controller").
		For(&autoscalingv1beta1.MachineAutoscaler{}).
		Watches(&machinev1.MachineSet{}, handler.EnqueueRequestsFromMapFunc(ownerOfTarget)).
		// Each cluster a process runs has its own (tests, benchmarks).
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		Complete(r)
}

// ownerOfTarget maps a MachineSet to the MachineAutoscaler that owns it, so
// that bounds edited or removed by hand are written again.
func ownerOfTarget(_ context.Context, o client.Object) []reconcile.Request {
	owner, ok := parseOwner(o.GetAnnotations()[TargetOwnerAnnotation])
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: owner}}
}

func parseOwner(v string) (types.NamespacedName, bool) {
	ns, name, ok := strings.Cut(v, "/")
	if !ok || ns == "" || name == "" {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: ns, Name: name}, true
}

// errTargetOwned is returned when another MachineAutoscaler owns the target.
var errTargetOwned = errors.New("target already owned by another MachineAutoscaler")

func (r *machineAutoscalerReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ma := &autoscalingv1beta1.MachineAutoscaler{}
	if err := r.client.Get(ctx, req.NamespacedName, ma); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if ma.DeletionTimestamp != nil {
		return reconcile.Result{}, r.finalize(ctx, ma)
	}
	if !slices.Contains(ma.Finalizers, TargetFinalizer) {
		ma.Finalizers = append(ma.Finalizers, TargetFinalizer)
		if err := r.client.Update(ctx, ma); err != nil {
			return reconcile.Result{}, fmt.Errorf("adding finalizer: %w", err)
		}
	}
	// A retargeted MachineAutoscaler releases the MachineSet it had.
	if last := ma.Status.LastTargetRef; last != nil && *last != ma.Spec.ScaleTargetRef {
		if err := r.release(ctx, ma, last.Name); err != nil {
			r.recorder.Eventf(ma, corev1.EventTypeWarning, "FailedFinalizeTarget", "Error finalizing previous target: %v", err)
			return reconcile.Result{}, err
		}
	}
	ref := ma.Spec.ScaleTargetRef
	if ma.Status.LastTargetRef == nil || *ma.Status.LastTargetRef != ref {
		ma.Status.LastTargetRef = &ref
		if err := r.client.Status().Update(ctx, ma); err != nil {
			r.recorder.Eventf(ma, corev1.EventTypeWarning, "FailedSetLastTarget", "Error setting previous target: %v", err)
			return reconcile.Result{}, err
		}
	}
	ms := &machinev1.MachineSet{}
	if err := r.client.Get(ctx, types.NamespacedName{Namespace: ma.Namespace, Name: ref.Name}, ms); err != nil {
		r.recorder.Eventf(ma, corev1.EventTypeWarning, "FailedGetTarget", "Error getting target: %v", err)
		return reconcile.Result{}, err
	}
	changed, err := setBounds(ms, ma)
	if err != nil {
		r.recorder.Eventf(ma, corev1.EventTypeWarning, "FailedSetOwner", "Error setting target owner: %v", err)
		// Nothing this controller does can free the target: wait for a change.
		return reconcile.Result{}, nil
	}
	if !changed {
		return reconcile.Result{}, nil
	}
	if err := r.client.Update(ctx, ms); err != nil {
		r.recorder.Eventf(ma, corev1.EventTypeWarning, "FailedUpdateTarget", "Error updating target: %v", err)
		return reconcile.Result{}, err
	}
	klog.FromContext(ctx).V(2).Info("Updated MachineAutoscaler target", "machineSet", klog.KObj(ms), "min", ma.Spec.MinReplicas, "max", ma.Spec.MaxReplicas)
	r.recorder.Eventf(ma, corev1.EventTypeNormal, "SuccessfulUpdate", "Updated MachineAutoscaler target: %s/%s", ms.Namespace, ms.Name)
	return reconcile.Result{}, nil
}

// setBounds writes ma's ownership and bounds onto ms and reports whether
// anything changed.
func setBounds(ms *machinev1.MachineSet, ma *autoscalingv1beta1.MachineAutoscaler) (bool, error) {
	owner := ma.Namespace + "/" + ma.Name
	if cur, ok := ms.Annotations[TargetOwnerAnnotation]; ok && cur != owner {
		return false, fmt.Errorf("%w: MachineSet %s is owned by %s", errTargetOwned, ms.Name, cur)
	}
	want := map[string]string{
		TargetOwnerAnnotation: owner,
		MinSizeAnnotation:     strconv.Itoa(int(ma.Spec.MinReplicas)),
		MaxSizeAnnotation:     strconv.Itoa(int(ma.Spec.MaxReplicas)),
	}
	changed := false
	for k, v := range want {
		if ms.Annotations[k] != v {
			if ms.Annotations == nil {
				ms.Annotations = map[string]string{}
			}
			ms.Annotations[k] = v
			changed = true
		}
	}
	return changed, nil
}

// release takes ma's bounds off MachineSet name, if ma owns it.
func (r *machineAutoscalerReconciler) release(ctx context.Context, ma *autoscalingv1beta1.MachineAutoscaler, name string) error {
	ms := &machinev1.MachineSet{}
	if err := r.client.Get(ctx, types.NamespacedName{Namespace: ma.Namespace, Name: name}, ms); err != nil {
		return client.IgnoreNotFound(err)
	}
	if ms.Annotations[TargetOwnerAnnotation] != ma.Namespace+"/"+ma.Name {
		return nil
	}
	delete(ms.Annotations, TargetOwnerAnnotation)
	delete(ms.Annotations, MinSizeAnnotation)
	delete(ms.Annotations, MaxSizeAnnotation)
	if err := r.client.Update(ctx, ms); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// finalize releases the targets of a deleted MachineAutoscaler and lets it
// go.
func (r *machineAutoscalerReconciler) finalize(ctx context.Context, ma *autoscalingv1beta1.MachineAutoscaler) error {
	if !slices.Contains(ma.Finalizers, TargetFinalizer) {
		return nil
	}
	names := []string{ma.Spec.ScaleTargetRef.Name}
	if last := ma.Status.LastTargetRef; last != nil && last.Name != names[0] {
		names = append(names, last.Name)
	}
	for _, name := range names {
		if err := r.release(ctx, ma, name); err != nil {
			r.recorder.Eventf(ma, corev1.EventTypeWarning, "FailedFinalizeTarget", "Error finalizing target: %v", err)
			return err
		}
	}
	ma.Finalizers = slices.DeleteFunc(ma.Finalizers, func(f string) bool { return f == TargetFinalizer })
	return client.IgnoreNotFound(r.client.Update(ctx, ma))
}
