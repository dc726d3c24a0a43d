package autoscaler

import (
	"testing"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Machines whose instance exists and has no node are unregistered, and
// longUnregistered once maxNodeProvisionTime has passed, as upstream's
// cluster state counts them; a machine without an instance yet, one with
// a node and one being deleted are neither.
func TestUnregisteredMachines(t *testing.T) {
	now := time.Unix(10000, 0)
	machine := func(age time.Duration, instance, node, deleting bool) *machinev1.Machine {
		m := &machinev1.Machine{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(now.Add(-age))}}
		if instance {
			m.Spec.ProviderID = ptr.To("sim://i")
		}
		if node {
			m.Status.NodeRef = &corev1.ObjectReference{Name: "n"}
		}
		if deleting {
			m.DeletionTimestamp = &metav1.Time{Time: now}
		}
		return m
	}
	st := &clusterState{cfg: &Config{MaxNodeProvisionTime: 15 * time.Minute}, groups: []*NodeGroup{{Machines: []*machinev1.Machine{
		machine(time.Minute, true, false, false),     // unregistered
		machine(20*time.Minute, true, false, false),  // long
		machine(20*time.Minute, false, false, false), // no instance yet
		machine(20*time.Minute, true, true, false),   // registered
		machine(20*time.Minute, true, false, true),   // deleting
	}}}}
	if u, l := unregisteredMachines(st, now); u != 1 || l != 1 {
		t.Errorf("unregistered %d, longUnregistered %d; want 1 and 1", u, l)
	}
}
