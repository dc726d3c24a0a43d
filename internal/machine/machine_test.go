package machine

import (
	"strings"
	"testing"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func testMachine(name string) *machinev1.Machine {
	return &machinev1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, CreationTimestamp: metav1.Now()},
		Spec: machinev1.MachineSpec{ProviderSpec: machinev1.ProviderSpec{
			Value: RawProviderSpec(ProviderSpec{InstanceType: "capstan.large", Zone: "sim-zone-a"})}},
	}
}

var (
	preDrain = machinev1.LifecycleHook{Name: "pre-drain", Owner: "pre-drain-owner"}
	migrate  = machinev1.LifecycleHook{Name: "MigrateImportantApp", Owner: "my-app-migration-controller"}
)

func TestValidateMachineHooks(t *testing.T) {
	deleting := func(m *machinev1.Machine) *machinev1.Machine {
		m.DeletionTimestamp = ptr.To(metav1.Now())
		return m
	}
	for _, tc := range []struct {
		name     string
		old, cur func() *machinev1.Machine
		wantErr  string
	}{
		{name: "adding a hook to a live machine", old: func() *machinev1.Machine { return testMachine("m") },
			cur: func() *machinev1.Machine {
				m := testMachine("m")
				m.Spec.LifecycleHooks.PreDrain = []machinev1.LifecycleHook{preDrain}
				return m
			}},
		{name: "adding a hook after deletion",
			old: func() *machinev1.Machine { return deleting(testMachine("m")) },
			cur: func() *machinev1.Machine {
				m := deleting(testMachine("m"))
				m.Spec.LifecycleHooks.PreDrain = []machinev1.LifecycleHook{preDrain}
				return m
			},
			wantErr: "spec.lifecycleHooks.preDrain: Forbidden: pre-drain hooks are immutable when machine is marked for deletion: the following hooks are new or changed: [{Name:pre-drain Owner:pre-drain-owner}]"},
		{name: "changing a hook's owner after deletion",
			old: func() *machinev1.Machine {
				m := deleting(testMachine("m"))
				m.Spec.LifecycleHooks.PreTerminate = []machinev1.LifecycleHook{migrate}
				return m
			},
			cur: func() *machinev1.Machine {
				m := deleting(testMachine("m"))
				m.Spec.LifecycleHooks.PreTerminate = []machinev1.LifecycleHook{{Name: migrate.Name, Owner: "someone-else"}}
				return m
			},
			wantErr: "spec.lifecycleHooks.preTerminate: Forbidden: pre-terminate hooks are immutable when machine is marked for deletion: the following hooks are new or changed: [{Name:MigrateImportantApp Owner:someone-else}]"},
		{name: "removing a hook after deletion",
			old: func() *machinev1.Machine {
				m := deleting(testMachine("m"))
				m.Spec.LifecycleHooks.PreDrain = []machinev1.LifecycleHook{preDrain, migrate}
				return m
			},
			cur: func() *machinev1.Machine {
				m := deleting(testMachine("m"))
				m.Spec.LifecycleHooks.PreDrain = []machinev1.LifecycleHook{migrate}
				return m
			}},
		{name: "duplicate names", old: func() *machinev1.Machine { return nil },
			cur: func() *machinev1.Machine {
				m := testMachine("m")
				m.Spec.LifecycleHooks.PreDrain = []machinev1.LifecycleHook{preDrain, preDrain}
				return m
			},
			wantErr: "spec.lifecycleHooks.preDrain[1].name: Forbidden: hook names must be unique within a lifecycle stage, the following hook name is already set: pre-drain"},
		{name: "bad name and short owner", old: func() *machinev1.Machine { return nil },
			cur: func() *machinev1.Machine {
				m := testMachine("m")
				m.Spec.LifecycleHooks.PreTerminate = []machinev1.LifecycleHook{{Name: "bad name!", Owner: "me"}}
				return m
			},
			wantErr: `spec.lifecycleHooks.preTerminate[0].name: Invalid value: "bad name!"`},
		{name: "unknown instance type", old: func() *machinev1.Machine { return nil },
			cur: func() *machinev1.Machine {
				m := testMachine("m")
				m.Spec.ProviderSpec.Value = RawProviderSpec(ProviderSpec{InstanceType: "m5.huge"})
				return m
			},
			wantErr: `unknown instance type "m5.huge"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := ValidateMachine(tc.cur(), tc.old())
			got := errs.ToAggregate()
			switch {
			case tc.wantErr == "" && got != nil:
				t.Fatalf("unexpected error: %v", got)
			case tc.wantErr != "" && (got == nil || !strings.Contains(got.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one containing %q", got, tc.wantErr)
			}
		})
	}
}

func TestValidateMachineSetSelector(t *testing.T) {
	ms := &machinev1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: Namespace},
		Spec: machinev1.MachineSetSpec{
			Replicas: ptr.To[int32](1),
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{MachineSetLabel: "w"}},
			Template: machinev1.MachineTemplateSpec{
				ObjectMeta: machinev1.ObjectMeta{Labels: map[string]string{MachineSetLabel: "other"}},
				Spec:       testMachine("x").Spec,
			},
		},
	}
	err := ValidateMachineSet(ms).ToAggregate()
	if err == nil || !strings.Contains(err.Error(), "spec.template.metadata.labels: Invalid value") || !strings.Contains(err.Error(), "`selector` does not match template `labels`") {
		t.Fatalf("mismatched selector: %v", err)
	}
	ms.Spec.Template.Labels[MachineSetLabel] = "w"
	if err := ValidateMachineSet(ms).ToAggregate(); err != nil {
		t.Fatalf("valid machineset refused: %v", err)
	}
	ms.Spec.DeletePolicy = "Biggest"
	if err := ValidateMachineSet(ms).ToAggregate(); err == nil || !strings.Contains(err.Error(), "spec.deletePolicy: Unsupported value") {
		t.Fatalf("bad delete policy: %v", err)
	}
}

func TestParseProviderSpec(t *testing.T) {
	for _, tc := range []struct {
		name, json, wantErr string
	}{
		{"none", "", "spec.providerSpec.value must be set"},
		{"foreign kind", `{"kind":"AWSMachineProviderConfig","apiVersion":"machine.openshift.io/v1beta1","instanceType":"m6i.xlarge"}`, "want kind CapstanMachineProviderSpec"},
		{"unknown field", `{"kind":"CapstanMachineProviderSpec","apiVersion":"machine.capstan.dev/v1beta1","instanceType":"capstan.large","disk":"100Gi"}`, `unknown field "disk"`},
		{"no size", `{"kind":"CapstanMachineProviderSpec","apiVersion":"machine.capstan.dev/v1beta1","zone":"a"}`, "instanceType, or both cpu and memory, must be set"},
		{"explicit size", `{"kind":"CapstanMachineProviderSpec","apiVersion":"machine.capstan.dev/v1beta1","cpu":"3","memory":"5Gi"}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := machinev1.ProviderSpec{}
			if tc.json != "" {
				ps.Value = &runtime.RawExtension{Raw: []byte(tc.json)}
			}
			_, err := ParseProviderSpec(ps)
			if (err == nil) != (tc.wantErr == "") || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
	// A type's size, overridden by explicit cpu.
	m := testMachine("m")
	m.Labels = map[string]string{MachineRoleLabel: "master"}
	ps := &ProviderSpec{InstanceType: "capstan.gpu.xlarge", CPU: ptr.To(resource.MustParse("12"))}
	spec := instanceSpec(m, ps)
	if spec.CPU.String() != "12" || spec.Memory.String() != "64Gi" || spec.GPU != 1 || spec.Role != "master" {
		t.Errorf("instance spec %+v", spec)
	}
}

func TestDeletePolicies(t *testing.T) {
	now := time.Now()
	aged := func(name string, age time.Duration) *machinev1.Machine {
		m := testMachine(name)
		m.CreationTimestamp = metav1.NewTime(now.Add(-age))
		m.Status.NodeRef = &corev1.ObjectReference{Name: name}
		return m
	}
	old, mid, young := aged("old", 48*time.Hour), aged("mid", time.Hour), aged("young", time.Minute)
	marked := aged("marked", 30*time.Minute)
	marked.Annotations = map[string]string{DeleteMachineAnnotation: "true"}
	failed := aged("failed", 10*time.Minute)
	failed.Status.ErrorMessage = ptr.To("boom")
	noNode := aged("nonode", 2*time.Hour)
	noNode.Status.NodeRef = nil
	names := func(ms []*machinev1.Machine) string {
		var s []string
		for _, m := range ms {
			s = append(s, m.Name)
		}
		return strings.Join(s, ",")
	}
	all := []*machinev1.Machine{young, old, mid}
	if got := names(machinesToDelete(all, 2, oldestDeletePriority, now)); got != "old,mid" {
		t.Errorf("Oldest: %s", got)
	}
	if got := names(machinesToDelete(all, 2, newestDeletePriority, now)); got != "young,mid" {
		t.Errorf("Newest: %s", got)
	}
	// The annotation comes first whatever the policy.
	withMarked := []*machinev1.Machine{old, young, marked, mid}
	for name, p := range map[string]deletePriorityFunc{"Oldest": oldestDeletePriority, "Newest": newestDeletePriority, "Random": randomDeletePriority} {
		if got := names(machinesToDelete(withMarked, 1, p, now)); got != "marked" {
			t.Errorf("%s with the delete-machine annotation: %s", name, got)
		}
	}
	// Random prefers failed, then node-less machines.
	if got := names(machinesToDelete([]*machinev1.Machine{old, noNode, failed, young}, 2, randomDeletePriority, now)); got != "failed,nonode" {
		t.Errorf("Random: %s", got)
	}
}

func TestLifecycleHookConditions(t *testing.T) {
	m := testMachine("m")
	now := metav1.Now()
	setLifecycleHookConditions(m, now)
	if !conditionTrue(m.Status.Conditions, machinev1.MachineDrainable) || !conditionTrue(m.Status.Conditions, machinev1.MachineTerminable) {
		t.Fatalf("no hooks: %+v", m.Status.Conditions)
	}
	m.Spec.LifecycleHooks.PreDrain = []machinev1.LifecycleHook{preDrain, migrate}
	later := metav1.NewTime(now.Add(time.Minute))
	setLifecycleHookConditions(m, later)
	c := GetCondition(m.Status.Conditions, machinev1.MachineDrainable)
	want := "Drain operation currently blocked by: [{Name:pre-drain Owner:pre-drain-owner} {Name:MigrateImportantApp Owner:my-app-migration-controller}]"
	if c.Status != corev1.ConditionFalse || c.Reason != "HookPresent" || c.Severity != machinev1.ConditionSeverityWarning || c.Message != want {
		t.Errorf("Drainable %+v", c)
	}
	if !c.LastTransitionTime.Equal(&later) {
		t.Errorf("transition time %v, want %v", c.LastTransitionTime, later)
	}
	// Terminable did not change: its transition time stays.
	if tc := GetCondition(m.Status.Conditions, machinev1.MachineTerminable); !tc.LastTransitionTime.Equal(&now) {
		t.Errorf("Terminable moved: %v", tc.LastTransitionTime)
	}
}

func TestNeedsRemediation(t *testing.T) {
	now := time.Now()
	mhc := &machinev1.MachineHealthCheck{Spec: machinev1.MachineHealthCheckSpec{UnhealthyConditions: []machinev1.UnhealthyCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Timeout: metav1.Duration{Duration: 5 * time.Minute}},
	}}}
	node := func(status corev1.ConditionStatus, since time.Duration) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "u"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: status, LastTransitionTime: metav1.NewTime(now.Add(-since))}}}}
	}
	m := testMachine("m")
	m.Status.LastUpdated = ptr.To(metav1.NewTime(now.Add(-time.Minute)))
	cases := []struct {
		name     string
		t        healthTarget
		bad      bool
		nextZero bool
	}{
		{"ready", healthTarget{m, node(corev1.ConditionTrue, time.Hour)}, false, true},
		{"unknown briefly", healthTarget{m, node(corev1.ConditionUnknown, time.Minute)}, false, false},
		{"unknown too long", healthTarget{m, node(corev1.ConditionUnknown, 6*time.Minute)}, true, true},
		{"node gone", healthTarget{m, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}}, true, true},
		{"no node yet", healthTarget{m, nil}, false, false},
	}
	for _, tc := range cases {
		bad, _, next := needsRemediation(mhc, tc.t, DefaultNodeStartupTimeout, now)
		if bad != tc.bad || (next == 0) != tc.nextZero {
			t.Errorf("%s: unhealthy %v next %v", tc.name, bad, next)
		}
	}
	stale := testMachine("s")
	stale.Status.LastUpdated = ptr.To(metav1.NewTime(now.Add(-11 * time.Minute)))
	if bad, _, _ := needsRemediation(mhc, healthTarget{stale, nil}, DefaultNodeStartupTimeout, now); !bad {
		t.Error("machine without a node past nodeStartupTimeout is healthy")
	}
	failed := testMachine("f")
	failed.Status.Phase = ptr.To(machinev1.PhaseFailed)
	if bad, _, _ := needsRemediation(mhc, healthTarget{failed, nil}, DefaultNodeStartupTimeout, now); !bad {
		t.Error("failed machine is healthy")
	}
}

func TestMaxUnhealthy(t *testing.T) {
	for _, tc := range []struct {
		v       *intstr.IntOrString
		total   int
		want    int
		wantErr bool
	}{
		{nil, 7, 7, false},
		{ptr.To(intstr.FromInt32(2)), 7, 2, false},
		{ptr.To(intstr.FromString("40%")), 7, 2, false},
		{ptr.To(intstr.FromString("3")), 7, 3, false},
		{ptr.To(intstr.FromString("lots")), 7, 0, true},
	} {
		mhc := &machinev1.MachineHealthCheck{Spec: machinev1.MachineHealthCheckSpec{MaxUnhealthy: tc.v}}
		got, err := maxUnhealthyOf(mhc, tc.total)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("maxUnhealthy %v of %d: %d, %v", tc.v, tc.total, got, err)
		}
	}
}
