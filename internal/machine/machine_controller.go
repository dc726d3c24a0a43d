package machine

import (
	"context"
	"errors"
	"fmt"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/capstan-dev/capstan/internal/failpoint"
)

// timeNow is the clock of the controllers.
var timeNow = time.Now

// machineReconciler drives a Machine through its phases: Provisioning while
// its instance is created, Provisioned once the cloud reports it, Running
// once its Node is linked; Failed when the cloud refuses it or its instance
// vanishes; Deleting from its deletion until its instance and Node are gone.
type machineReconciler struct {
	client client.Client
	// reader reads the API directly, past the cache.
	reader   client.Reader
	actuator Actuator
	recorder record.EventRecorder
	opts     *Options
}

func (r *machineReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	m := &machinev1.Machine{}
	if err := r.client.Get(ctx, req.NamespacedName, m); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !m.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, m)
	}
	if !controllerutil.ContainsFinalizer(m, machinev1.MachineFinalizer) {
		base := m.DeepCopy()
		controllerutil.AddFinalizer(m, machinev1.MachineFinalizer)
		return reconcile.Result{}, r.client.Patch(ctx, m, optimisticMerge(base))
	}
	if phaseOf(m) == machinev1.PhaseFailed {
		// A failed machine stays failed: its MachineSet or health check
		// replaces it.
		return reconcile.Result{}, nil
	}
	exists, err := r.actuator.Exists(ctx, m)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("checking the instance of machine %s: %w", m.Name, err)
	}
	if exists {
		return r.syncInstance(ctx, m)
	}
	if isProvisioned(m) || phaseOf(m) == "" {
		// Gone behind the Machine API's back (Failed), or a new machine
		// (Provisioning before anything is created).
		return reconcile.Result{}, writeMachineStatus(ctx, r.client, m.DeepCopy(), m, machineFacts{instance: instanceAbsent})
	}
	if err := r.actuator.Create(ctx, m); err != nil {
		r.recorder.Eventf(m, corev1.EventTypeWarning, EventFailedCreate, "CreateError: %v", err)
		var me *MachineError
		if errors.As(err, &me) && (me.Reason == machinev1.InvalidConfigurationMachineError || me.Reason == machinev1.InsufficientResourcesMachineError) {
			return reconcile.Result{}, writeMachineStatus(ctx, r.client, m.DeepCopy(), m, machineFacts{instance: instanceAbsent, failure: me})
		}
		return reconcile.Result{}, fmt.Errorf("creating the instance of machine %s: %w", m.Name, err)
	}
	failpoint.Hit(failpoint.MachineInstanceLaunched)
	r.recorder.Eventf(m, corev1.EventTypeNormal, EventCreated, "Created Machine %s", m.Name)
	return r.syncInstance(ctx, m)
}

// syncInstance copies what the cloud knows of an existing instance into
// the machine and sets its phase.
func (r *machineReconciler) syncInstance(ctx context.Context, m *machinev1.Machine) (reconcile.Result, error) {
	base := m.DeepCopy()
	if err := r.actuator.Update(ctx, m); err != nil {
		return reconcile.Result{}, err
	}
	if !equality.Semantic.DeepEqual(base.Spec.ProviderID, m.Spec.ProviderID) ||
		!equality.Semantic.DeepEqual(base.Labels, m.Labels) || !equality.Semantic.DeepEqual(base.Annotations, m.Annotations) {
		// Spec and metadata first; the status follows on the update event.
		return reconcile.Result{}, r.client.Patch(ctx, m, optimisticMerge(base))
	}
	if err := writeMachineStatus(ctx, r.client, base, m, machineFacts{instance: instancePresent}); err != nil {
		return reconcile.Result{}, err
	}
	if m.Status.NodeRef == nil {
		// The instance boots; its Node links the machine when it registers.
		return reconcile.Result{RequeueAfter: r.opts.InstancePollInterval}, nil
	}
	return reconcile.Result{}, nil
}

// reconcileDelete runs the deletion order: Deleting phase, the drain (the
// drain controller sets Drained, behind preDrain hooks), preTerminate
// hooks, the instance, the Node, the finalizer.
func (r *machineReconciler) reconcileDelete(ctx context.Context, m *machinev1.Machine) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(m, machinev1.MachineFinalizer) {
		return reconcile.Result{}, nil
	}
	if err := writeMachineStatus(ctx, r.client, m.DeepCopy(), m, machineFacts{}); err != nil {
		return reconcile.Result{}, err
	}
	log := klog.FromContext(ctx).WithValues("machine", klog.KObj(m))
	if !conditionTrue(m.Status.Conditions, machinev1.MachineDrained) {
		log.V(2).Info("Waiting for the node to be drained before deleting the instance")
		return reconcile.Result{}, nil
	}
	if drainUnderWay(m.Name) {
		// Only with the planted bug DrainedBeforeEviction.
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	if len(m.Spec.LifecycleHooks.PreTerminate) > 0 {
		log.V(2).Info("Not deleting the instance: lifecycle blocked by pre-terminate hooks", "hooks", m.Spec.LifecycleHooks.PreTerminate)
		r.recorder.Event(m, corev1.EventTypeNormal, EventTerminateBlocked, "Terminate blocked by pre-terminate hook")
		return reconcile.Result{}, nil
	}
	if err := r.actuator.Delete(ctx, m); err != nil {
		r.recorder.Eventf(m, corev1.EventTypeWarning, EventFailedDelete, "DeleteError: %v", err)
		return reconcile.Result{}, fmt.Errorf("deleting the instance of machine %s: %w", m.Name, err)
	}
	exists, err := r.actuator.Exists(ctx, m)
	if err != nil {
		return reconcile.Result{}, err
	}
	if exists {
		log.V(2).Info("Instance is terminating, requeuing")
		return reconcile.Result{RequeueAfter: r.opts.InstancePollInterval}, nil
	}
	nodes, err := nodesOfMachine(ctx, r.client, r.reader, m)
	if err != nil {
		return reconcile.Result{}, err
	}
	for _, name := range nodes {
		node := &corev1.Node{}
		node.Name = name
		if err := r.client.Delete(ctx, node); err != nil && !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("deleting node %s of machine %s: %w", name, m.Name, err)
		}
		log.Info("Deleted the node of the machine", "node", name)
	}
	base := m.DeepCopy()
	controllerutil.RemoveFinalizer(m, machinev1.MachineFinalizer)
	if err := r.client.Patch(ctx, m, optimisticMerge(base)); err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	log.Info("Machine deleted")
	return reconcile.Result{}, nil
}
