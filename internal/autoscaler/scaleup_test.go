package autoscaler

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/scheduler/algorithm"
	"github.com/capstan-dev/capstan/internal/scheduler/policy"
	"github.com/capstan-dev/capstan/internal/sim"
)

// machineSet is an autoscaled MachineSet of instance type typ in zone.
func machineSet(name, typ, zone string, replicas, minR, maxR int) *machinev1.MachineSet {
	return &machinev1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: machine.Namespace, UID: types.UID("uid-" + name),
			Annotations: map[string]string{MinSizeAnnotation: fmt.Sprint(minR), MaxSizeAnnotation: fmt.Sprint(maxR)}},
		Spec: machinev1.MachineSetSpec{
			Replicas: ptr.To(int32(replicas)),
			Template: machinev1.MachineTemplateSpec{Spec: machinev1.MachineSpec{
				ProviderSpec: machinev1.ProviderSpec{Value: machine.RawProviderSpec(machine.ProviderSpec{InstanceType: typ, Zone: zone})},
			}},
		},
	}
}

// node is a registered node of cpu cores and memGi GiB.
func node(name string, cpu, memGi int64, labels map[string]string) *corev1.Node {
	n := sim.NodeObject(sim.InstanceSpec{Name: name, CPU: *resource.NewQuantity(cpu, resource.DecimalSI),
		Memory: *resource.NewQuantity(memGi<<30, resource.BinarySI), Labels: labels})
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	return n
}

func pod(name string, cpu string, prio int32, owner string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name), Labels: map[string]string{"app": owner}},
		Spec: corev1.PodSpec{Priority: ptr.To(prio), Containers: []corev1.Container{{Name: "c",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}}},
	}
	if owner != "" {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: owner, UID: types.UID(owner), Controller: ptr.To(true)}}
	}
	return p
}

type fixture struct {
	cfg      Config
	sets     []*machinev1.MachineSet
	machines []*machinev1.Machine
	nodes    []*corev1.Node
	// scheduled are the pods on each node.
	scheduled map[string][]*corev1.Pod
	pending   []*corev1.Pod
	// nominated are pending pods preemption made room for.
	nominated []*corev1.Pod
	backoff   map[string]string
	// daemonSets run on every node that takes them.
	daemonSets []*appsv1.DaemonSet
}

// registerFull gives ms's replicas registered nodes, each full with a pod
// requesting all its cpu.
func (f *fixture) registerFull(t *testing.T, ms *machinev1.MachineSet) {
	t.Helper()
	for i := range int(*ms.Spec.Replicas) {
		name := fmt.Sprintf("%s-%d", ms.Name, i)
		n, err := machine.NodeTemplate(ms, name)
		if err != nil {
			t.Fatal(err)
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		f.nodes = append(f.nodes, n)
		f.machines = append(f.machines, &machinev1.Machine{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ms.Namespace,
				OwnerReferences: []metav1.OwnerReference{{Kind: "MachineSet", Name: ms.Name, UID: ms.UID, Controller: ptr.To(true)}}},
			Status: machinev1.MachineStatus{NodeRef: &corev1.ObjectReference{Name: name}},
		})
		if f.scheduled == nil {
			f.scheduled = map[string][]*corev1.Pod{}
		}
		f.scheduled[name] = []*corev1.Pod{pod("filler-"+name, n.Status.Allocatable.Cpu().String(), 0, "")}
	}
}

// fixtureNow is the time of the fixtures' decisions.
var fixtureNow = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

// state is what a loop would read of the fixture, put together by the
// autoscaler's own code.
func (f *fixture) state() *clusterState {
	var all []*corev1.Pod
	for name, ps := range f.scheduled {
		for _, p := range ps {
			p = p.DeepCopy()
			p.Spec.NodeName = name
			all = append(all, p)
		}
	}
	st := newClusterState(&f.cfg, f.nodes, append(all, f.nominated...), f.sets, f.machines, nil, fixtureNow)
	st.pending = f.pending
	return st
}

func (f *fixture) plan(t *testing.T) *ScaleUpPlan {
	t.Helper()
	alg, err := algorithm.New(policy.Default(), 1)
	if err != nil {
		t.Fatal(err)
	}
	st := f.state()
	if len(st.bad) > 0 {
		t.Fatalf("bad groups: %v", st.bad)
	}
	in := &ScaleUpInput{
		Config: &f.cfg, Algorithm: alg, Snapshot: st.snapshot(alg, algorithm.Listers{}), Expendable: st.expendableOn(),
		Groups: st.groups, Usage: st.usage, Pending: st.pending,
		BackedOff:  func(id string) (bool, string) { why, ok := f.backoff[id]; return ok, why },
		Expander:   &Expander{Names: f.cfg.Expanders, Rand: rand.New(rand.NewPCG(1, 2))},
		DaemonSets: f.daemonSets,
	}
	return PlanScaleUp(in)
}

func increases(p *ScaleUpPlan) string {
	var parts []string
	for _, i := range p.Increases {
		parts = append(parts, i.String())
	}
	return strings.Join(parts, " ")
}

func pods(n int, prefix, cpu string, prio int32) []*corev1.Pod {
	var out []*corev1.Pod
	for i := range n {
		out = append(out, pod(fmt.Sprintf("%s-%d", prefix, i), cpu, prio, prefix))
	}
	return out
}

// The chapter's example: cores max 64, 8-core machines, a cluster at 30
// cores: at most 4 nodes are added, whatever the pods want.
func TestScaleUpStopsAtTheClusterCoresMaximum(t *testing.T) {
	f := &fixture{cfg: DefaultConfig()}
	f.cfg.Cores = Range{0, 64}
	f.nodes = []*corev1.Node{node("master-0", 10, 32, nil), node("master-1", 10, 32, nil), node("master-2", 10, 32, nil)}
	for i := range f.nodes {
		f.nodes[i].Spec.Taints = []corev1.Taint{{Key: "node-role.kubernetes.io/master", Effect: corev1.TaintEffectNoSchedule}}
	}
	f.sets = []*machinev1.MachineSet{machineSet("workers", "capstan.xlarge", "", 0, 0, 20)}
	f.pending = pods(10, "web", "7", 0)
	p := f.plan(t)
	if got := increases(p); got != "{MachineSet/openshift-machine-api/workers 0->4 (max: 20)}" {
		t.Fatalf("increases %q, want 0->4", got)
	}
	// Once the cluster is at 62 cores, not one more 8-core node fits.
	f.sets[0].Spec.Replicas = ptr.To(int32(4))
	p = f.plan(t)
	if len(p.Increases) != 0 {
		t.Fatalf("scaled up beyond the limit: %s", increases(p))
	}
	v := p.Verdicts["web-9"]
	if v.Verdict != VerdictNotTriggered || !strings.Contains(v.Message, "would exceed cluster cores max 64") {
		t.Fatalf("verdict %+v", v)
	}
}

// First-fit decreasing: 3 pods of 5 cores and 3 of 3 on 8-core nodes need 3
// nodes (5+3 each), not 4 (first fit in arrival order: 3+3, 5, 5, 5+3...).
func TestScaleUpBinPacksLargestFirst(t *testing.T) {
	f := &fixture{cfg: DefaultConfig()}
	f.sets = []*machinev1.MachineSet{machineSet("workers", "capstan.xlarge", "", 0, 0, 20)}
	f.pending = append(pods(3, "small", "3", 0), pods(3, "large", "5", 0)...)
	p := f.plan(t)
	if got := increases(p); got != "{MachineSet/openshift-machine-api/workers 0->3 (max: 20)}" {
		t.Fatalf("increases %q, want 0->3", got)
	}
	for _, pd := range f.pending {
		if v := p.Verdicts[pd.UID]; v.Verdict != VerdictTriggered || !strings.HasPrefix(v.Message, "pod triggered scale-up: [{MachineSet/openshift-machine-api/workers 0->3") {
			t.Errorf("%s: %+v", pd.Name, v)
		}
	}
}

// Pods that fit on a registered node, or on a node already on its way,
// make nothing grow.
func TestScaleUpCountsRegisteredAndUpcomingNodes(t *testing.T) {
	f := &fixture{cfg: DefaultConfig()}
	f.nodes = []*corev1.Node{node("worker-0", 8, 32, nil)}
	ms := machineSet("workers", "capstan.xlarge", "", 1, 0, 20) // 1 replica, not registered yet
	f.sets = []*machinev1.MachineSet{ms}
	f.pending = pods(4, "web", "3", 0) // 2 fit on worker-0, 2 on the upcoming node
	p := f.plan(t)
	if len(p.Increases) != 0 {
		t.Fatalf("scaled up for pods that fit: %s", increases(p))
	}
	for _, pd := range f.pending {
		if v := p.Verdicts[pd.UID]; v.Verdict != VerdictFits {
			t.Errorf("%s: %+v", pd.Name, v)
		}
	}
	f.pending = pods(5, "web", "3", 0)
	if got := increases(f.plan(t)); got != "{MachineSet/openshift-machine-api/workers 1->2 (max: 20)}" {
		t.Fatalf("increases %q, want 1->2 for the fifth pod", got)
	}
}

// A scale-up's node that has registered but not started (here: Ready, yet
// still carrying the not-ready taint every new node is admitted with,
// which the node lifecycle controller lifts a moment later) is still one
// of the upcoming nodes: the decision made again in that moment (the next
// loop, or the loop of an autoscaler restarted after the scale-up) does
// not grow the group a second time. Long unready, it counts as started.
func TestScaleUpCountsNodesNotStartedAsUpcoming(t *testing.T) {
	f := &fixture{cfg: DefaultConfig()}
	ms := machineSet("workers", "capstan.xlarge", "", 3, 0, 20)
	f.sets = []*machinev1.MachineSet{ms}
	f.registerFull(t, ms)
	// Only the first machine's node has registered, just now, and is empty.
	f.machines, f.nodes = f.machines[:1], f.nodes[:1]
	delete(f.scheduled, f.nodes[0].Name)
	f.nodes[0].CreationTimestamp = metav1.NewTime(fixtureNow.Add(-30 * time.Second))
	f.nodes[0].Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}}
	f.pending = pods(3, "web", "7", 0) // one per 8-core node
	p := f.plan(t)
	if len(p.Increases) != 0 {
		t.Fatalf("scaled up again for pods the 3 replicas under way take: %s", increases(p))
	}
	for _, pd := range f.pending {
		if v := p.Verdicts[pd.UID]; v.Verdict != VerdictFits {
			t.Errorf("%s: %+v", pd.Name, v)
		}
	}
	st := f.state()
	if g := st.groups[0]; g.Upcoming() != 3 || len(g.NotStarted) != 1 || st.usage.Nodes != 3 {
		t.Errorf("upcoming %d, not started %d, nodes counted %d; want 3, 1 and 3 (the registered node once)", g.Upcoming(), len(g.NotStarted), st.usage.Nodes)
	}
	// Unready for longer than a node takes to start: it is a node of the
	// group that cannot take the pods, and the group grows.
	f.nodes[0].CreationTimestamp = metav1.NewTime(fixtureNow.Add(-MaxNodeStartupTime - time.Minute))
	if got := increases(f.plan(t)); got != "{MachineSet/openshift-machine-api/workers 3->4 (max: 20)}" {
		t.Fatalf("increases %q, want 3->4 past the startup time", got)
	}
}

func daemonSet(name, cpu string, selector map[string]string) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", UID: types.UID("ds-" + name)},
		Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
			Spec: corev1.PodSpec{NodeSelector: selector, Containers: []corev1.Container{{Name: "c",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}}}}}}
}

// A new node runs the DaemonSets' pods that it takes: a pod that fits
// the template only without them does not make the group grow (it would
// grow for ever, each new node too small for it); a DaemonSet whose node
// selector leaves the template out takes nothing.
func TestScaleUpCountsTheDaemonSetPodsOfNewNodes(t *testing.T) {
	f := &fixture{cfg: DefaultConfig()}
	f.sets = []*machinev1.MachineSet{machineSet("workers", "capstan.large", "", 0, 0, 20)} // 4 cores
	f.pending = []*corev1.Pod{pod("big", "3600m", 0, "big")}
	f.daemonSets = []*appsv1.DaemonSet{daemonSet("gpu-driver", "2", map[string]string{"accelerator": "yes"})}
	if got := increases(f.plan(t)); got != "{MachineSet/openshift-machine-api/workers 0->1 (max: 20)}" {
		t.Fatalf("with a DaemonSet for other nodes: increases %q, want 0->1", got)
	}
	f.daemonSets = append(f.daemonSets, daemonSet("log-agent", "500m", nil))
	p := f.plan(t)
	if len(p.Increases) != 0 {
		t.Fatalf("scaled up for a pod the daemon pods leave no room for: %s", increases(p))
	}
	if v := p.Verdicts["big"]; v.Verdict != VerdictNotTriggered || !strings.Contains(v.Message, "pod does not fit the template: Insufficient cpu") {
		t.Errorf("verdict %+v", v)
	}
	f.pending = []*corev1.Pod{pod("fits", "3400m", 0, "fits")}
	if got := increases(f.plan(t)); got != "{MachineSet/openshift-machine-api/workers 0->1 (max: 20)}" {
		t.Fatalf("a pod with room beside the daemon pods: increases %q, want 0->1", got)
	}
}

// The taints a new node sheds once started (upstream's startup-taint and
// ignore-taint prefixes, and the ClusterAutoscaler's startupTaints) do not
// keep a pod off the template; other taints do.
func TestScaleUpIgnoresStartupTaints(t *testing.T) {
	for _, tc := range []struct {
		taint   string
		startup []string
		grows   bool
	}{
		{taint: "startup-taint.cluster-autoscaler.kubernetes.io/cni", grows: true},
		{taint: "ignore-taint.cluster-autoscaler.kubernetes.io/agent", grows: true},
		{taint: "example.com/initializing", startup: []string{"example.com/initializing"}, grows: true},
		{taint: "dedicated", grows: false},
	} {
		f := &fixture{cfg: DefaultConfig()}
		f.cfg.StartupTaints = tc.startup
		ms := machineSet("workers", "capstan.large", "", 0, 0, 20)
		ms.Spec.Template.Spec.Taints = []corev1.Taint{{Key: tc.taint, Value: "x", Effect: corev1.TaintEffectNoSchedule}}
		f.sets = []*machinev1.MachineSet{ms}
		f.pending = []*corev1.Pod{pod("web", "1", 0, "web")}
		if grew := len(f.plan(t).Increases) > 0; grew != tc.grows {
			t.Errorf("taint %s (startup taints %v): scaled up %v, want %v", tc.taint, tc.startup, grew, tc.grows)
		}
	}
}

// Expendable pods (priority below the cutoff) never trigger a scale-up and
// say so.
func TestExpendablePodsDoNotTriggerScaleUp(t *testing.T) {
	f := &fixture{cfg: DefaultConfig()}
	f.sets = []*machinev1.MachineSet{machineSet("workers", "capstan.xlarge", "", 0, 0, 20)}
	f.pending = []*corev1.Pod{pod("batch", "2", -20, "")}
	p := f.plan(t)
	if len(p.Increases) != 0 {
		t.Fatalf("scaled up for an expendable pod: %s", increases(p))
	}
	if v := p.Verdicts["batch"]; v.Message != "pod didn't trigger scale-up: priority -20 below cutoff -10" {
		t.Fatalf("message %q", v.Message)
	}
}

// "max node group size reached" is said only of groups the pod would fit;
// the others say why the pod does not fit their nodes.
func TestNotTriggerScaleUpReasonsAreHonestPerGroup(t *testing.T) {
	f := &fixture{cfg: DefaultConfig()}
	f.sets = []*machinev1.MachineSet{
		machineSet("small", "capstan.medium", "", 2, 0, 2), // 2 cores: too small, and full
		machineSet("big", "capstan.2xlarge", "", 3, 0, 3),  // 16 cores: fits, but full
		machineSet("mid", "capstan.large", "", 0, 0, 5),    // 4 cores: too small
	}
	for _, ms := range f.sets {
		f.registerFull(t, ms)
	}
	f.pending = []*corev1.Pod{pod("db", "12", 0, "")}
	p := f.plan(t)
	if len(p.Increases) != 0 {
		t.Fatalf("increases %s", increases(p))
	}
	v := p.Verdicts["db"]
	if v.Groups["MachineSet/openshift-machine-api/big"] != "max node group size reached" {
		t.Errorf("big: %q", v.Groups["MachineSet/openshift-machine-api/big"])
	}
	for _, g := range []string{"small", "mid"} {
		if got := v.Groups["MachineSet/openshift-machine-api/"+g]; got != "pod does not fit the template: Insufficient cpu" {
			t.Errorf("%s: %q", g, got)
		}
	}
	want := "pod didn't trigger scale-up: 1 max node group size reached, 2 pod does not fit the template: Insufficient cpu"
	if v.Message != want {
		t.Errorf("message\n%q, want\n%q", v.Message, want)
	}
}

// A backed-off group is passed over for the next best one.
func TestBackedOffGroupFailsOverToAnother(t *testing.T) {
	f := &fixture{cfg: DefaultConfig()}
	f.cfg.Expanders = []string{"priority"}
	f.sets = []*machinev1.MachineSet{machineSet("a", "capstan.xlarge", "", 0, 0, 5), machineSet("b", "capstan.xlarge", "", 0, 0, 5)}
	f.pending = pods(2, "web", "5", 0)
	f.backoff = map[string]string{"MachineSet/openshift-machine-api/a": "in backoff after failed scale-up"}
	if got := increases(f.plan(t)); got != "{MachineSet/openshift-machine-api/b 0->2 (max: 5)}" {
		t.Fatalf("increases %q", got)
	}
}

func TestMaxNodesTotalCountsEveryNode(t *testing.T) {
	f := &fixture{cfg: DefaultConfig()}
	f.cfg.MaxNodesTotal = 4
	f.nodes = []*corev1.Node{node("master-0", 4, 16, nil), node("master-1", 4, 16, nil), node("master-2", 4, 16, nil)}
	for i := range f.nodes {
		f.nodes[i].Spec.Taints = []corev1.Taint{{Key: "node-role.kubernetes.io/master", Effect: corev1.TaintEffectNoSchedule}}
	}
	f.sets = []*machinev1.MachineSet{machineSet("workers", "capstan.xlarge", "", 0, 0, 10)}
	f.pending = pods(6, "web", "5", 0)
	if got := increases(f.plan(t)); got != "{MachineSet/openshift-machine-api/workers 0->1 (max: 10)}" {
		t.Fatalf("increases %q, want one node (3 masters + 1 = 4)", got)
	}
	f.sets[0].Spec.Replicas = ptr.To(int32(1))
	p := f.plan(t)
	if v := p.Verdicts["web-5"]; v.Message != "pod didn't trigger scale-up: max total nodes in cluster reached" {
		t.Fatalf("message %q", v.Message)
	}
}

func TestExpanders(t *testing.T) {
	opt := func(id string, cpu string, nodes int, pods int, reqMilli int64) Option {
		ms := machineSet(id, cpu, "", 0, 0, 10)
		tmpl, err := templateNode(ms)
		if err != nil {
			t.Fatal(err)
		}
		o := Option{Group: &NodeGroup{ID: "MachineSet/openshift-machine-api/" + id, Set: ms, Max: 10, Template: tmpl}, NodeCount: nodes, MilliCPU: reqMilli}
		for i := range pods {
			o.Pods = append(o.Pods, pod(fmt.Sprintf("%s-%d", id, i), "1", 0, ""))
		}
		return o
	}
	opts := []Option{
		opt("big", "capstan.2xlarge", 1, 4, 4000),   // 12 of 16 cores wasted
		opt("small", "capstan.large", 1, 4, 4000),   // none wasted
		opt("many", "capstan.xlarge", 2, 6, 15000),  // 1 of 16 wasted, most pods
		opt("gpu", "capstan.gpu.xlarge", 1, 1, 100), // most waste
	}
	for _, tc := range []struct {
		names      []string
		priorities string
		want       string
	}{
		{[]string{"least-waste"}, "", "small"},
		{[]string{"most-pods"}, "", "many"},
		{[]string{"priority"}, "10:\n- .*big\n50:\n- .*/gpu$\n", "gpu"},
		{[]string{"priority", "least-waste"}, "10:\n- .*(big|many)\n", "many"},
	} {
		e := &Expander{Names: tc.names}
		if tc.priorities != "" {
			pr, err := ParsePriorities(tc.priorities)
			if err != nil {
				t.Fatal(err)
			}
			e.Priorities = pr
		}
		if got := e.Best(opts); got.Group.Set.Name != tc.want {
			t.Errorf("%v: chose %s, want %s", tc.names, got.Group.Set.Name, tc.want)
		}
	}
	if _, err := ParsePriorities("10: [\"(\"]"); err == nil || !strings.Contains(err.Error(), "priorities: 10") {
		t.Errorf("bad regexp: %v", err)
	}
}

// With balanceSimilarNodeGroups, a scale-up is spread over the zones'
// MachineSets, smallest first.
func TestBalanceSimilarNodeGroupsAcrossZones(t *testing.T) {
	f := &fixture{cfg: DefaultConfig()}
	f.cfg.BalanceSimilarNodeGroups = true
	f.sets = []*machinev1.MachineSet{
		machineSet("workers-a", "capstan.xlarge", "sim-zone-a", 0, 0, 10),
		machineSet("workers-b", "capstan.xlarge", "sim-zone-b", 0, 0, 10),
		machineSet("workers-c", "capstan.xlarge", "sim-zone-c", 0, 0, 10),
		machineSet("other", "capstan.2xlarge", "sim-zone-a", 0, 0, 10),
	}
	f.pending = pods(5, "web", "7", 0)
	p := f.plan(t)
	want := "{MachineSet/openshift-machine-api/workers-a 0->2 (max: 10)} {MachineSet/openshift-machine-api/workers-b 0->2 (max: 10)} {MachineSet/openshift-machine-api/workers-c 0->1 (max: 10)}"
	if got := increases(p); got != want {
		t.Fatalf("increases\n%s, want 5 nodes spread over the zones\n%s", got, want)
	}
}

// The chapter's priority cutoff beside preemption: a pod at or above the
// cutoff that fits once the expendable pods of a node give way adds no
// node, and says it fits by preemption.
func TestPodThatFitsByPreemptionAddsNoNode(t *testing.T) {
	f := &fixture{cfg: DefaultConfig()}
	ms := machineSet("workers", "capstan.large", "", 1, 1, 3)
	f.sets = []*machinev1.MachineSet{ms}
	f.registerFull(t, ms)
	f.scheduled["workers-0"] = pods(3, "batch", "1", -100)
	f.pending = []*corev1.Pod{pod("important", "2", 1000, "")}
	p := f.plan(t)
	if len(p.Increases) != 0 {
		t.Fatalf("scaled up for a pod preemption makes room for: %s", increases(p))
	}
	want := "pod fits on node workers-0 once pods below the priority cutoff -10 there are preempted"
	if v := p.Verdicts["important"]; v == nil || v.Message != want {
		t.Fatalf("verdict %+v, want %q", v, want)
	}
	// Without expendable pods in the way, it just fits.
	f.scheduled["workers-0"] = pods(1, "web", "1", 0)
	if v := f.plan(t).Verdicts["important"]; v == nil || v.Message != "pod fits on node workers-0" {
		t.Fatalf("verdict %+v", v)
	}
}

// A pod nominated to a node by preemption keeps its room there: another
// pending pod that would need it makes the group grow, as upstream's
// autoscaler puts nominated pods on their node.
func TestNominatedPodsKeepTheirRoom(t *testing.T) {
	f := &fixture{cfg: DefaultConfig()}
	ms := machineSet("workers", "capstan.large", "", 1, 1, 3)
	f.sets = []*machinev1.MachineSet{ms}
	f.registerFull(t, ms)
	f.scheduled["workers-0"] = pods(1, "web", "2", 0)
	waiting := pod("waiting", "2", 1000, "")
	waiting.Status.NominatedNodeName = "workers-0"
	f.nominated = []*corev1.Pod{waiting}
	f.pending = []*corev1.Pod{pod("another", "2", 0, "")}
	p := f.plan(t)
	if increases(p) != "{MachineSet/openshift-machine-api/workers 1->2 (max: 3)}" {
		t.Fatalf("increases %q: the nominated pod's room was counted as free", increases(p))
	}
}
