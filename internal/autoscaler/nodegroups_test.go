package autoscaler

import (
	"strings"
	"testing"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	autoscalingv1beta1 "github.com/capstan-dev/capstan/internal/autoscaler/apis/v1beta1"
	"github.com/capstan-dev/capstan/internal/machine"
)

// A MachineSet is a node group only with usable bounds; bad ones are
// reported with what is wrong, and max 0 is simply not autoscaled.
func TestNodeGroupsFromAnnotations(t *testing.T) {
	ok := machineSet("ok", "capstan.large", "", 1, 1, 3)
	noMax := machineSet("no-max", "capstan.large", "", 1, 0, 3)
	delete(noMax.Annotations, MaxSizeAnnotation)
	zero := machineSet("zero", "capstan.large", "", 0, 0, 0)
	badMin := machineSet("bad-min", "capstan.large", "", 0, 0, 3)
	badMin.Annotations[MinSizeAnnotation] = "one"
	inverted := machineSet("inverted", "capstan.large", "", 0, 4, 2)
	groups, bad := NodeGroups([]*machinev1.MachineSet{ok, noMax, zero, badMin, inverted}, nil, nil, nil, fixtureNow, MaxNodeStartupTime)
	if len(groups) != 1 || groups[0].ID != "MachineSet/openshift-machine-api/ok" || groups[0].Min != 1 || groups[0].Max != 3 || groups[0].Upcoming() != 1 {
		t.Fatalf("groups %v", groups)
	}
	want := map[string]string{
		"MachineSet/openshift-machine-api/bad-min":  `annotation machine.openshift.io/cluster-api-autoscaler-node-group-min-size="one" is not a number of replicas`,
		"MachineSet/openshift-machine-api/inverted": "max size 2 is below min size 4",
	}
	if len(bad) != len(want) {
		t.Fatalf("bad groups %v", bad)
	}
	for _, b := range bad {
		if b.Err.Error() != want[b.ID] {
			t.Errorf("%s: %v, want %s", b.ID, b.Err, want[b.ID])
		}
	}
}

// The template is the node the simulated cloud registers for the
// MachineSet, with the scale-from-zero annotations winning where set.
func TestTemplateNode(t *testing.T) {
	ms := machineSet("gpu", "capstan.gpu.xlarge", "sim-zone-b", 0, 0, 3)
	ms.Spec.Template.Spec.Labels = map[string]string{"pool": "gpu"}
	ms.Spec.Template.Spec.Taints = []corev1.Taint{{Key: "gpu", Effect: corev1.TaintEffectNoSchedule}}
	n, err := templateNode(ms)
	if err != nil {
		t.Fatal(err)
	}
	if n.Labels["pool"] != "gpu" || n.Labels[corev1.LabelTopologyZone] != "sim-zone-b" || len(n.Spec.Taints) != 1 {
		t.Errorf("labels %v taints %v", n.Labels, n.Spec.Taints)
	}
	if n.Status.Allocatable.Cpu().Value() != 8 || n.Status.Allocatable.Name("nvidia.com/gpu", "").Value() != 1 {
		t.Errorf("allocatable %v", n.Status.Allocatable)
	}
	ms.Annotations[machine.CPUAnnotation] = "16"
	ms.Annotations[machine.MemoryAnnotation] = "65536"
	ms.Annotations[machine.GPUAnnotation] = "4"
	if n, err = templateNode(ms); err != nil {
		t.Fatal(err)
	}
	if n.Status.Allocatable.Cpu().Value() != 16 || n.Status.Allocatable.Memory().Value() != 64<<30 || n.Status.Allocatable.Name("nvidia.com/gpu", "").Value() != 4 {
		t.Errorf("annotations not applied: %v", n.Status.Allocatable)
	}
	ms.Annotations[machine.MemoryAnnotation] = "lots"
	if _, err := templateNode(ms); err == nil || !strings.Contains(err.Error(), `machine.openshift.io/memoryMb="lots"`) {
		t.Errorf("bad annotation: %v", err)
	}
}

// A MachineAutoscaler writes its bounds and ownership, leaves a MachineSet
// another one owns alone, and says so.
func TestSetBounds(t *testing.T) {
	ms := &machinev1.MachineSet{ObjectMeta: metav1.ObjectMeta{Name: "w"}}
	ma := &autoscalingv1beta1.MachineAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns"},
		Spec: autoscalingv1beta1.MachineAutoscalerSpec{MinReplicas: 1, MaxReplicas: 5}}
	changed, err := setBounds(ms, ma)
	if err != nil || !changed {
		t.Fatalf("changed %v err %v", changed, err)
	}
	if ms.Annotations[MinSizeAnnotation] != "1" || ms.Annotations[MaxSizeAnnotation] != "5" || ms.Annotations[TargetOwnerAnnotation] != "ns/a" {
		t.Errorf("annotations %v", ms.Annotations)
	}
	if changed, _ := setBounds(ms, ma); changed {
		t.Error("rewrote unchanged bounds")
	}
	other := ma.DeepCopy()
	other.Name = "b"
	if _, err := setBounds(ms, other); err == nil || !strings.Contains(err.Error(), "MachineSet w is owned by ns/a") {
		t.Errorf("second owner: %v", err)
	}
	if owner, ok := parseOwner("ns/a"); !ok || owner.Name != "a" {
		t.Errorf("parseOwner: %v %v", owner, ok)
	}
	for _, bad := range []string{"", "a", "/a", "ns/"} {
		if _, ok := parseOwner(bad); ok {
			t.Errorf("parseOwner(%q) accepted", bad)
		}
	}
}
