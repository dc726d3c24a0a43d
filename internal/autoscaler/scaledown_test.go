package autoscaler

import (
	"strings"
	"testing"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/scheduler/algorithm"
	"github.com/capstan-dev/capstan/internal/scheduler/policy"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

type downFixture struct {
	cfg      Config
	set      *machinev1.MachineSet
	fixture  fixture
	pods     map[string][]*corev1.Pod
	pdbs     []*policyv1.PodDisruptionBudget
	since    map[string]time.Time
	missing  map[string]bool
	cooldown string
}

// newDownFixture is an autoscaled MachineSet of n 8-core nodes (ms-0..),
// min 0, and no pods.
func newDownFixture(t *testing.T, n int) *downFixture {
	f := &downFixture{cfg: DefaultConfig(), pods: map[string][]*corev1.Pod{}, since: map[string]time.Time{}, missing: map[string]bool{}}
	f.set = machineSet("ms", "capstan.xlarge", "", n, 0, 10)
	f.fixture.sets = []*machinev1.MachineSet{f.set}
	f.fixture.registerFull(t, f.set)
	f.fixture.scheduled = nil // empty nodes
	return f
}

// on places a pod on a node.
func (f *downFixture) on(node string, p *corev1.Pod) *corev1.Pod {
	p.Spec.NodeName = node
	f.pods[node] = append(f.pods[node], p)
	return p
}

// plan decides on the fixture as a loop would: the state put together
// by newClusterState, the input by scaleDownInput.
func (f *downFixture) plan(t *testing.T) *ScaleDownPlan {
	t.Helper()
	alg, err := algorithm.New(policy.Default(), 1)
	if err != nil {
		t.Fatal(err)
	}
	var all []*corev1.Pod
	for _, ps := range f.pods {
		all = append(all, ps...)
	}
	st := newClusterState(&f.cfg, f.fixture.nodes, all, f.fixture.sets, f.fixture.machines, nil, fixtureNow)
	in := st.scaleDownInput(alg, algorithm.Listers{}, nil, t0)
	in.PDBs, in.Cooldown = f.pdbs, f.cooldown
	in.ControllerExists = func(ns string, ref *metav1.OwnerReference) bool { return !f.missing[ref.Name] }
	in.UnneededSince = f.since
	return PlanScaleDown(in)
}

func reason(p *ScaleDownPlan, node string) string { return p.Verdicts[node].Reason }

// Each rule of the chapter that keeps a node, one case each, on a node
// that is otherwise unneeded (ms-0, lightly used; ms-1 has room).
func TestScaleDownBlockers(t *testing.T) {
	// ms-0 is the node looked at, ms-1 an empty node (unneeded first, so no
	// destination), ms-2 a busy node with room for ms-0's pod.
	for _, tc := range []struct {
		name  string
		setup func(f *downFixture, p *corev1.Pod)
		want  string
	}{
		{"no controller", func(f *downFixture, p *corev1.Pod) { p.OwnerReferences = nil },
			"pod default/app is not replicated (no controller that recreates it)"},
		{"controller gone", func(f *downFixture, p *corev1.Pod) { f.missing["app"] = true },
			"pod default/app: its ReplicaSet app does not exist"},
		{"kube-system without PDB", func(f *downFixture, p *corev1.Pod) { p.Namespace = "kube-system" },
			"non-daemonset, non-mirrored, non-pdb-assigned kube-system pod present: kube-system/app"},
		{"safe-to-evict false", func(f *downFixture, p *corev1.Pod) {
			p.Annotations = map[string]string{SafeToEvictAnnotation: "false"}
		}, `pod default/app is annotated cluster-autoscaler.kubernetes.io/safe-to-evict: "false"`},
		{"local storage", func(f *downFixture, p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		}, "pod default/app has local storage (volume data)"},
		{"restrictive PDB", func(f *downFixture, p *corev1.Pod) {
			f.pdbs = []*policyv1.PodDisruptionBudget{{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "default"},
				Spec:   policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "app"}}},
				Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0}}}
		}, "not enough pod disruption budget to move pod default/app (PodDisruptionBudget app allows 0 disruptions)"},
		{"PDB of every pod (empty selector)", func(f *downFixture, p *corev1.Pod) {
			f.pdbs = []*policyv1.PodDisruptionBudget{{ObjectMeta: metav1.ObjectMeta{Name: "all", Namespace: "default"},
				Spec:   policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt(0)), Selector: &metav1.LabelSelector{}},
				Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0}}}
		}, "not enough pod disruption budget to move pod default/app (PodDisruptionBudget all allows 0 disruptions)"},
		{"nowhere to go", func(f *downFixture, p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"only": "here"} },
			"pod default/app can go to no other node: 0/1 nodes are available: 1 node(s) didn't match node selector"},
		{"scale-down disabled", func(f *downFixture, p *corev1.Pod) {
			f.fixture.nodes[0].Annotations[ScaleDownDisabledAnnotation] = "true"
		}, `node is annotated cluster-autoscaler.kubernetes.io/scale-down-disabled: "true"`},
		{"utilization", func(f *downFixture, p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = *resourceCPU("6")
		}, "utilization 0.75 above the threshold 0.5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newDownFixture(t, 3)
			f.since["ms-0"] = t0.Add(-time.Hour)
			f.on("ms-2", pod("busy", "5", 0, "busy"))
			p := f.on("ms-0", pod("app", "1", 0, "app"))
			tc.setup(f, p)
			got := reason(f.plan(t), "ms-0")
			if got != tc.want {
				t.Fatalf("reason\n%q, want\n%q", got, tc.want)
			}
		})
	}
}

// safe-to-evict "true" overrides the rules that would keep the pod.
func TestSafeToEvictTrueOverridesBlockers(t *testing.T) {
	f := newDownFixture(t, 3)
	f.since["ms-0"] = t0.Add(-time.Hour)
	f.on("ms-2", pod("busy", "5", 0, "busy"))
	p := f.on("ms-0", pod("app", "1", 0, ""))
	p.Annotations = map[string]string{SafeToEvictAnnotation: "true"}
	p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	plan := f.plan(t)
	if v := plan.Verdicts["ms-0"]; !v.Remove || v.Empty {
		t.Fatalf("ms-0: %+v", v)
	}
}

// Expendable pods neither block nor need a place.
func TestExpendablePodsDoNotBlockScaleDown(t *testing.T) {
	f := newDownFixture(t, 2)
	f.since["ms-0"] = t0.Add(-time.Hour)
	f.on("ms-0", pod("batch", "1", -20, ""))
	if v := f.plan(t).Verdicts["ms-0"]; !v.Remove || !v.Empty {
		t.Fatalf("ms-0 with only an expendable pod: %+v", v)
	}
}

// A node goes only after unneededTime; the time is taken from the record
// on the node, and the group's and cluster's minimums hold.
func TestScaleDownTimersAndMinimums(t *testing.T) {
	f := newDownFixture(t, 3)
	f.since["ms-0"] = t0.Add(-4 * time.Minute)
	p := f.plan(t)
	if got := reason(p, "ms-0"); got != "unneeded for 4m of 10m" {
		t.Errorf("ms-0: %q", got)
	}
	if v := p.Verdicts["ms-1"]; !v.Unneeded || !v.Since.Equal(t0) {
		t.Errorf("ms-1 not found unneeded now: %+v", v)
	}
	for n := range 3 {
		f.since[f.fixture.nodes[n].Name] = t0.Add(-time.Hour)
	}
	f.set.Annotations[MinSizeAnnotation] = "2"
	p = f.plan(t)
	if len(p.Remove) != 1 {
		t.Fatalf("removed %d nodes, want 1 (min 2 of 3)", len(p.Remove))
	}
	if got := reason(p, "ms-2"); got != "unneeded, but MachineSet ms is at its minimum size 2" {
		t.Errorf("ms-2: %q", got)
	}
	f.set.Annotations[MinSizeAnnotation] = "0"
	f.cfg.Cores = Range{Min: 16, Max: 100}
	p = f.plan(t)
	if len(p.Remove) != 1 || reason(p, "ms-2") != "unneeded, but removing it would go below cluster cores min 16" {
		t.Errorf("cores min: removed %d, ms-2 %q", len(p.Remove), reason(p, "ms-2"))
	}
	f.cfg.Cores = Range{Min: 0, Max: 100}
	f.cooldown = "scale-down is in cooldown until 12:10:00 (delayAfterAdd)"
	if p = f.plan(t); len(p.Remove) != 0 || !strings.HasPrefix(reason(p, "ms-0"), "unneeded, but scale-down is in cooldown") {
		t.Errorf("cooldown: removed %d, ms-0 %q", len(p.Remove), reason(p, "ms-0"))
	}
}

// Empty nodes go together; a node whose pods must move goes one at a time,
// and its pods take room on the others in the simulation.
func TestScaleDownEmptyInBulkDrainOneAtATime(t *testing.T) {
	f := newDownFixture(t, 4)
	for _, n := range f.fixture.nodes {
		f.since[n.Name] = t0.Add(-time.Hour)
	}
	f.on("ms-2", pod("a", "2", 0, "web"))
	f.on("ms-3", pod("b", "2", 0, "web"))
	p := f.plan(t)
	var removed []string
	for _, v := range p.Remove {
		removed = append(removed, v.Node)
	}
	if strings.Join(removed, ",") != "ms-0,ms-1,ms-2" {
		t.Fatalf("removed %v, want the two empty nodes and one drained node", removed)
	}
	// Every other node goes: b has nowhere left to go.
	if got := reason(p, "ms-3"); got != "pod default/b can go to no other node: 0/0 nodes are available" {
		t.Errorf("ms-3: %q", got)
	}
}

func resourceCPU(v string) *resource.Quantity {
	q := resource.MustParse(v)
	return &q
}

func TestScaleDownDrainsOneNodeAtATime(t *testing.T) {
	f := newDownFixture(t, 4)
	for _, n := range f.fixture.nodes {
		f.since[n.Name] = t0.Add(-time.Hour)
	}
	f.on("ms-0", pod("a", "1", 0, "web"))
	f.on("ms-1", pod("b", "1", 0, "web"))
	f.on("ms-2", pod("c", "5", 0, "busy"))
	f.on("ms-3", pod("d", "5", 0, "busy"))
	p := f.plan(t)
	if len(p.Remove) != 1 || p.Remove[0].Node != "ms-0" || len(p.Remove[0].PodsToMove) != 1 {
		t.Fatalf("removed %+v, want ms-0 alone", p.Remove)
	}
	if got := reason(p, "ms-1"); got != "unneeded; waits for the node being drained" {
		t.Errorf("ms-1: %q", got)
	}
}

func TestShortDurationChangesOncePerMinuteFromAMinuteOn(t *testing.T) {
	for d, want := range map[time.Duration]string{
		45*time.Second + 300*time.Millisecond:      "45s",
		4*time.Minute + 59*time.Second:             "4m",
		10 * time.Minute:                           "10m",
		time.Hour + 10*time.Minute + 5*time.Second: "1h10m",
		2 * time.Hour:                              "2h",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%s) = %s, want %s", d, got, want)
		}
	}
}

// A node the simulation moved pods onto is not empty: removing it moves
// them again (review's A -> B chain). ms-0 (a Deployment pod, 1 core) is
// looked at before ms-1, whose only pod is expendable; a moves to ms-1,
// and ms-1 then has a pod with nowhere else to go.
func TestScaleDownMovesAgainThePodsItMoved(t *testing.T) {
	f := newDownFixture(t, 3)
	for _, n := range f.fixture.nodes {
		f.since[n.Name] = t0.Add(-time.Hour)
	}
	f.on("ms-0", pod("a", "1", 0, "web"))
	f.on("ms-1", pod("batch", "4", -100, "batch")) // expendable, below the cutoff
	f.on("ms-2", pod("busy", "7500m", 0, "busy"))
	p := f.plan(t)
	var removed []string
	for _, v := range p.Remove {
		removed = append(removed, v.Node)
	}
	if len(removed) != 1 || removed[0] != "ms-0" {
		t.Fatalf("removed %v, want ms-0 alone (a moves to ms-1, which must then stay)", removed)
	}
	if v := p.Verdicts["ms-1"]; v.Empty || v.Code != "NoPlaceToMovePods" || !strings.Contains(v.Reason, "pod default/a can go to no other node") {
		t.Errorf("ms-1: empty %v, %s %q; want it kept for the pod moved there", v.Empty, v.Code, v.Reason)
	}
}

// Removals under way count in the next decision: the pods of a node
// being deleted need a place (an empty node that must take them is not
// empty), its drain is the one drain at a time, and it no longer counts
// towards the cluster's minimum cores.
func TestScaleDownCountsRemovalsUnderWay(t *testing.T) {
	deleting := func(f *downFixture, node string) {
		for _, n := range f.fixture.nodes {
			if n.Name == node {
				n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: ToBeDeletedTaint, Effect: corev1.TaintEffectNoSchedule})
			}
		}
	}
	t.Run("its pods need a place", func(t *testing.T) {
		f := newDownFixture(t, 3)
		for _, n := range f.fixture.nodes {
			f.since[n.Name] = t0.Add(-time.Hour)
		}
		deleting(f, "ms-0")
		f.on("ms-0", pod("a", "6", 0, "web"))
		p := f.plan(t)
		if len(p.Remove) != 0 {
			var names []string
			for _, v := range p.Remove {
				names = append(names, v.Node)
			}
			t.Fatalf("removed %v while ms-0's pod needs one of them", names)
		}
		if got := p.Verdicts["ms-0"].Code; got != "CurrentlyBeingDeleted" {
			t.Errorf("ms-0: %s", got)
		}
	})
	t.Run("one drain at a time, its own included", func(t *testing.T) {
		f := newDownFixture(t, 4)
		for _, n := range f.fixture.nodes {
			f.since[n.Name] = t0.Add(-time.Hour)
		}
		deleting(f, "ms-0")
		f.on("ms-0", pod("a", "1", 0, "web"))
		f.on("ms-1", pod("b", "1", 0, "web"))
		f.on("ms-2", pod("c", "5", 0, "busy"))
		f.on("ms-3", pod("d", "5", 0, "busy"))
		p := f.plan(t)
		if len(p.Remove) != 0 {
			t.Fatalf("removed %s while ms-0 drains", p.Remove[0].Node)
		}
		if got := reason(p, "ms-1"); got != "unneeded; waits for the node being drained" {
			t.Errorf("ms-1: %q", got)
		}
	})
	t.Run("minimums leave it out", func(t *testing.T) {
		f := newDownFixture(t, 3) // 3 x 8 cores
		f.cfg.Cores = Range{Min: 16, Max: 100}
		for _, n := range f.fixture.nodes {
			f.since[n.Name] = t0.Add(-time.Hour)
		}
		deleting(f, "ms-0")
		p := f.plan(t)
		if len(p.Remove) != 0 {
			t.Fatalf("removed %s: with ms-0 going, 16 cores are the minimum", p.Remove[0].Node)
		}
		if got := p.Verdicts["ms-1"].Code; got != "MinimalResourceLimitExceeded" {
			t.Errorf("ms-1: %s %q", got, reason(p, "ms-1"))
		}
	})
}
