package machine

import (
	"context"
	"errors"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The one place a Machine's phase, error fields and conditions are set:
// each controller records what it observed as machineFacts, and
// setMachineStatus derives the status from them, as Cluster API's
// machine_controller_status.go does.

// instanceFact is what the cloud said of a machine's instance.
type instanceFact int

const (
	instanceUnknown instanceFact = iota // not asked in this reconcile
	instanceAbsent                      // no instance
	instancePresent                     // the instance exists (running, booting or terminating)
)

// machineFacts is what one reconcile learned about a machine.
type machineFacts struct {
	instance instanceFact
	// failure is a refusal the machine cannot recover from: it goes Failed
	// with this error (a *MachineError gives the errorReason).
	failure error
	// nodeRef links the machine to its node (nodelink).
	nodeRef *corev1.ObjectReference
	// drained is the outcome of a drain (the drain controller).
	drained *machinev1.Condition
}

// Messages of the status, as OpenShift's machine controller words them.
const (
	msgInstanceMissing    = "Instance not found on provider"
	msgInstanceNotCreated = "Instance has not been created"
	msgCantFindInstance   = "Can't find created instance."
)

// setMachineStatus applies facts to m's status:
//
//   - Deleting from the deletion on (keeping a failure's error fields);
//   - Failed, and for good, on a failure or when an instance that was
//     provisioned is gone;
//   - Running with an instance and a node, Provisioned with an instance
//     only, Provisioning while the instance does not exist yet;
//   - InstanceExists from the cloud's answer, Drained from the drain,
//     Drainable and Terminable from the lifecycle hooks.
func setMachineStatus(m *machinev1.Machine, f machineFacts, now metav1.Time) {
	st := &m.Status
	if f.nodeRef != nil {
		st.NodeRef = f.nodeRef
	}
	if f.drained != nil {
		st.Conditions = setCondition(st.Conditions, *f.drained, now)
	}
	switch f.instance {
	case instancePresent:
		st.Conditions = setCondition(st.Conditions, trueCondition(machinev1.InstanceExistsCondition, ""), now)
	case instanceAbsent:
		if isProvisioned(m) {
			st.Conditions = setCondition(st.Conditions, falseCondition(machinev1.InstanceExistsCondition,
				machinev1.InstanceMissingReason, machinev1.ConditionSeverityWarning, msgInstanceMissing), now)
		} else {
			st.Conditions = setCondition(st.Conditions, falseCondition(machinev1.InstanceExistsCondition,
				machinev1.InstanceNotCreatedReason, machinev1.ConditionSeverityWarning, msgInstanceNotCreated), now)
		}
	}
	failure := f.failure
	if failure == nil && f.instance == instanceAbsent && isProvisioned(m) && m.DeletionTimestamp.IsZero() {
		// Deleted outside the Machine API.
		failure = errors.New(msgCantFindInstance)
	}
	switch phase := phaseOf(m); {
	case !m.DeletionTimestamp.IsZero():
		st.Phase = ptr.To(machinev1.PhaseDeleting)
	case phase == machinev1.PhaseFailed:
		// A failed machine stays failed: its MachineSet or health check
		// replaces it.
	case failure != nil:
		st.Phase = ptr.To(machinev1.PhaseFailed)
		st.ErrorReason, st.ErrorMessage = nil, ptr.To(failure.Error())
		var me *MachineError
		if errors.As(failure, &me) {
			st.ErrorReason = ptr.To(me.Reason)
		}
	case f.instance == instancePresent && st.NodeRef != nil:
		st.Phase = ptr.To(machinev1.PhaseRunning)
	case f.instance == instancePresent:
		st.Phase = ptr.To(machinev1.PhaseProvisioned)
	case f.instance == instanceAbsent:
		st.Phase = ptr.To(machinev1.PhaseProvisioning)
	case phase == machinev1.PhaseProvisioned && st.NodeRef != nil:
		// The node registered: its instance exists.
		st.Phase = ptr.To(machinev1.PhaseRunning)
	}
	setLifecycleHookConditions(m, now)
}

// writeMachineStatus applies facts to m and writes its status if it
// differs from base, the machine as read (m may carry more the reconcile
// learned, such as the addresses the actuator filled in). The patch
// carries the resourceVersion read, so that a concurrent writer (another
// controller) is never overwritten: a conflict retries the reconcile.
func writeMachineStatus(ctx context.Context, c client.Client, base, m *machinev1.Machine, f machineFacts) error {
	now := metav1.NewTime(timeNow())
	setMachineStatus(m, f, now)
	if equality.Semantic.DeepEqual(base.Status, m.Status) {
		return nil
	}
	m.Status.LastUpdated = &now
	return c.Status().Patch(ctx, m, optimisticMerge(base))
}

func optimisticMerge(base client.Object) client.Patch {
	return client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})
}

func phaseOf(m *machinev1.Machine) string { return ptr.Deref(m.Status.Phase, "") }

func isProvisioned(m *machinev1.Machine) bool {
	return len(m.Status.Addresses) > 0 || ptr.Deref(m.Spec.ProviderID, "") != ""
}
