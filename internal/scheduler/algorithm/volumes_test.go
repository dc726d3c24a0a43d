package algorithm

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

func indexer(objs ...any) cache.Indexer {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, o := range objs {
		_ = idx.Add(o)
	}
	return idx
}

func volumeListers(pvcs []*corev1.PersistentVolumeClaim, pvs []*corev1.PersistentVolume, scs []*storagev1.StorageClass) Listers {
	var a, b, c []any
	for _, x := range pvcs {
		a = append(a, x)
	}
	for _, x := range pvs {
		b = append(b, x)
	}
	for _, x := range scs {
		c = append(c, x)
	}
	return Listers{
		PersistentVolumeClaims: corelisters.NewPersistentVolumeClaimLister(indexer(a...)),
		PersistentVolumes:      corelisters.NewPersistentVolumeLister(indexer(b...)),
		StorageClasses:         storagelisters.NewStorageClassLister(indexer(c...)),
	}
}

// pvc is a claim, bound to volume (as the volume controller leaves a
// claim it bound) unless volume is empty.
func pvc(name, volume, class string) *corev1.PersistentVolumeClaim {
	var ann map[string]string
	if volume != "" {
		ann = map[string]string{annBindCompleted: "yes"}
	}
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: ann},
		Spec: corev1.PersistentVolumeClaimSpec{VolumeName: volume, StorageClassName: ptr.To(class),
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
}

func withClaim(p *corev1.Pod, claim string) *corev1.Pod {
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: claim, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
	return p
}

func localPV(name, nodeName, class string, labels map[string]string) *corev1.PersistentVolume {
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PersistentVolumeSpec{StorageClassName: class,
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("5Gi")},
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeAvailable}}
	if nodeName != "" {
		pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{nodeName}}}}}}}
	}
	return pv
}

func feasible(d *Decision) map[string]bool {
	out := map[string]bool{}
	for _, s := range d.Scored {
		out[s.Node] = true
	}
	return out
}

func TestCheckVolumeBinding(t *testing.T) {
	host := func(n string) *corev1.Node { return node(n, map[string]string{"kubernetes.io/hostname": n}) }
	nodes := []*corev1.Node{host("a"), host("b")}
	wait := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "local"}, VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)}
	immediate := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "fast"}, VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate)}
	boundPV := localPV("pv-a", "a", "local", nil)
	boundPV.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "default", Name: "bound"}
	boundPV.Status.Phase = corev1.VolumeBound
	l := volumeListers(
		[]*corev1.PersistentVolumeClaim{pvc("bound", "pv-a", "local"), pvc("unbound", "", "local"), pvc("immediate", "", "fast")},
		[]*corev1.PersistentVolume{boundPV, localPV("pv-free-b", "b", "local", nil)},
		[]*storagev1.StorageClass{wait, immediate})
	a := mustAlgorithm(t, policyOf(preds("CheckVolumeBinding"), nil))
	explain := Options{Explain: true}

	d := a.Schedule(t.Context(), withClaim(pod("p1", nil), "bound"), snapshot(nodes, nil, l), explain)
	if f := feasible(d); !f["a"] || f["b"] || d.Filtered["b"].Reasons[0] != ReasonVolumeNodeAffinityConflict {
		t.Errorf("bound claim: feasible %v filtered %+v", f, d.Filtered["b"])
	}
	d = a.Schedule(t.Context(), withClaim(pod("p2", nil), "unbound"), snapshot(nodes, nil, l), explain)
	if f := feasible(d); f["a"] || !f["b"] || d.Filtered["a"].Reasons[0] != ReasonVolumeBindConflict {
		t.Errorf("unbound WaitForFirstConsumer claim: feasible %v filtered %+v", f, d.Filtered["a"])
	}
	d = a.Schedule(t.Context(), withClaim(pod("p3", nil), "immediate"), snapshot(nodes, nil, l), explain)
	if d.Feasible() || d.Filtered["a"].Reasons[0] != ReasonUnboundImmediatePVC {
		t.Errorf("unbound Immediate claim: %+v", d.Filtered)
	}
	d = a.Schedule(t.Context(), withClaim(pod("p4", nil), "missing"), snapshot(nodes, nil, l), explain)
	if d.Feasible() || d.Filtered["a"].Reasons[0] != `persistentvolumeclaim "missing" not found` {
		t.Errorf("missing claim: %+v", d.Filtered)
	}
}

// A WaitForFirstConsumer claim gets a volume in the decision that places
// its pod: the smallest that fits, pre-bound ones first, and a volume
// another decision reserved is never given to a second claim. A class with
// a provisioner provisions on the selected node instead.
func TestVolumeBindingDecisions(t *testing.T) {
	host := func(n string) *corev1.Node { return node(n, map[string]string{"kubernetes.io/hostname": n}) }
	nodes := []*corev1.Node{host("a")}
	local := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "local"}, Provisioner: "kubernetes.io/no-provisioner",
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)}
	dynamic := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "dynamic"}, Provisioner: "csi.example.com",
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
		AllowedTopologies: []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{{Key: "kubernetes.io/hostname", Values: []string{"a"}}}}}}
	big := localPV("pv-big", "", "local", nil)
	big.Spec.Capacity[corev1.ResourceStorage] = resource.MustParse("50Gi")
	small := localPV("pv-small", "", "local", nil)
	l := volumeListers(
		[]*corev1.PersistentVolumeClaim{pvc("one", "", "local"), pvc("two", "", "local"), pvc("three", "", "local"), pvc("made", "", "dynamic")},
		[]*corev1.PersistentVolume{big, small}, []*storagev1.StorageClass{local, dynamic})
	a := mustAlgorithm(t, policyOf(preds("CheckVolumeBinding"), nil))

	snap := snapshot(nodes, nil, l)
	d := a.Schedule(t.Context(), withClaim(pod("p1", nil), "one"), snap, Options{})
	if len(d.VolumeBindings) != 1 || d.VolumeBindings[0].Volume != "pv-small" || d.VolumeBindings[0].Node != "a" {
		t.Fatalf("first claim: bindings %+v, want pv-small (the smallest that fits)", d.VolumeBindings)
	}
	// The scheduler reserves it; the next decision, before the API shows
	// the volume bound, gets the other one, and a third finds none.
	snap.AssumedVolumes = map[string]string{"pv-small": "default/one"}
	d = a.Schedule(t.Context(), withClaim(pod("p2", nil), "two"), snap, Options{})
	if len(d.VolumeBindings) != 1 || d.VolumeBindings[0].Volume != "pv-big" {
		t.Fatalf("second claim: bindings %+v, want pv-big", d.VolumeBindings)
	}
	snap.AssumedVolumes["pv-big"] = "default/two"
	d = a.Schedule(t.Context(), withClaim(pod("p3", nil), "three"), snap, Options{Explain: true})
	if d.Feasible() || d.Filtered["a"].Reasons[0] != ReasonVolumeBindConflict {
		t.Fatalf("third claim with both volumes reserved: %+v", d.Filtered["a"])
	}
	// Two claims of one pod never share a volume.
	d = a.Schedule(t.Context(), withClaim(withClaim(pod("p4", nil), "one"), "two"), snapshot(nodes, nil, l), Options{})
	if len(d.VolumeBindings) != 2 || d.VolumeBindings[0].Volume == d.VolumeBindings[1].Volume {
		t.Fatalf("two claims of one pod: %+v", d.VolumeBindings)
	}
	// A provisioner that can reach the node: provision there.
	d = a.Schedule(t.Context(), withClaim(pod("p5", nil), "made"), snapshot(nodes, nil, l), Options{})
	if len(d.VolumeBindings) != 1 || d.VolumeBindings[0].Volume != "" || d.VolumeBindings[0].Node != "a" {
		t.Fatalf("dynamic claim: %+v", d.VolumeBindings)
	}
	d = a.Schedule(t.Context(), withClaim(pod("p6", nil), "made"), snapshot([]*corev1.Node{host("b")}, nil, l), Options{Explain: true})
	if d.Feasible() || d.Filtered["b"].Reasons[0] != ReasonVolumeBindConflict {
		t.Fatalf("dynamic claim outside the class's topology: %+v", d.Filtered["b"])
	}
}

func TestNoVolumeZoneConflict(t *testing.T) {
	nodes := []*corev1.Node{
		node("z1", map[string]string{corev1.LabelTopologyZone: "z1"}),
		node("z2", map[string]string{corev1.LabelTopologyZone: "z2"}),
		node("nozone", nil),
	}
	l := volumeListers([]*corev1.PersistentVolumeClaim{pvc("data", "pv-z1", "")},
		[]*corev1.PersistentVolume{localPV("pv-z1", "", "", map[string]string{corev1.LabelTopologyZone: "z1__z3"})}, nil)
	d := mustAlgorithm(t, policyOf(preds("NoVolumeZoneConflict"), nil)).
		Schedule(t.Context(), withClaim(pod("p", nil), "data"), snapshot(nodes, nil, l), Options{Explain: true})
	if f := feasible(d); !f["z1"] || f["z2"] || !f["nozone"] {
		t.Errorf("feasible %v", f)
	}
	if d.Filtered["z2"].Reasons[0] != ReasonVolumeZoneConflict {
		t.Errorf("z2: %+v", d.Filtered["z2"])
	}
}

func TestDiskConflictAndMaxVolumes(t *testing.T) {
	ebs := func(id string) corev1.Volume {
		return corev1.Volume{Name: id, VolumeSource: corev1.VolumeSource{AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{VolumeID: id}}}
	}
	gce := func(name string, ro bool) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{GCEPersistentDisk: &corev1.GCEPersistentDiskVolumeSource{PDName: name, ReadOnly: ro}}}
	}
	n := node("n", nil)
	existing := onNode(pod("x", nil), "n")
	existing.Spec.Volumes = []corev1.Volume{ebs("vol-1"), gce("pd-1", true)}

	a := mustAlgorithm(t, policyOf(preds("NoDiskConflict"), nil))
	same := pod("same-ebs", nil)
	same.Spec.Volumes = []corev1.Volume{ebs("vol-1")}
	if d := decide(t, a, same, snapshot([]*corev1.Node{n}, []*corev1.Pod{existing}, Listers{})); d.Feasible() || d.Filtered["n"].Reasons[0] != ReasonDiskConflict {
		t.Errorf("same EBS volume: %+v", d.Filtered)
	}
	roShare := pod("ro", nil)
	roShare.Spec.Volumes = []corev1.Volume{gce("pd-1", true)}
	if d := decide(t, a, roShare, snapshot([]*corev1.Node{n}, []*corev1.Pod{existing}, Listers{})); !d.Feasible() {
		t.Errorf("read-only GCE PD shared: %v", d.Summary())
	}

	// 39 EBS volumes fit a node; the 40th does not. The node's allocatable
	// attachable-volumes-aws-ebs overrides the default.
	full := onNode(pod("full", nil), "n")
	for i := 0; i < 39; i++ {
		full.Spec.Volumes = append(full.Spec.Volumes, ebs("v"+string(rune('A'+i))))
	}
	one := pod("one-more", nil)
	one.Spec.Volumes = []corev1.Volume{ebs("new")}
	m := mustAlgorithm(t, policyOf(preds("MaxEBSVolumeCount"), nil))
	if d := decide(t, m, one, snapshot([]*corev1.Node{n}, []*corev1.Pod{full}, Listers{})); d.Feasible() || d.Filtered["n"].Reasons[0] != ReasonMaxVolumeCountExceeded {
		t.Errorf("40th EBS volume: %+v", d.Filtered)
	}
	reuse := pod("reuse", nil)
	reuse.Spec.Volumes = []corev1.Volume{ebs("vA")}
	if d := decide(t, m, reuse, snapshot([]*corev1.Node{n}, []*corev1.Pod{full}, Listers{})); !d.Feasible() {
		t.Errorf("an already attached volume counts once: %v", d.Summary())
	}
	big := node("big", nil)
	big.Status.Allocatable["attachable-volumes-aws-ebs"] = resource.MustParse("50")
	full.Spec.NodeName = "big"
	if d := decide(t, m, one, snapshot([]*corev1.Node{big}, []*corev1.Pod{full}, Listers{})); !d.Feasible() {
		t.Errorf("node allocating 50 EBS volumes: %v", d.Summary())
	}
}

func TestImageLocality(t *testing.T) {
	withImage := func(name string, size int64, images ...string) *corev1.Node {
		n := node(name, nil)
		n.Status.Images = []corev1.ContainerImage{{Names: images, SizeBytes: size}}
		return n
	}
	nodes := []*corev1.Node{withImage("has", 500*1024*1024, "registry.example/big:1"), node("lacks", nil)}
	p := pod("p", nil)
	p.Spec.Containers[0].Image = "registry.example/big:1"
	d := mustAlgorithm(t, policyOf(nil, prios("ImageLocalityPriority"))).Schedule(t.Context(), p, snapshot(nodes, nil, Listers{}), Options{Explain: true})
	// 500MiB on 1 of 2 nodes: 250MiB effective, scaled between 23MiB and 1000MiB.
	want := int64(MaxPriority * (250 - 23) * 1024 * 1024 / ((1000 - 23) * 1024 * 1024))
	if got := scoreOf(d, "has", "ImageLocalityPriority"); got != want {
		t.Errorf("has: %d, want %d", got, want)
	}
	if got := scoreOf(d, "lacks", "ImageLocalityPriority"); got != 0 {
		t.Errorf("lacks: %d", got)
	}
	// Two containers, two images of 800MiB on the only node: 1600MiB is
	// capped at the legacy fixed 1000MiB, a full score; a cap per
	// container (2000MiB) would give 7.
	both := withImage("both", 800*1024*1024, "registry.example/a:1")
	both.Status.Images = append(both.Status.Images, corev1.ContainerImage{Names: []string{"registry.example/b:1"}, SizeBytes: 800 * 1024 * 1024})
	two := pod("two", nil)
	two.Spec.Containers = []corev1.Container{{Name: "a", Image: "registry.example/a:1"}, {Name: "b", Image: "registry.example/b:1"}}
	d = mustAlgorithm(t, policyOf(nil, prios("ImageLocalityPriority"))).Schedule(t.Context(), two, snapshot([]*corev1.Node{both}, nil, Listers{}), Options{Explain: true})
	if got := scoreOf(d, "both", "ImageLocalityPriority"); got != MaxPriority {
		t.Errorf("two large images: %d, want %d", got, MaxPriority)
	}
	if normalizeImage("nginx") != "nginx:latest" || normalizeImage("host:5000/nginx") != "host:5000/nginx:latest" || normalizeImage("a@sha256:x") != "a@sha256:x" {
		t.Errorf("normalizeImage")
	}
}

// Without CheckVolumeBinding in the Policy, volumes are still bound in the
// decision: a node whose claims cannot be bound is passed over for the
// next best that can, and with none the pod does not fit.
func TestVolumeBindingWithoutThePredicate(t *testing.T) {
	host := func(n string) *corev1.Node { return node(n, map[string]string{"kubernetes.io/hostname": n}) }
	local := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "local"}, Provisioner: "kubernetes.io/no-provisioner",
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)}
	l := volumeListers([]*corev1.PersistentVolumeClaim{pvc("one", "", "local"), pvc("two", "", "local")},
		[]*corev1.PersistentVolume{localPV("pv-b", "b", "local", nil)}, []*storagev1.StorageClass{local})
	// "a" scores higher (MostRequested favours the node with a pod), but
	// only "b" reaches the volume.
	existing := []*corev1.Pod{onNode(withRequests(pod("busy", nil), "1", "1Gi"), "a")}
	a := mustAlgorithm(t, policyOf(nil, prios("MostRequestedPriority")))
	snap := snapshot([]*corev1.Node{host("a"), host("b")}, existing, l)
	d := a.Schedule(t.Context(), withClaim(pod("p1", nil), "one"), snap, Options{})
	if d.Selected != "b" || len(d.VolumeBindings) != 1 || d.VolumeBindings[0].Volume != "pv-b" {
		t.Fatalf("selected %q bindings %+v, want b with pv-b", d.Selected, d.VolumeBindings)
	}
	if f := d.Filtered["a"]; f == nil || f.Predicate != "CheckVolumeBinding" {
		t.Fatalf("a, the better scored node, was not passed over for its volumes: %+v", f)
	}
	snap.AssumedVolumes = map[string]string{"pv-b": "default/one"}
	d = a.Schedule(t.Context(), withClaim(pod("p2", nil), "two"), snap, Options{})
	if d.Feasible() || d.Filtered["a"].Reasons[0] != ReasonVolumeBindConflict || d.Filtered["b"].Reasons[0] != ReasonVolumeBindConflict {
		t.Fatalf("second claim, no volume left: selected %q filtered %+v", d.Selected, d.Filtered)
	}
}
