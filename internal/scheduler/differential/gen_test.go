package differential

import (
	"fmt"
	"math/rand/v2"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// Case is one generated cluster and the pod to place in it.
type Case struct {
	Seed        uint64
	Namespaces  []*corev1.Namespace
	Nodes       []*corev1.Node
	Pods        []*corev1.Pod // bound to a node
	Nominated   []*corev1.Pod // pending, nominated to a node
	PDBs        []*policyv1.PodDisruptionBudget
	Claims      []*corev1.PersistentVolumeClaim
	Volumes     []*corev1.PersistentVolume
	Classes     []*storagev1.StorageClass
	CSINodes    []*storagev1.CSINode
	Services    []*corev1.Service
	ReplicaSets []*appsv1.ReplicaSet
	// Pod is the pod to place.
	Pod *corev1.Pod
}

func (c *Case) objects() []runtime.Object {
	var out []runtime.Object
	out = appendObjects(out, c.Namespaces)
	out = appendObjects(out, c.Nodes)
	out = appendObjects(out, c.Pods)
	out = appendObjects(out, c.Nominated)
	out = appendObjects(out, c.PDBs)
	out = appendObjects(out, c.Claims)
	out = appendObjects(out, c.Volumes)
	out = appendObjects(out, c.Classes)
	out = appendObjects(out, c.CSINodes)
	out = appendObjects(out, c.Services)
	out = appendObjects(out, c.ReplicaSets)
	return append(out, c.Pod)
}

func appendObjects[T runtime.Object](out []runtime.Object, objs []T) []runtime.Object {
	for _, o := range objs {
		out = append(out, o)
	}
	return out
}

// gen draws cases from a seed.
type gen struct {
	r    *rand.Rand
	c    *Case
	uids int
}

// The vocabulary cases are drawn from: few values, so that selectors,
// ports, taints and domains collide often.
var (
	zones      = []string{"zone-a", "zone-b", "zone-c"}
	apps       = []string{"web", "db", "cache"}
	namespaces = []string{"ns-a", "ns-b"}
	priorities = []*int32{nil, ptr.To[int32](-100), ptr.To[int32](0), ptr.To[int32](10), ptr.To[int32](1000)}
	cpus       = []string{"0", "100m", "500m", "1", "2"}
	memories   = []string{"0", "128Mi", "512Mi", "1Gi", "3Gi"}
	ebsDriver  = "ebs.csi.aws.com"
	epoch      = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
)

const labelDisk = "disk"

func (g *gen) chance(p float64) bool { return g.r.Float64() < p }

func pick[T any](g *gen, s []T) T { return s[g.r.IntN(len(s))] }

func (g *gen) uid(prefix string) types.UID {
	g.uids++
	return types.UID(fmt.Sprintf("%s-%d", prefix, g.uids))
}

// NewCase draws a case.
func NewCase(seed uint64) *Case {
	g := &gen{r: rand.New(rand.NewPCG(seed, seed*0x9e3779b97f4a7c15+1)), c: &Case{Seed: seed}}
	g.namespaces()
	n := 1 + g.r.IntN(8)
	for i := range n {
		g.node(i)
	}
	if g.chance(0.35) {
		g.storage()
	}
	for range g.r.IntN(4*n + 1) {
		g.existingPod()
	}
	for range g.r.IntN(3) {
		g.nominatedPod()
	}
	for range g.r.IntN(3) {
		g.pdb()
	}
	if g.chance(0.3) {
		g.workloads()
	}
	g.c.Pod = g.incomingPod()
	return g.c
}

func (g *gen) namespaces() {
	for i, ns := range namespaces {
		g.c.Namespaces = append(g.c.Namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, UID: g.uid("ns"),
			Labels: map[string]string{"team": string(rune('a' + i)), corev1.LabelMetadataName: ns}}})
	}
}

func quantity(s string) resource.Quantity { return resource.MustParse(s) }

func (g *gen) node(i int) {
	name := fmt.Sprintf("node-%d", i)
	lbls := map[string]string{corev1.LabelHostname: name}
	if g.chance(0.9) {
		lbls[corev1.LabelTopologyZone] = pick(g, zones)
	}
	if g.chance(0.8) {
		lbls[corev1.LabelTopologyRegion] = "region-1"
	}
	if g.chance(0.5) {
		lbls[labelDisk] = pick(g, []string{"ssd", "hdd"})
	}
	alloc := corev1.ResourceList{
		corev1.ResourceCPU:    quantity(pick(g, []string{"1", "2", "4"})),
		corev1.ResourceMemory: quantity(pick(g, []string{"2Gi", "4Gi", "8Gi"})),
		corev1.ResourcePods:   quantity(pick(g, []string{"3", "8", "110"})),
	}
	if g.chance(0.2) {
		alloc["example.com/gpu"] = quantity(pick(g, []string{"1", "2"}))
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: g.uid("node"), Labels: lbls},
		Status: corev1.NodeStatus{Allocatable: alloc, Capacity: alloc,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
	if g.chance(0.25) {
		node.Spec.Taints = append(node.Spec.Taints, pick(g, []corev1.Taint{
			{Key: "dedicated", Value: "infra", Effect: corev1.TaintEffectNoSchedule},
			{Key: "spot", Value: "true", Effect: corev1.TaintEffectPreferNoSchedule},
			{Key: "maintenance", Value: "true", Effect: corev1.TaintEffectNoExecute},
		}))
	}
	if g.chance(0.08) {
		node.Spec.Unschedulable = true
		node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule})
	}
	g.c.Nodes = append(g.c.Nodes, node)
}

// storage adds classes, volumes, claims and CSINodes.
func (g *gen) storage() {
	wffc, immediate := storagev1.VolumeBindingWaitForFirstConsumer, storagev1.VolumeBindingImmediate
	g.c.Classes = []*storagev1.StorageClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "wffc"}, Provisioner: ebsDriver, VolumeBindingMode: &wffc},
		{ObjectMeta: metav1.ObjectMeta{Name: "local"}, Provisioner: "kubernetes.io/no-provisioner", VolumeBindingMode: &wffc},
		{ObjectMeta: metav1.ObjectMeta{Name: "immediate"}, Provisioner: ebsDriver, VolumeBindingMode: &immediate},
	}
	for _, n := range g.c.Nodes {
		if g.chance(0.6) {
			g.c.CSINodes = append(g.c.CSINodes, &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: n.Name},
				Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: ebsDriver, NodeID: n.Name,
					Allocatable: &storagev1.VolumeNodeResources{Count: ptr.To(int32(1 + g.r.IntN(3)))}}}}})
		}
	}
	for i := range 1 + g.r.IntN(5) {
		ns := pick(g, namespaces)
		modes := []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
		if g.chance(0.3) {
			modes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod}
		}
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("claim-%d", i), Namespace: ns, UID: g.uid("pvc")},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: modes,
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: quantity("1Gi")}}},
		}
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pv-%d", i), UID: g.uid("pv")},
			Spec: corev1.PersistentVolumeSpec{AccessModes: modes, Capacity: corev1.ResourceList{corev1.ResourceStorage: quantity("1Gi")},
				PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: ebsDriver, VolumeHandle: fmt.Sprintf("vol-%d", i)}}},
		}
		if g.chance(0.5) {
			pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{pick(g, zones)}}}}}}}
		}
		switch {
		case g.chance(0.6):
			// Bound, as the volume controller leaves a claim.
			pvc.Spec.StorageClassName = ptr.To(pick(g, []string{"wffc", "immediate"}))
			pv.Spec.StorageClassName = *pvc.Spec.StorageClassName
			pvc.Spec.VolumeName = pv.Name
			pvc.Annotations = map[string]string{"pv.kubernetes.io/bind-completed": "yes"}
			pvc.Status.Phase = corev1.ClaimBound
			pv.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: pvc.Name, UID: pvc.UID}
			pv.Status.Phase = corev1.VolumeBound
		case g.chance(0.5):
			// Unbound, waiting for its first consumer; a local volume may
			// be there for it.
			pvc.Spec.StorageClassName = ptr.To(pick(g, []string{"wffc", "local"}))
			pvc.Status.Phase = corev1.ClaimPending
			pv.Spec.StorageClassName = *pvc.Spec.StorageClassName
			pv.Status.Phase = corev1.VolumeAvailable
		default:
			// Unbound with an Immediate class: must be bound first.
			pvc.Spec.StorageClassName = ptr.To("immediate")
			pvc.Status.Phase = corev1.ClaimPending
			pv = nil
		}
		g.c.Claims = append(g.c.Claims, pvc)
		if pv != nil {
			g.c.Volumes = append(g.c.Volumes, pv)
		}
	}
}

// requests draws a container's requests.
func (g *gen) requests() corev1.ResourceRequirements {
	rl := corev1.ResourceList{}
	if c := pick(g, cpus); c != "0" {
		rl[corev1.ResourceCPU] = quantity(c)
	}
	if m := pick(g, memories); m != "0" {
		rl[corev1.ResourceMemory] = quantity(m)
	}
	if g.chance(0.05) {
		rl["example.com/gpu"] = quantity("1")
	}
	return corev1.ResourceRequirements{Requests: rl}
}

func (g *gen) labels() map[string]string {
	l := map[string]string{"app": pick(g, apps)}
	if g.chance(0.5) {
		l["tier"] = pick(g, []string{"front", "back"})
	}
	return l
}

func (g *gen) term(key string) corev1.PodAffinityTerm {
	t := corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": pick(g, apps)}}, TopologyKey: key}
	switch {
	case g.chance(0.1):
		t.NamespaceSelector = &metav1.LabelSelector{}
	case g.chance(0.1):
		t.Namespaces = []string{pick(g, namespaces)}
	}
	return t
}

func (g *gen) topologyKey() string {
	return pick(g, []string{corev1.LabelHostname, corev1.LabelTopologyZone, corev1.LabelTopologyZone, corev1.LabelTopologyRegion})
}

// pod draws what existing and incoming pods share.
func (g *gen) pod(name string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: pick(g, namespaces), UID: g.uid("pod"), Labels: g.labels()},
		Spec: corev1.PodSpec{SchedulerName: corev1.DefaultSchedulerName, Priority: pick(g, priorities),
			Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1", Resources: g.requests()}}},
	}
	if g.chance(0.12) {
		port := corev1.ContainerPort{ContainerPort: 80, HostPort: pick(g, []int32{8080, 9090}), Protocol: corev1.ProtocolTCP}
		if g.chance(0.4) {
			p.Spec.InitContainers = []corev1.Container{{Name: "sidecar", Image: "registry.example/proxy:1",
				RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways), Ports: []corev1.ContainerPort{port}}}
		} else {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{port}
		}
	}
	if g.chance(0.15) {
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{g.term(g.topologyKey())}}}
	}
	if g.chance(0.08) {
		if p.Spec.Affinity == nil {
			p.Spec.Affinity = &corev1.Affinity{}
		}
		p.Spec.Affinity.PodAffinity = &corev1.PodAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{g.term(g.topologyKey())}}
	}
	if len(g.c.Claims) > 0 && g.chance(0.25) {
		var same []*corev1.PersistentVolumeClaim
		for _, c := range g.c.Claims {
			if c.Namespace == p.Namespace {
				same = append(same, c)
			}
		}
		if len(same) > 0 {
			c := pick(g, same)
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.Name}}})
		}
	}
	return p
}

func (g *gen) existingPod() {
	p := g.pod(fmt.Sprintf("running-%d", len(g.c.Pods)))
	p.Spec.NodeName = pick(g, g.c.Nodes).Name
	// The kubelet admits no two pods binding one host port: a node's
	// pods never share one.
	for _, q := range g.c.Pods {
		if q.Spec.NodeName == p.Spec.NodeName && len(hostPorts(q)) > 0 && len(hostPorts(p)) > 0 && hostPorts(q)[0] == hostPorts(p)[0] {
			p.Spec.Containers[0].Ports, p.Spec.InitContainers = nil, nil
		}
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.StartTime = &metav1.Time{Time: epoch.Add(time.Duration(g.r.IntN(100)) * time.Second)}
	if g.chance(0.05) {
		p.DeletionTimestamp = &metav1.Time{Time: epoch}
		if g.chance(0.5) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: corev1.PodReasonPreemptionByScheduler}}
		}
	}
	g.c.Pods = append(g.c.Pods, p)
}

func (g *gen) nominatedPod() {
	p := g.pod(fmt.Sprintf("nominated-%d", len(g.c.Nominated)))
	p.Spec.Volumes = nil
	p.Status.Phase = corev1.PodPending
	p.Status.NominatedNodeName = pick(g, g.c.Nodes).Name
	g.c.Nominated = append(g.c.Nominated, p)
}

func (g *gen) pdb() {
	ns := pick(g, namespaces)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pdb-%d", len(g.c.PDBs)), Namespace: ns, UID: g.uid("pdb")},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": pick(g, apps)}}},
		Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: int32(g.r.IntN(3))},
	}
	if len(g.c.Pods) > 0 && g.chance(0.3) {
		pdb.Status.DisruptedPods = map[string]metav1.Time{pick(g, g.c.Pods).Name: {Time: epoch}}
	}
	g.c.PDBs = append(g.c.PDBs, pdb)
}

// workloads adds a service and a replica set over app labels, for the
// default spread constraints of pods with none.
func (g *gen) workloads() {
	ns, app := pick(g, namespaces), pick(g, apps)
	g.c.Services = append(g.c.Services, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "svc-" + app, Namespace: ns, UID: g.uid("svc")},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": app}}})
	g.c.ReplicaSets = append(g.c.ReplicaSets, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "rs-" + app, Namespace: ns, UID: g.uid("rs")},
		Spec: appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}})
}

func (g *gen) incomingPod() *corev1.Pod {
	p := g.pod("incoming")
	p.Status.Phase = corev1.PodPending
	if g.chance(0.1) {
		p.Spec.PreemptionPolicy = ptr.To(corev1.PreemptNever)
	}
	if g.chance(0.2) {
		p.Spec.NodeSelector = map[string]string{labelDisk: pick(g, []string{"ssd", "hdd"})}
	}
	if g.chance(0.2) {
		if p.Spec.Affinity == nil {
			p.Spec.Affinity = &corev1.Affinity{}
		}
		p.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{zones[0], zones[1]}}}}}}}
	}
	if g.chance(0.3) {
		p.Spec.Tolerations = append(p.Spec.Tolerations, pick(g, []corev1.Toleration{
			{Key: "dedicated", Operator: corev1.TolerationOpExists},
			{Key: "maintenance", Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoExecute},
			{Operator: corev1.TolerationOpExists},
		}))
	}
	if g.chance(0.45) {
		for range 1 + g.r.IntN(2) {
			p.Spec.TopologySpreadConstraints = append(p.Spec.TopologySpreadConstraints, g.spread(p))
		}
	}
	if g.chance(0.05) {
		// A generic ephemeral volume: its claim may exist, made for the
		// pod, or not yet, or belong to another pod.
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
			VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To("wffc"),
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}}}}}})
		if g.chance(0.6) {
			wffc := storagev1.VolumeBindingWaitForFirstConsumer
			if len(g.c.Classes) == 0 {
				g.c.Classes = append(g.c.Classes, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "wffc"}, Provisioner: ebsDriver, VolumeBindingMode: &wffc})
			}
			owner := p.UID
			if g.chance(0.3) {
				owner = "someone-else"
			}
			g.c.Claims = append(g.c.Claims, &corev1.PersistentVolumeClaim{
				ObjectMeta: metav1.ObjectMeta{Name: p.Name + "-scratch", Namespace: p.Namespace, UID: g.uid("pvc"),
					OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: owner, Controller: ptr.To(true)}}},
				Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To("wffc"), AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: quantity("1Gi")}}},
				Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending},
			})
		}
	}
	if g.chance(0.03) {
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("gpu-claim")}}
	}
	if g.chance(0.03) {
		p.Spec.NodeName = ""
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
				{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{pick(g, g.c.Nodes).Name}}}}}}}}
	}
	if g.chance(0.1) {
		p.Status.NominatedNodeName = pick(g, g.c.Nodes).Name
	}
	if len(g.c.ReplicaSets) > 0 && g.chance(0.5) {
		rs := g.c.ReplicaSets[0]
		p.Namespace = rs.Namespace
		p.Labels["app"] = rs.Spec.Selector.MatchLabels["app"]
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: ptr.To(true)}}
	}
	return p
}

// spread draws a topology spread constraint that the apiserver would
// accept for p.
func (g *gen) spread(p *corev1.Pod) corev1.TopologySpreadConstraint {
	c := corev1.TopologySpreadConstraint{
		MaxSkew: int32(1 + g.r.IntN(2)), TopologyKey: pick(g, []string{corev1.LabelTopologyZone, corev1.LabelHostname}),
		WhenUnsatisfiable: pick(g, []corev1.UnsatisfiableConstraintAction{corev1.DoNotSchedule, corev1.DoNotSchedule, corev1.ScheduleAnyway}),
		LabelSelector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": p.Labels["app"]}},
	}
	if c.WhenUnsatisfiable == corev1.DoNotSchedule && g.chance(0.2) {
		c.MinDomains = ptr.To(int32(2 + g.r.IntN(3)))
	}
	if g.chance(0.2) {
		c.NodeAffinityPolicy = ptr.To(pick(g, []corev1.NodeInclusionPolicy{corev1.NodeInclusionPolicyHonor, corev1.NodeInclusionPolicyIgnore}))
	}
	if g.chance(0.2) {
		c.NodeTaintsPolicy = ptr.To(pick(g, []corev1.NodeInclusionPolicy{corev1.NodeInclusionPolicyHonor, corev1.NodeInclusionPolicyIgnore}))
	}
	if _, ok := p.Labels["tier"]; ok && g.chance(0.3) {
		c.MatchLabelKeys = []string{"tier"}
	}
	if g.chance(0.05) {
		c.LabelSelector = &metav1.LabelSelector{}
	}
	return c
}

// hostPorts lists a pod's host ports, sidecars' included.
func hostPorts(p *corev1.Pod) []int32 {
	var out []int32
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range cs {
			for _, port := range c.Ports {
				if port.HostPort > 0 {
					out = append(out, port.HostPort)
				}
			}
		}
	}
	return out
}
