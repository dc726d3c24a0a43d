package machine

import (
	"strings"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Namespace is where the Machine API objects live, as in OpenShift.
const Namespace = "openshift-machine-api"

// Annotations and labels, with OpenShift's keys.
const (
	// MachineAnnotation on a Node names its Machine as namespace/name.
	MachineAnnotation = "machine.openshift.io/machine"
	// DeleteMachineAnnotation marks a Machine its MachineSet deletes first
	// when it scales down.
	DeleteMachineAnnotation = "machine.openshift.io/delete-machine"
	// oldDeleteMachineAnnotation is the earlier spelling, still honoured.
	oldDeleteMachineAnnotation = "machine.openshift.io/cluster-api-delete-machine"
	// ExcludeNodeDrainingAnnotation skips the drain of a deleted Machine.
	ExcludeNodeDrainingAnnotation = "machine.openshift.io/exclude-node-draining"
	// InstanceStateAnnotation is the cloud's state of the instance.
	InstanceStateAnnotation = "machine.openshift.io/instance-state"

	ClusterIDLabel    = machinev1.MachineClusterIDLabel
	MachineRoleLabel  = "machine.openshift.io/cluster-api-machine-role"
	MachineTypeLabel  = "machine.openshift.io/cluster-api-machine-type"
	MachineSetLabel   = "machine.openshift.io/cluster-api-machineset"
	InstanceTypeLabel = "machine.openshift.io/instance-type"
	RegionLabel       = "machine.openshift.io/region"
	ZoneLabel         = "machine.openshift.io/zone"
)

// Event reasons, as the OpenShift machine controllers name them.
const (
	EventDrainBlocked = "DrainBlocked"
	// EventTerminateBlocked is capstan's counterpart of DrainBlocked for
	// preTerminate hooks (OpenShift only logs it): the machine is drained
	// and waits for its hooks before its instance is deleted.
	EventTerminateBlocked = "TerminateBlocked"
	EventDrainProceeds    = "DrainProceeds"
	EventDrainSucceeded   = "DrainSucceeded"
	EventDrainRequeued    = "DrainRequeued"
	EventDrainSkipped     = "DrainSkipped"
	EventDeleted          = "Deleted"
	EventFailedCreate     = "FailedCreate"
	EventCreated          = "Create"
	EventFailedDelete     = "FailedDelete"
)

// MachineOfNode reads the machine.openshift.io/machine annotation of a
// node: the namespace and name of its Machine, and whether it names one.
func MachineOfNode(node metav1.Object) (types.NamespacedName, bool) {
	ns, name, ok := strings.Cut(node.GetAnnotations()[MachineAnnotation], "/")
	if !ok || ns == "" || name == "" {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: ns, Name: name}, true
}

// machineAnnotationValue is what nodelink writes for machine m.
func machineAnnotationValue(m metav1.Object) string { return m.GetNamespace() + "/" + m.GetName() }
