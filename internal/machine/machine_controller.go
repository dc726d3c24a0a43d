package machine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
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
	base := m.DeepCopy()
	exists, err := r.actuator.Exists(ctx, m)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("checking the instance of machine %s: %w", m.Name, err)
	}
	if exists {
		return r.syncInstance(ctx, base, m)
	}
	now := metav1.NewTime(timeNow())
	if isProvisioned(m) {
		// Deleted outside the Machine API.
		m.Status.Conditions = setCondition(m.Status.Conditions, falseCondition(machinev1.InstanceExistsCondition,
			machinev1.InstanceMissingReason, machinev1.ConditionSeverityWarning, "Instance not found on provider"), now)
		return reconcile.Result{}, r.patchStatus(ctx, base, m, machinev1.PhaseFailed, errors.New("Can't find created instance."))
	}
	m.Status.Conditions = setCondition(m.Status.Conditions, falseCondition(machinev1.InstanceExistsCondition,
		machinev1.InstanceNotCreatedReason, machinev1.ConditionSeverityWarning, "Instance has not been created"), now)
	if phaseOf(m) == "" {
		return reconcile.Result{}, r.patchStatus(ctx, base, m, machinev1.PhaseProvisioning, nil)
	}
	if err := r.actuator.Create(ctx, m); err != nil {
		r.recorder.Eventf(m, corev1.EventTypeWarning, EventFailedCreate, "CreateError: %v", err)
		var me *MachineError
		if errors.As(err, &me) && (me.Reason == machinev1.InvalidConfigurationMachineError || me.Reason == machinev1.InsufficientResourcesMachineError) {
			return reconcile.Result{}, r.patchStatus(ctx, base, m, machinev1.PhaseFailed, me)
		}
		return reconcile.Result{}, fmt.Errorf("creating the instance of machine %s: %w", m.Name, err)
	}
	r.recorder.Eventf(m, corev1.EventTypeNormal, EventCreated, "Created Machine %s", m.Name)
	return r.syncInstance(ctx, base, m)
}

// syncInstance copies what the cloud knows of an existing instance into
// the machine and sets its phase.
func (r *machineReconciler) syncInstance(ctx context.Context, base, m *machinev1.Machine) (reconcile.Result, error) {
	if err := r.actuator.Update(ctx, m); err != nil {
		return reconcile.Result{}, err
	}
	if !equality.Semantic.DeepEqual(base.Spec.ProviderID, m.Spec.ProviderID) ||
		!equality.Semantic.DeepEqual(base.Labels, m.Labels) || !equality.Semantic.DeepEqual(base.Annotations, m.Annotations) {
		// Spec and metadata first; the status follows on the update event.
		return reconcile.Result{}, r.client.Patch(ctx, m, optimisticMerge(base))
	}
	m.Status.Conditions = setCondition(m.Status.Conditions, trueCondition(machinev1.InstanceExistsCondition, ""), metav1.NewTime(timeNow()))
	phase := machinev1.PhaseRunning
	if m.Status.NodeRef == nil {
		phase = machinev1.PhaseProvisioned
	}
	if err := r.patchStatus(ctx, base, m, phase, nil); err != nil {
		return reconcile.Result{}, err
	}
	if phase != machinev1.PhaseRunning {
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
	base := m.DeepCopy()
	if err := r.patchStatus(ctx, base, m, machinev1.PhaseDeleting, nil); err != nil {
		return reconcile.Result{}, err
	}
	log := klog.FromContext(ctx).WithValues("machine", klog.KObj(m))
	if !conditionTrue(m.Status.Conditions, machinev1.MachineDrained) {
		log.V(2).Info("Waiting for the node to be drained before deleting the instance")
		return reconcile.Result{}, nil
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
	nodes, err := r.nodesOf(ctx, m)
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
	base = m.DeepCopy()
	controllerutil.RemoveFinalizer(m, machinev1.MachineFinalizer)
	if err := r.client.Patch(ctx, m, optimisticMerge(base)); err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	log.Info("Machine deleted")
	return reconcile.Result{}, nil
}

// nodesOf names the machine's node: its nodeRef, or, for a machine deleted
// before nodelink linked it (its provider ID perhaps not even recorded),
// the nodes that registered for it: by provider ID or machine annotation
// in the cache, and, since the cache may lag a node that registered just
// now, read from the API under the machine's name and hostnames.
func (r *machineReconciler) nodesOf(ctx context.Context, m *machinev1.Machine) ([]string, error) {
	if ref := m.Status.NodeRef; ref != nil {
		return []string{ref.Name}, nil
	}
	id := ptr.Deref(m.Spec.ProviderID, "")
	key := client.ObjectKeyFromObject(m)
	belongs := func(n *corev1.Node) bool {
		named, ok := MachineOfNode(n)
		return ok && named == key || id != "" && n.Spec.ProviderID == id
	}
	var names []string
	add := func(n *corev1.Node) {
		if belongs(n) && !slices.Contains(names, n.Name) {
			names = append(names, n.Name)
		}
	}
	for field, value := range map[string]string{nodeProviderIDIndex: id, nodeMachineIndex: key.String()} {
		if value == "" {
			continue
		}
		list := &corev1.NodeList{}
		if err := r.client.List(ctx, list, client.MatchingFields{field: value}); err != nil {
			return nil, err
		}
		for i := range list.Items {
			add(&list.Items[i])
		}
	}
	candidates := []string{m.Name}
	for _, a := range m.Status.Addresses {
		if a.Type == corev1.NodeHostName || a.Type == corev1.NodeInternalDNS {
			candidates = append(candidates, a.Address)
		}
	}
	for _, name := range candidates {
		if slices.Contains(names, name) {
			continue
		}
		node := &corev1.Node{}
		err := r.reader.Get(ctx, client.ObjectKey{Name: name}, node)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		add(node)
	}
	return names, nil
}

// patchStatus sets the phase, the failure and the lifecycle hook
// conditions, and writes the status if it changed. The patch carries the
// resourceVersion read, so a concurrent writer (the drain controller,
// nodelink) is never overwritten: a conflict retries the reconcile.
func (r *machineReconciler) patchStatus(ctx context.Context, base, m *machinev1.Machine, phase string, failure error) error {
	now := metav1.NewTime(timeNow())
	m.Status.Phase = ptr.To(phase)
	m.Status.ErrorReason, m.Status.ErrorMessage = nil, nil
	if phase == machinev1.PhaseFailed && failure != nil {
		var me *MachineError
		if errors.As(failure, &me) {
			m.Status.ErrorReason = ptr.To(me.Reason)
		}
		m.Status.ErrorMessage = ptr.To(failure.Error())
	} else if phase == machinev1.PhaseDeleting {
		// A failed machine keeps saying why while it is deleted.
		m.Status.ErrorReason, m.Status.ErrorMessage = base.Status.ErrorReason, base.Status.ErrorMessage
	}
	setLifecycleHookConditions(m, now)
	if equality.Semantic.DeepEqual(base.Status, m.Status) {
		return nil
	}
	m.Status.LastUpdated = &now
	return r.client.Status().Patch(ctx, m, optimisticMerge(base))
}

func optimisticMerge(base client.Object) client.Patch {
	return client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})
}

func phaseOf(m *machinev1.Machine) string { return ptr.Deref(m.Status.Phase, "") }

func isProvisioned(m *machinev1.Machine) bool {
	return len(m.Status.Addresses) > 0 || ptr.Deref(m.Spec.ProviderID, "") != ""
}
