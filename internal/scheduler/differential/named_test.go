package differential

import (
	"context"
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// Named cases: one for each behaviour the generated ones may meet too
// rarely to be sure of, each with the outcome it must have, so that the
// comparison cannot pass by both schedulers ignoring the field.

func namedNode(name, zone, cpu string) *corev1.Node {
	alloc := corev1.ResourceList{corev1.ResourceCPU: quantity(cpu), corev1.ResourceMemory: quantity("8Gi"), corev1.ResourcePods: quantity("110")}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-node-" + name),
		Labels: map[string]string{corev1.LabelHostname: name, corev1.LabelTopologyZone: zone}},
		Status: corev1.NodeStatus{Allocatable: alloc, Capacity: alloc, Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
}

func namedPod(name, node, cpu string, prio int32, labels map[string]string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns-a", UID: types.UID("uid-pod-" + name), Labels: labels},
		Spec: corev1.PodSpec{SchedulerName: corev1.DefaultSchedulerName, NodeName: node, Priority: ptr.To(prio),
			Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: quantity(cpu)}}}}}}
	if node != "" {
		p.Status.Phase, p.Status.StartTime = corev1.PodRunning, &metav1.Time{Time: epoch}
	}
	return p
}

func claimVolume(claim string) corev1.Volume {
	return corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
}

// boundClaim is a claim the volume controller bound to a CSI volume.
func boundClaim(name, pv string, modes ...corev1.PersistentVolumeAccessMode) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	if len(modes) == 0 {
		modes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns-a", UID: types.UID("uid-pvc-" + name),
		Annotations: map[string]string{"pv.kubernetes.io/bind-completed": "yes"}},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: modes, VolumeName: pv, StorageClassName: ptr.To("wffc"),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: quantity("1Gi")}}},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}}
	vol := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pv},
		Spec: corev1.PersistentVolumeSpec{AccessModes: modes, StorageClassName: "wffc", Capacity: corev1.ResourceList{corev1.ResourceStorage: quantity("1Gi")},
			ClaimRef:               &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "ns-a", Name: name, UID: pvc.UID},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: ebsDriver, VolumeHandle: "h-" + pv}}},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeBound}}
	return pvc, vol
}

func wffcClass() *storagev1.StorageClass {
	m := storagev1.VolumeBindingWaitForFirstConsumer
	return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "wffc"}, Provisioner: ebsDriver, VolumeBindingMode: &m}
}

func nsObjects() []*corev1.Namespace {
	return []*corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "ns-a", Labels: map[string]string{corev1.LabelMetadataName: "ns-a"}}}}
}

func TestNamedCasesAgreeWithKubeScheduler(t *testing.T) {
	app := map[string]string{"app": "web"}
	cases := []struct {
		name string
		c    func() *Case
		// feasible is the outcome both must reach; chosen, for a pod that
		// fits nowhere, the node preemption must pick ("" for none).
		feasible []string
		chosen   string
	}{
		{"a critical pod is fitted like any other", func() *Case {
			p := namedPod("incoming", "", "3", 2000001000, nil)
			return &Case{Namespaces: nsObjects(), Nodes: []*corev1.Node{namedNode("a", "zone-a", "2")}, Pod: p}
		}, nil, ""},
		{"a sidecar's host port is taken on its node", func() *Case {
			held := namedPod("sidecar-pod", "a", "100m", 0, nil)
			held.Spec.InitContainers = []corev1.Container{{Name: "proxy", Image: "registry.example/proxy:1", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
				Ports: []corev1.ContainerPort{{ContainerPort: 80, HostPort: 8080, Protocol: corev1.ProtocolTCP}}}}
			p := namedPod("incoming", "", "100m", 0, nil)
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 8080, Protocol: corev1.ProtocolTCP}}
			return &Case{Namespaces: nsObjects(), Nodes: []*corev1.Node{namedNode("a", "zone-a", "4"), namedNode("b", "zone-a", "4")}, Pods: []*corev1.Pod{held}, Pod: p}
		}, []string{"b"}, ""},
		{"a ReadWriteOncePod claim in use is preempted for", func() *Case {
			pvc, pv := boundClaim("rwop", "pv-rwop", corev1.ReadWriteOncePod)
			holder := namedPod("holder", "a", "100m", 0, nil)
			holder.Spec.Volumes = []corev1.Volume{claimVolume("rwop")}
			p := namedPod("incoming", "", "100m", 100, nil)
			p.Spec.Volumes = []corev1.Volume{claimVolume("rwop")}
			return &Case{Namespaces: nsObjects(), Nodes: []*corev1.Node{namedNode("a", "zone-a", "4"), namedNode("b", "zone-a", "4")},
				Pods: []*corev1.Pod{holder}, Claims: []*corev1.PersistentVolumeClaim{pvc}, Volumes: []*corev1.PersistentVolume{pv}, Classes: []*storagev1.StorageClass{wffcClass()}, Pod: p}
		}, nil, "a"},
		{"a generic ephemeral volume waits for its claim", func() *Case {
			p := namedPod("incoming", "", "100m", 0, nil)
			p.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
				VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To("wffc")}}}}}}
			return &Case{Namespaces: nsObjects(), Nodes: []*corev1.Node{namedNode("a", "zone-a", "4")}, Classes: []*storagev1.StorageClass{wffcClass()}, Pod: p}
		}, nil, ""},
		{"a CSINode's attach limit is full", func() *Case {
			used, usedPV := boundClaim("used", "pv-used")
			fresh, freshPV := boundClaim("fresh", "pv-fresh")
			holder := namedPod("holder", "a", "100m", 0, nil)
			holder.Spec.Volumes = []corev1.Volume{claimVolume("used")}
			p := namedPod("incoming", "", "100m", 0, nil)
			p.Spec.Volumes = []corev1.Volume{claimVolume("fresh")}
			csi := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{
				{Name: ebsDriver, NodeID: "a", Allocatable: &storagev1.VolumeNodeResources{Count: ptr.To[int32](1)}}}}}
			return &Case{Namespaces: nsObjects(), Nodes: []*corev1.Node{namedNode("a", "zone-a", "4"), namedNode("b", "zone-a", "4")}, Pods: []*corev1.Pod{holder},
				Claims: []*corev1.PersistentVolumeClaim{used, fresh}, Volumes: []*corev1.PersistentVolume{usedPV, freshPV},
				Classes: []*storagev1.StorageClass{wffcClass()}, CSINodes: []*storagev1.CSINode{csi}, Pod: p}
		}, []string{"b"}, ""},
		{"volume binding filters by the volume's node affinity", func() *Case {
			pvc, pv := boundClaim("zonal", "pv-zonal")
			pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"zone-b"}}}}}}}
			p := namedPod("incoming", "", "100m", 0, nil)
			p.Spec.Volumes = []corev1.Volume{claimVolume("zonal")}
			return &Case{Namespaces: nsObjects(), Nodes: []*corev1.Node{namedNode("a", "zone-a", "4"), namedNode("b", "zone-b", "4")},
				Claims: []*corev1.PersistentVolumeClaim{pvc}, Volumes: []*corev1.PersistentVolume{pv}, Classes: []*storagev1.StorageClass{wffcClass()}, Pod: p}
		}, []string{"b"}, ""},
		{"resource claims find no devices", func() *Case {
			p := namedPod("incoming", "", "100m", 0, nil)
			p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("gpu")}}
			return &Case{Namespaces: nsObjects(), Nodes: []*corev1.Node{namedNode("a", "zone-a", "4")}, Pod: p}
		}, nil, ""},
		{"a full zone still counts for a hard zone spread", func() *Case {
			spread := []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.DoNotSchedule,
				LabelSelector: &metav1.LabelSelector{MatchLabels: app}}}
			filler := namedPod("filler", "c", "4", 0, nil)
			r1, r2 := namedPod("web-1", "a", "1", 0, app), namedPod("web-2", "b", "1", 0, app)
			p := namedPod("incoming", "", "1", 0, app)
			p.Spec.TopologySpreadConstraints = spread
			return &Case{Namespaces: nsObjects(), Nodes: []*corev1.Node{namedNode("a", "zone-a", "4"), namedNode("b", "zone-b", "4"), namedNode("c", "zone-c", "4")},
				Pods: []*corev1.Pod{filler, r1, r2}, Pod: p}
		}, nil, ""},
		{"a high-priority pod preempts the cheapest victims", func() *Case {
			var pods []*corev1.Pod
			for i, prio := range []int32{-100, -100, -100} {
				pods = append(pods, namedPod("low-"+string(rune('0'+i)), "a", "1", prio, nil))
			}
			pods = append(pods, namedPod("mid", "b", "3", 10, nil))
			p := namedPod("incoming", "", "2", 1000, nil)
			return &Case{Namespaces: nsObjects(), Nodes: []*corev1.Node{namedNode("a", "zone-a", "4"), namedNode("b", "zone-b", "4")}, Pods: pods, Pod: p}
		}, nil, "a"},
	}
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c()
			diff, err := compare(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			if diff != "" {
				t.Fatalf("%s\n%s", diff, describe(c))
			}
			ours, err := capstanRun(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			if got := sortedKeys(ours.feasible); !slices.Equal(got, tc.feasible) {
				t.Errorf("feasible %v, want %v (reasons %v)", got, tc.feasible, ours.reasons)
			}
			if ours.chosen != tc.chosen {
				t.Errorf("preemption chose %q, want %q (%s; candidates %v)", ours.chosen, tc.chosen, ours.message, slices.Collect(maps.Keys(ours.candidates)))
			}
		})
	}
}
