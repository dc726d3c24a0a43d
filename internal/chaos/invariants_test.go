package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	configv1 "github.com/openshift/api/config/v1"
	machinev1 "github.com/openshift/api/machine/v1beta1"
	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/etcd"
	"github.com/capstan-dev/capstan/internal/failpoint"
	"github.com/capstan-dev/capstan/internal/mco"
	"github.com/capstan-dev/capstan/internal/sim"
	"github.com/capstan-dev/capstan/internal/updateservice/demo"
)

// fakeHistory builds a history change by change, each at the next
// revision.
type fakeHistory struct {
	h    History
	last map[string]runtime.Object
}

func newFakeHistory() *fakeHistory { return &fakeHistory{last: map[string]runtime.Object{}} }

// put records obj as the new state of key (nil: deleted).
func (f *fakeHistory) put(key string, obj runtime.Object) int64 {
	f.h.rev++
	f.h.events = append(f.h.events, Event{Rev: f.h.rev, Key: key, Obj: obj, Prev: f.last[key]})
	if obj == nil {
		delete(f.last, key)
	} else {
		f.last[key] = obj
	}
	return f.h.rev
}

func invariants(vs []Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Invariant)
	}
	return out
}

func setObj(name string, replicas int32) *machinev1.MachineSet {
	return &machinev1.MachineSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "openshift-machine-api", UID: "uid-" + "set"},
		Spec: machinev1.MachineSetSpec{Replicas: ptr.To(replicas)}}
}

func machineObj(name, set string, hooks ...string) *machinev1.Machine {
	m := &machinev1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "openshift-machine-api",
		OwnerReferences: []metav1.OwnerReference{{Kind: "MachineSet", Name: set, Controller: ptr.To(true)}}}}
	for _, h := range hooks {
		m.Spec.LifecycleHooks.PreDrain = append(m.Spec.LifecycleHooks.PreDrain, machinev1.LifecycleHook{Name: h, Owner: "test"})
	}
	return m
}

func instanceObj(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "capstan-sim", Labels: map[string]string{"sim.capstan.dev/instance": "true"}}}
}

func TestCheckMachineSet(t *testing.T) {
	good := newFakeHistory()
	good.put(machineSetsKey+"openshift-machine-api/s", setObj("s", 0))
	good.put(machineSetsKey+"openshift-machine-api/s", setObj("s", 3))
	for i := range 3 {
		m := fmt.Sprintf("s-%d", i)
		good.put(machinesKey+"openshift-machine-api/"+m, machineObj(m, "s"))
		good.put(instancesKey+m, instanceObj(m))
		// An update is not a creation.
		good.put(instancesKey+m, instanceObj(m))
	}
	good.put(machineSetsKey+"openshift-machine-api/s", setObj("s", 0))
	if vs := checkMachineSet(&good.h, "s", 3); len(vs) != 0 {
		t.Fatalf("a clean scale-up: %v", vs)
	}

	bad := newFakeHistory()
	bad.put(machineSetsKey+"openshift-machine-api/s", setObj("s", 4))
	for i := range 4 {
		m := fmt.Sprintf("s-%d", i)
		bad.put(machinesKey+"openshift-machine-api/"+m, machineObj(m, "s"))
		if i < 3 {
			bad.put(instancesKey+m, instanceObj(m))
		}
	}
	// s-0's instance made a second time.
	bad.put(instancesKey+"s-0", nil)
	bad.put(instancesKey+"s-0", instanceObj("s-0"))
	// Another set's machine does not count.
	bad.put(machinesKey+"openshift-machine-api/other-0", machineObj("other-0", "other"))
	got := invariants(checkMachineSet(&bad.h, "s", 3))
	want := []string{"replicas", "machines", "instances", "instances"} // s-0 twice, s-3 never
	if !slices.Equal(got, want) {
		t.Fatalf("violations %v, want %v", got, want)
	}
}

func nodeObj(name, boot, current, desired string, ready, cordoned bool) *corev1.Node {
	status := corev1.ConditionTrue
	if !ready {
		status = corev1.ConditionFalse
	}
	state := mco.StateDone
	if current != desired {
		state = mco.StateWorking
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"node-role.kubernetes.io/worker": ""},
			Annotations: map[string]string{mco.CurrentConfigAnnotation: current, mco.DesiredConfigAnnotation: desired, mco.StateAnnotation: state}},
		Spec:   corev1.NodeSpec{Unschedulable: cordoned},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}, NodeInfo: corev1.NodeSystemInfo{BootID: boot}},
	}
}

func TestCheckRollout(t *testing.T) {
	// A rollout one node at a time, each rebooted once.
	good := newFakeHistory()
	for _, n := range []string{"w1", "w2"} {
		good.put(nodesKey+n, nodeObj(n, n+"-a", "r1", "r1", true, false))
	}
	for _, n := range []string{"w1", "w2"} {
		good.put(nodesKey+n, nodeObj(n, n+"-a", "r1", "r2", true, false))
		good.put(nodesKey+n, nodeObj(n, n+"-a", "r1", "r2", true, true))
		good.put(nodesKey+n, nodeObj(n, n+"-b", "r1", "r2", false, true))
		good.put(nodesKey+n, nodeObj(n, n+"-b", "r2", "r2", true, false))
	}
	if vs := checkRollout(&good.h, "worker", isWorker, "r2", 1, 2); len(vs) != 0 {
		t.Fatalf("a clean rollout: %v", vs)
	}
	// H3: what the check cannot see fails it.
	if got := invariants(checkRollout(&good.h, "worker", isWorker, "r3", 1, 2)); !slices.Contains(got, "rollout") {
		t.Errorf("a rollout to a config no node was told to run: %v, want a rollout violation", got)
	}
	if vs := checkRollout(&good.h, "worker", isWorker, "r2", 1, 3); len(vs) != 1 || !strings.Contains(vs[0].Detail, "2 nodes of pool worker (w1, w2), want 3") {
		t.Errorf("a node missing from the history: %v", vs)
	}

	// A node the user added mid-rollout: out of service while it boots
	// (not the MCO's doing), then running r2 from its first boot.
	joined := newFakeHistory()
	for _, e := range good.h.events[:4] {
		joined.put(e.Key, e.Obj)
	}
	joined.put(nodesKey+"w3", nodeObj("w3", "", "", "", false, false))
	joined.put(nodesKey+"w3", nodeObj("w3", "w3-a", "r2", "r2", false, false))
	joined.put(nodesKey+"w3", nodeObj("w3", "w3-a", "r2", "r2", true, false))
	for _, e := range good.h.events[4:] {
		joined.put(e.Key, e.Obj)
	}
	if vs := checkRollout(&joined.h, "worker", isWorker, "r2", 1, 3); len(vs) != 0 {
		t.Errorf("a node that joined mid-rollout running r2: %v", vs)
	}
	// Once it has served, it counts: taken out with another, it is one
	// too many.
	joined.put(nodesKey+"w3", nodeObj("w3", "w3-a", "r2", "r2", true, true))
	joined.put(nodesKey+"w1", nodeObj("w1", "w1-b", "r2", "r2", true, true))
	if got := invariants(checkRollout(&joined.h, "worker", isWorker, "r2", 1, 3)); !slices.Equal(got, []string{"maxUnavailable"}) {
		t.Errorf("the joined node and w1 out of service at once: %v, want maxUnavailable", got)
	}

	bad := newFakeHistory()
	for _, n := range []string{"w1", "w2", "w3"} {
		bad.put(nodesKey+n, nodeObj(n, n+"-a", "r1", "r1", true, false))
	}
	// Two at once, w1 booted twice, w3 never.
	bad.put(nodesKey+"w1", nodeObj("w1", "w1-a", "r1", "r2", true, false))
	bad.put(nodesKey+"w2", nodeObj("w2", "w2-a", "r1", "r2", true, false))
	bad.put(nodesKey+"w1", nodeObj("w1", "w1-b", "r1", "r2", true, false))
	bad.put(nodesKey+"w1", nodeObj("w1", "w1-c", "r2", "r2", true, false))
	bad.put(nodesKey+"w2", nodeObj("w2", "w2-b", "r2", "r2", true, false))
	bad.put(nodesKey+"w3", nodeObj("w3", "w3-a", "r2", "r2", true, false))
	vs := checkRollout(&bad.h, "worker", isWorker, "r2", 1, 3)
	if got, want := invariants(vs), []string{"maxUnavailable", "reboots", "reboots"}; !slices.Equal(got, want) {
		t.Fatalf("violations %v, want %v", vs, want)
	}
	if !strings.Contains(vs[0].Detail, "2 nodes unavailable at once (w1, w2") || !strings.Contains(vs[1].Detail, "w1") || !strings.Contains(vs[2].Detail, "w3") {
		t.Errorf("details: %v", vs)
	}
}

func TestCheckHooksHeld(t *testing.T) {
	f := newFakeHistory()
	key := func(m string) string { return machinesKey + "openshift-machine-api/" + m }
	f.put(key("s-1"), machineObj("s-1", "s", "hold"))
	f.put(nodesKey+"s-1", &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "s-1", Labels: setLabel("s")}})
	f.put(key("s-2"), machineObj("s-2", "s", "hold"))
	// s-1's node cordoned while its hook holds it; released after.
	f.put(nodesKey+"s-1", &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "s-1", Labels: setLabel("s")}, Spec: corev1.NodeSpec{Unschedulable: true}})
	f.put(key("s-1"), machineObj("s-1", "s"))
	// s-2's instance goes while its hook holds it.
	f.put(instancesKey+"s-2", instanceObj("s-2"))
	f.put(instancesKey+"s-2", nil)
	f.put(key("s-2"), machineObj("s-2", "s", "hold"))
	// s-3 never had the hook.
	f.put(key("s-3"), machineObj("s-3", "s"))
	vs := checkHooksHeld(&f.h, "s")
	var details []string
	for _, v := range vs {
		details = append(details, v.Detail)
	}
	all := strings.Join(details, "\n")
	for _, want := range []string{"machine s-3 never had its preDrain hook", "machine s-2's instance was terminated", "node s-1 was cordoned for its drain"} {
		if !strings.Contains(all, want) {
			t.Errorf("no violation %q in:\n%s", want, all)
		}
	}
	if len(vs) != 3 {
		t.Errorf("%d violations, want 3:\n%s", len(vs), all)
	}
}

func TestCheckRunLevels(t *testing.T) {
	report := func(f *fakeHistory, name string) {
		f.put(operatorsKey+name, &configv1.ClusterOperator{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: configv1.ClusterOperatorStatus{Versions: []configv1.OperandVersion{{Name: "operator", Version: updateTo}}}})
	}
	inOrder := newFakeHistory()
	for _, op := range demo.Operators {
		report(inOrder, op.Name)
	}
	if vs := checkRunLevels(&inOrder.h); len(vs) != 0 {
		t.Fatalf("operators in run-level order: %v", vs)
	}
	// The last operator reports first; one never reports.
	early := newFakeHistory()
	ops := demo.Operators
	report(early, ops[len(ops)-1].Name)
	for _, op := range ops[1 : len(ops)-1] {
		report(early, op.Name)
	}
	vs := checkRunLevels(&early.h)
	got := invariants(vs)
	if len(got) == 0 || got[len(got)-1] != "completes" || !slices.Contains(got, "run levels") {
		t.Fatalf("violations %v", vs)
	}
	if !strings.Contains(vs[len(vs)-1].Detail, ops[0].Name) {
		t.Errorf("the operator that never reported is not named: %v", vs[len(vs)-1])
	}
}

// machine-config may report the new version only once every
// control-plane node runs the master pool's new configuration.
func TestCheckMachineConfigWaitsForMasters(t *testing.T) {
	const config = "rendered-master-new"
	master := func(current, state string, cordoned bool) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "master-0", Labels: map[string]string{"node-role.kubernetes.io/master": ""},
			Annotations: map[string]string{mco.CurrentConfigAnnotation: current, mco.DesiredConfigAnnotation: config, mco.StateAnnotation: state}},
			Spec: corev1.NodeSpec{Unschedulable: cordoned}}
	}
	report := func(f *fakeHistory) {
		f.put(operatorsKey+"machine-config", &configv1.ClusterOperator{ObjectMeta: metav1.ObjectMeta{Name: "machine-config"},
			Status: configv1.ClusterOperatorStatus{Versions: []configv1.OperandVersion{{Name: "operator", Version: updateTo}}}})
	}
	after := newFakeHistory()
	after.put(nodesKey+"master-0", master("rendered-master-old", mco.StateWorking, true))
	after.put(nodesKey+"master-0", master(config, mco.StateDone, false))
	report(after)
	if vs := checkMachineConfigWaitsForMasters(&after.h, config); len(vs) != 0 {
		t.Errorf("machine-config reported after the master finished: %v", vs)
	}
	during := newFakeHistory()
	during.put(nodesKey+"master-0", master("rendered-master-old", mco.StateWorking, true))
	report(during)
	during.put(nodesKey+"master-0", master(config, mco.StateDone, false))
	vs := checkMachineConfigWaitsForMasters(&during.h, config)
	if len(vs) != 1 || vs[0].Invariant != "run levels" || !strings.Contains(vs[0].Detail, "master-0") {
		t.Errorf("machine-config reported while the master rebooted: %v", vs)
	}
	none := newFakeHistory()
	report(none)
	if vs := checkMachineConfigWaitsForMasters(&none.h, config); len(vs) != 1 {
		t.Errorf("a report with no node in the history: %v", vs)
	}
}

func TestEvictionViolations(t *testing.T) {
	taintedAt := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	f := newFakeHistory()
	f.put(nodesKey+"v", &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "v"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{
		{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute, TimeAdded: ptr.To(metav1.NewTime(taintedAt))}}}})
	pod := func(name, app string, evictedAfter time.Duration) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ackNamespace, Labels: map[string]string{"app": app}}, Spec: corev1.PodSpec{NodeName: "v"}}
		if evictedAfter != 0 {
			p.DeletionTimestamp = ptr.To(metav1.NewTime(taintedAt.Add(evictedAfter + 30*time.Second)))
			p.DeletionGracePeriodSeconds = ptr.To[int64](30)
		}
		return p
	}
	key := func(n string) string { return podsKey + ackNamespace + "/" + n }
	for _, n := range []string{"a", "b", "c"} {
		f.put(key(n), pod(n, evictApp, 0))
	}
	f.put(key(keepPod), pod(keepPod, keepPod, 0))
	f.put(key("a"), pod("a", evictApp, 16*time.Second))
	f.put(key("b"), pod("b", evictApp, 15*time.Second))
	f.put(key("c"), pod("c", evictApp, 10*time.Second)) // early
	// A pod the scheduler placed elsewhere before the cordon reached it,
	// deleted before the node stopped: not a replacement.
	misplaced := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", Namespace: ackNamespace, Labels: map[string]string{"app": evictApp},
		CreationTimestamp: metav1.NewTime(taintedAt.Add(-time.Minute))}, Spec: corev1.PodSpec{NodeName: "w2"}}
	f.put(key("elsewhere"), misplaced)
	f.put(key("elsewhere"), nil)
	replacement := func(n string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: ackNamespace, Labels: map[string]string{"app": evictApp},
			CreationTimestamp: metav1.NewTime(taintedAt.Add(20 * time.Second))}}
	}
	for _, n := range []string{"a2", "b2", "c2"} {
		f.put(key(n), replacement(n))
	}
	if vs := evictionViolations(&f.h, "v"); len(vs) != 1 || !strings.Contains(vs[0].Detail, "pod c was evicted") {
		t.Fatalf("violations %v, want pod c's early eviction", vs)
	}
	f.put(key("extra"), replacement("extra"))
	f.put(key(keepPod), pod(keepPod, keepPod, 20*time.Second))
	got := invariants(evictionViolations(&f.h, "v"))
	if want := []string{"tolerations", "tolerations", "replacements"}; !slices.Equal(got, want) {
		t.Fatalf("violations %v, want %v", got, want)
	}
}

func TestPlanKillsIsReproducible(t *testing.T) {
	s := &Scenario{Span: 10 * time.Second, Points: []Point{{failpoint.MCDMidReboot, 3}, {failpoint.DrainStarted, 1}}}
	a, b := PlanKills(s, 42, 20), PlanKills(s, 42, 20)
	if !slices.Equal(a, b) {
		t.Fatalf("the same seed planned %v then %v", a, b)
	}
	if c := PlanKills(s, 43, 20); slices.Equal(a, c) {
		t.Fatalf("seeds 42 and 43 planned the same kills %v", a)
	}
	points, instants := 0, 0
	for _, k := range a {
		switch k.Point {
		case "":
			instants++
			if k.After < 0 || k.After >= s.Span {
				t.Errorf("a random kill at %s, outside the operation's [0, %s)", k.After, s.Span)
			}
		case failpoint.MCDMidReboot:
			points++
			if k.Hit < 1 || k.Hit > 3 {
				t.Errorf("kill at hit %d of %s, want 1-3", k.Hit, k.Point)
			}
		case failpoint.DrainStarted:
			points++
			if k.Hit != 1 {
				t.Errorf("kill at hit %d of %s, want 1", k.Hit, k.Point)
			}
		default:
			t.Errorf("kill at %s, not a point of the scenario", k.Point)
		}
	}
	if points == 0 || instants == 0 {
		t.Errorf("%d kills at points and %d at instants: want both", points, instants)
	}
	if none := PlanKills(&Scenario{Span: time.Second}, 42, 5); slices.ContainsFunc(none, func(k Kill) bool { return k.Point != "" }) {
		t.Errorf("a scenario without points got kills at points: %v", none)
	}
	// The points come in the order the operation reaches them, the
	// instants in time order.
	lastPoint, lastAt := -1, time.Duration(-1)
	for _, k := range a {
		if k.Point == "" {
			if k.After < lastAt {
				t.Errorf("kills %v: the instants are not in time order", a)
			}
			lastAt = k.After
			continue
		}
		i := slices.IndexFunc(s.Points, func(p Point) bool { return p.Name == k.Point })
		if i < lastPoint {
			t.Errorf("kills %v: the points are not in the operation's order", a)
		}
		lastPoint = i
	}
}

// A point's hit is planned once at most: the operation reaches it once,
// and a second kill there would never land. Hits of a point come in
// order; once every hit is planned, the kills left go to instants.
func TestPlanKillsNeverPlansAHitTwice(t *testing.T) {
	s := &Scenario{Span: 10 * time.Second, Points: []Point{{failpoint.MCDMidReboot, 3}, {failpoint.DrainStarted, 1}}}
	for seed := range uint64(200) {
		kills := PlanKills(s, seed, 8)
		seen := map[Kill]bool{}
		last := map[string]int{}
		for _, k := range kills {
			if k.Point == "" {
				continue
			}
			if seen[k] {
				t.Fatalf("seed %d planned %s twice: %v", seed, k, kills)
			}
			seen[k] = true
			if k.Hit < last[k.Point] {
				t.Fatalf("seed %d: the hits of %s are out of order: %v", seed, k.Point, kills)
			}
			last[k.Point] = k.Hit
		}
		if len(kills) != 8 || len(seen) > 4 {
			t.Fatalf("seed %d planned %v: want 8 kills, at most the 4 hits of the points", seed, kills)
		}
	}
}

// CI's plan reaches every point of a scenario once, in order, then its
// random instants.
func TestPlanEveryPoint(t *testing.T) {
	s := &Scenario{Span: 10 * time.Second, Points: []Point{{failpoint.MCDMidReboot, 3}, {failpoint.DrainStarted, 1}}}
	got := PlanEveryPoint(s, 7, 2)
	if len(got) != 4 || got[0].Point != failpoint.MCDMidReboot || got[1].Point != failpoint.DrainStarted || got[0].Hit != 1 || got[1].Hit != 1 ||
		got[2].Point != "" || got[3].Point != "" || got[2].After > got[3].After || got[3].After >= s.Span {
		t.Fatalf("PlanEveryPoint = %v, want each point in order, then 2 instants of the operation in order", got)
	}
}

// The operation's time counts only while capstan is up, from the
// operation's start; phases are labels.
func TestOperationTime(t *testing.T) {
	o := newOperation()
	t0 := time.Now()
	o.up(t0)
	if o.elapsed(t0.Add(time.Minute)) != 0 || o.hasStarted() || o.Phase() != setupPhase {
		t.Fatalf("before the start: %s, started %v, phase %q", o.elapsed(t0.Add(time.Minute)), o.hasStarted(), o.Phase())
	}
	o.enter("replacing:m1,m2")
	select {
	case <-o.started:
	default:
		t.Fatal("the first phase after setup did not start the operation")
	}
	s := o.startedAt
	if o.Phase() != "replacing" {
		t.Errorf("phase %q, want replacing", o.Phase())
	}
	o.down(s.Add(10 * time.Second))
	o.up(s.Add(40 * time.Second)) // 30s down: not the operation's time
	if got := o.elapsed(s.Add(45 * time.Second)); got != 15*time.Second {
		t.Errorf("elapsed %s, want 15s", got)
	}
	o.enter("")
	if o.Phase() != setupPhase || o.startedAt != s {
		t.Errorf("phase %q, start moved: %v", o.Phase(), o.startedAt != s)
	}
}

func TestReportPrint(t *testing.T) {
	in := func(phase string) KillResult { return KillResult{Phase: phase} }
	rep := &Report{Kills: 2, Runs: []*RunResult{
		{Scenario: "mco", Seed: 7, Kills: []KillResult{in("rollout"), in("rollout")}, Recoveries: []time.Duration{time.Second, 3 * time.Second},
			Outage: 1500 * time.Millisecond, Operation: 20 * time.Second, MaxOutage: 30 * time.Second, MaxRecovery: time.Minute},
		{Scenario: "mco", Seed: 8, Kills: []KillResult{in("rollout"), in("up")}, NotReached: []Kill{{After: time.Minute}},
			Recoveries: []time.Duration{2 * time.Second, 4 * time.Second}, Outage: 6 * time.Second,
			Violations: []Violation{{"reboots", "node w1 booted 2 times"}}, DataDir: "/tmp/x"},
	}}
	var buf bytes.Buffer
	rep.Print(&buf, func(s string, seed uint64, kills int, every bool) string {
		return fmt.Sprintf("replay %s %d %d %v", s, seed, kills, every)
	})
	want := `SCENARIO  RUNS  KILLS  NOT REACHED  VIOLATIONS  OP p50  RECOVER p50  RECOVER p99  OUTAGE p50  OUTAGE p99  OUTAGE max  BOUNDS                   KILLS BY PHASE
mco       2     4      1            1           20.0s   2.0s         4.0s         1.5s        6.0s        6.0s        outage 30s, recover 60s  rollout 3, up 1

mco seed 8: reboots: node w1 booted 2 times
  replay: replay mco 8 2 false
  data:   /tmp/x
`
	if buf.String() != want {
		t.Fatalf("printed:\n%s\nwant:\n%s", buf.String(), want)
	}
	if rep.Violations() != 1 {
		t.Errorf("Violations() = %d", rep.Violations())
	}
}

// The quorum check counts samples from the formation on, and only those
// taken while capstan was up; each limit is caught, a loss as short as
// three samples (half a second) included.
func TestCheckQuorum(t *testing.T) {
	at := time.Unix(0, 0)
	s := func(up bool, healthy int, voting ...string) memberSample {
		at = at.Add(sampleInterval)
		return memberSample{At: at, Up: up, Voting: voting, Healthy: healthy}
	}
	failed := func(up bool) memberSample {
		at = at.Add(sampleInterval)
		return memberSample{At: at, Up: up, Failed: true}
	}
	times := func(n int, f func() memberSample) []memberSample {
		out := make([]memberSample, n)
		for i := range out {
			out[i] = f()
		}
		return out
	}
	boot := s(true, 1, etcd.BootstrapName)
	formed := s(true, 3, "m0", "m1", "m2")
	three := func(healthy int, voting ...string) []memberSample {
		return times(3, func() memberSample { return s(true, healthy, voting...) })
	}
	cat := func(parts ...[]memberSample) []memberSample { return slices.Concat(parts...) }
	one := func(samples ...memberSample) []memberSample { return samples }
	cases := map[string]struct {
		samples      []memberSample
		want         []string
		maxVoting    int
		minHealthy   int
		writesFailed bool
	}{
		"a replacement as it should go": {one(boot, formed, s(true, 2, "m0", "m1", "m2"), s(true, 2, "m1", "m2"),
			s(true, 3, "m1", "m2", "m3")), nil, 3, 0, false},
		"before the formation and while down do not count": {one(s(true, 1, "x", "y", "z", "w"), formed,
			s(false, 0, "m0", "m1", "m2"), s(false, 1, "m0", "m1", "m2", "m3")), nil, 3, 0, false},
		"four voting":                              {one(formed, s(true, 4, "m0", "m1", "m2", "m3")), []string{"etcd members: 4 voting members"}, 3, 0, false},
		"one healthy for half a second":            {cat(one(formed), three(1, "m0", "m1", "m2")), []string{"etcd quorum: 1 healthy voting members of 3"}, 3, 0, false},
		"one healthy for two samples: an election": {one(formed, s(true, 1, "m0", "m1", "m2"), s(true, 1, "m0", "m1", "m2"), formed), nil, 3, 0, false},
		"one slow answer": {one(formed, s(true, 1, "m0", "m1", "m2"), s(true, 3, "m0", "m1", "m2"), s(true, 1, "m0", "m1", "m2"),
			s(false, 0, "m0", "m1", "m2")), nil, 3, 0, false},
		"never formed": {one(boot), []string{"etcd members: the members never formed"}, 3, 0, false},
		"both, at once": {cat(one(formed, s(true, 1, "m0", "m1", "m2", "m3")), three(0, "m0", "m1", "m2", "m3")),
			[]string{"etcd members: 4 voting", "etcd quorum: 0 healthy"}, 3, 0, false},
		"four voting allowed, their quorum kept": {one(formed, s(true, 3, "m0", "m1", "m2", "m3"), s(true, 3, "m0", "m1", "m2", "m3"),
			s(true, 3, "m1", "m2", "m3")), nil, 4, 0, false},
		"four voting, two healthy: no quorum": {cat(one(formed), three(2, "m0", "m1", "m2", "m3")),
			[]string{"etcd quorum: 2 healthy voting members of 4"}, 4, 0, false},
		// S3 of the chaos review: a cluster shrunk to one member has a
		// quorum of itself, and no fault tolerance.
		"shrunk to one voter": {cat(one(formed, s(true, 2, "m1", "m2")), three(1, "m2")),
			[]string{"etcd quorum: 1 healthy voting members of 1"}, 3, 0, false},
		"the bootstrap member voting while up": {one(formed, s(true, 4, etcd.BootstrapName, "m0", "m1", "m2")),
			[]string{"etcd members: 4 voting", "etcd members: the bootstrap member voted"}, 3, 0, false},
		"a member down where none should be": {cat(one(formed), three(2, "m0", "m1", "m2"), three(2, "m0", "m1", "m2")),
			[]string{"etcd members healthy: 2 healthy voting members of 3"}, 3, 3, false},
		"a member slow a few times where none should be down": {cat(one(formed), three(2, "m0", "m1", "m2"), one(formed)),
			nil, 3, 3, false},
		// H3: samples that failed while up are etcd not answering, not
		// samples to drop.
		"etcd silent while up": {cat(one(formed), times(24, func() memberSample { return failed(true) }), one(s(true, 3, "m0", "m1", "m2"))),
			[]string{"etcd quorum: etcd gave no member list for 6.0s"}, 3, 0, false},
		"etcd silent a moment, or while down": {cat(one(formed, failed(true), failed(true), s(true, 3, "m0", "m1", "m2")),
			times(30, func() memberSample { return failed(false) })), nil, 3, 0, false},
		// N1 of the second review: no member answering while the API
		// refuses writes is a quorum lost, however short.
		"no member answers while writes fail": {cat(one(formed), times(3, func() memberSample { return failed(true) }), one(formed)),
			[]string{"etcd quorum: no quorum for 0.50s"}, 3, 0, true},
		"no member answers, writes taken": {cat(one(formed), times(3, func() memberSample { return failed(true) }), one(formed)),
			nil, 3, 0, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			q := quorumCheck{formed: formedWithoutBootstrap, maxVoting: tc.maxVoting, desired: 3, minHealthy: tc.minHealthy,
				writesFailed: func(time.Time, time.Time) bool { return tc.writesFailed }}
			got := checkQuorum(tc.samples, q)
			if len(got) != len(tc.want) {
				t.Fatalf("violations %v, want %d", got, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(got[i].String(), w) {
					t.Errorf("violation %d is %q, want it to start %q", i, got[i], w)
				}
			}
		})
	}
}

// The API's outage is counted while one process stays up: from the
// first refused write to the next acknowledged one; refusals across a
// kill are the kill's.
func TestAcksOutage(t *testing.T) {
	p1, p2 := &process{}, &process{}
	at := func(s float64) time.Time { return time.Unix(0, 0).Add(time.Duration(s * float64(time.Second))) }
	type write struct {
		ok            bool
		start, end    float64
		before, after *process
	}
	cases := map[string]struct {
		writes []write
		want   time.Duration
	}{
		"no refusal": {[]write{{true, 0, 0.1, p1, p1}, {true, 1, 1.1, p1, p1}}, 0},
		"refused, then taken": {[]write{{true, 0, 0.1, p1, p1}, {false, 1, 3, p1, p1}, {false, 3, 5, p1, p1}, {true, 5, 5.5, p1, p1},
			{false, 6, 6.5, p1, p1}, {true, 7, 7.2, p1, p1}}, 4500 * time.Millisecond},
		"killed while refused":                         {[]write{{false, 1, 3, p1, p1}, {false, 3, 4, p1, nil}, {false, 4, 5, nil, nil}, {true, 9, 9.1, p2, p2}}, 0},
		"refused by a process that was then replaced":  {[]write{{false, 1, 3, p1, p1}, {true, 9, 9.1, p2, p2}}, 0},
		"taken by a write that began before the start": {[]write{{false, 1, 2, p2, p2}, {true, 0, 3, p1, p2}}, 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			a := newAcks(nil, nil)
			for i, w := range tc.writes {
				a.wrote(fmt.Sprintf("w%d", i), w.ok, at(w.start), at(w.end), w.before, w.after)
			}
			if got := a.longestOutage(); got != tc.want {
				t.Errorf("outage %s, want %s", got, tc.want)
			}
		})
	}
}

// The user-intent invariant holds the object to the campaign's last
// write, from its first on; a write it cannot find, or never made, is a
// violation too.
func TestIntents(t *testing.T) {
	pool := func(mu *intstr.IntOrString) *mcfgv1.MachineConfigPool {
		return &mcfgv1.MachineConfigPool{ObjectMeta: metav1.ObjectMeta{Name: "worker"}, Spec: mcfgv1.MachineConfigPoolSpec{MaxUnavailable: mu}}
	}
	two := intstr.FromInt32(2)
	key := poolsKey + "worker"
	f := newFakeHistory()
	f.put(key, pool(nil)) // before the campaign's write: anything goes
	var is intents
	if vs := invariants(is.check(&f.h, key)); !slices.Equal(vs, []string{"user intent"}) {
		t.Fatalf("no write recorded: violations %v, want user intent", vs)
	}
	rev := f.put(key, pool(&two))
	if err := is.wrote(key, "maxUnavailable", "2", fmt.Sprint(rev), poolMaxUnavailable); err != nil {
		t.Fatal(err)
	}
	f.put(key, pool(&two))
	if vs := is.check(&f.h, key); len(vs) != 0 {
		t.Fatalf("the setting held: violations %v", vs)
	}
	f.put(key, pool(nil)) // a controller set it back
	if vs := is.check(&f.h, key); len(vs) != 1 || !strings.Contains(vs[0].Detail, "maxUnavailable is unset") {
		t.Fatalf("violations %v, want maxUnavailable unset", vs)
	}
	var missing intents
	if err := missing.wrote(key, "maxUnavailable", "2", "999", poolMaxUnavailable); err != nil {
		t.Fatal(err)
	}
	if vs := missing.check(&f.h, key); len(vs) != 1 || !strings.Contains(vs[0].Detail, "no revision 999") {
		t.Fatalf("violations %v, want the missing write", vs)
	}
	if err := missing.wrote(key, "maxUnavailable", "2", "", poolMaxUnavailable); err == nil {
		t.Error("a write without a revision was taken")
	}
}

// The drain check measures termination at the cloud's termination time,
// and a machine whose instance was never terminated, or never seen, is a
// violation rather than a skip.
func TestCheckDrained(t *testing.T) {
	inst := func(name string, terminating bool) *corev1.ConfigMap {
		i := &sim.Instance{Spec: sim.InstanceSpec{Name: name, Zone: "z"}}
		if terminating {
			at := time.Unix(100, 0)
			i.TerminateAt = &at
		}
		raw, err := json.Marshal(i)
		if err != nil {
			t.Fatal(err)
		}
		cm := instanceObj(name)
		cm.Data = map[string]string{"instance.json": string(raw)}
		return cm
	}
	pod := func(name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ackNamespace}, Spec: corev1.PodSpec{NodeName: node}}
	}
	f := newFakeHistory()
	f.put(instancesKey+"m1", inst("m1", false))
	f.put(instancesKey+"m2", inst("m2", false))
	f.put(podsKey+ackNamespace+"/p1", pod("p1", "m1"))
	// m1 terminates with p1 on it; its ConfigMap goes only later, after
	// the pod did.
	f.put(instancesKey+"m1", inst("m1", true))
	f.put(podsKey+ackNamespace+"/p1", nil)
	f.put(instancesKey+"m1", nil)
	vs := checkDrained(&f.h, []string{"m1", "m2", "m3"})
	all := fmt.Sprint(vs)
	for _, want := range []string{"machine m1's instance was terminated", "machine m2's instance was never terminated", "no instance of machine m3"} {
		if !strings.Contains(all, want) {
			t.Errorf("no violation %q in %s", want, all)
		}
	}
	if len(vs) != 3 {
		t.Errorf("%d violations, want 3: %s", len(vs), all)
	}
}

// The scenarios read the members from the last sample that answered, not
// from one that failed.
func TestLastSampleAnswered(t *testing.T) {
	s := &memberSampler{samples: []memberSample{{Voting: []string{"m0"}, Healthy: 1}, {Failed: true}}}
	if got := s.last(); got.Failed || got.Healthy != 1 {
		t.Fatalf("last() = %+v, want the sample that answered", got)
	}
	if got := (&memberSampler{samples: []memberSample{{Failed: true}}}).last(); got.Failed || len(got.Voting) != 0 {
		t.Fatalf("last() with no answer = %+v, want the zero sample", got)
	}
}

// A node targeted after the pause but before the MCO reported seeing it
// was decided from the pool as the MCO last read it; one targeted after
// that report, and before the resume, is a violation.
func TestCheckPausedHeld(t *testing.T) {
	pool := func(gen, observed int64, paused bool) *mcfgv1.MachineConfigPool {
		return &mcfgv1.MachineConfigPool{ObjectMeta: metav1.ObjectMeta{Name: "worker", Generation: gen},
			Spec: mcfgv1.MachineConfigPoolSpec{Paused: paused}, Status: mcfgv1.MachineConfigPoolStatus{ObservedGeneration: observed}}
	}
	key := poolsKey + "worker"
	f := newFakeHistory()
	f.put(key, pool(1, 1, false))
	f.put(nodesKey+"a", nodeObj("a", "b1", "old", "new", true, false))
	f.put(nodesKey+"b", nodeObj("b", "b1", "old", "old", true, false))
	f.put(nodesKey+"c", nodeObj("c", "b1", "old", "old", true, false))
	r := &Run{History: &f.h}
	if vs := checkPausedHeld(r, "new"); len(vs) != 1 || !strings.Contains(vs[0].Detail, "did not record both") {
		t.Fatalf("without the pause and resume recorded: violations %v", vs)
	}
	pause := f.put(key, pool(2, 1, true))
	if err := r.intents.wrote(key, "paused", "true", fmt.Sprint(pause), poolPaused); err != nil {
		t.Fatal(err)
	}
	f.put(nodesKey+"b", nodeObj("b", "b1", "old", "new", true, false)) // decided before the MCO saw the pause
	seen := f.put(key, pool(2, 2, true))
	c := f.put(nodesKey+"c", nodeObj("c", "b1", "old", "new", true, false)) // decided after
	resume := f.put(key, pool(3, 2, false))
	if err := r.intents.wrote(key, "paused", "false", fmt.Sprint(resume), poolPaused); err != nil {
		t.Fatal(err)
	}
	vs := checkPausedHeld(r, "new")
	want := fmt.Sprintf("node c was told to run new at revision %d, while the pool was paused (revisions %d to %d; the MCO saw the pause at %d)", c, pause, resume, seen)
	if len(vs) != 1 || vs[0].Detail != want {
		t.Fatalf("violations %v, want one: %s", vs, want)
	}
}
