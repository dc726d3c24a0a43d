package machine

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	cpmsv1 "github.com/openshift/api/machine/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPlanControlPlane(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	ready := func(name string, index int) CPMSMachine {
		return CPMSMachine{Name: name, Index: index, Ready: true, Created: t0}
	}
	old := func(name string, index int) CPMSMachine {
		return CPMSMachine{Name: name, Index: index, Ready: true, NeedsUpdate: true}
	}
	deleting := func(m CPMSMachine) CPMSMachine { m.Deleting = true; return m }
	notReady := func(m CPMSMachine) CPMSMachine { m.Ready = false; return m }
	older := func(m CPMSMachine) CPMSMachine { m.Created = t0.Add(-time.Hour); return m }
	cases := []struct {
		name     string
		strategy cpmsv1.ControlPlaneMachineSetStrategyType
		machines []CPMSMachine
		want     CPMSPlan
	}{
		{name: "all there and current: nothing", strategy: cpmsv1.RollingUpdate,
			machines: []CPMSMachine{ready("m-0", 0), ready("m-1", 1), ready("m-2", 2)}},
		{name: "an empty index gets a machine", strategy: cpmsv1.OnDelete,
			machines: []CPMSMachine{ready("m-0", 0), ready("m-2", 2)},
			want:     CPMSPlan{Create: []int{1}}},
		{name: "a deleted machine is replaced under OnDelete", strategy: cpmsv1.OnDelete,
			machines: []CPMSMachine{ready("m-0", 0), deleting(ready("m-1", 1)), ready("m-2", 2)},
			want:     CPMSPlan{Create: []int{1}}},
		{name: "a deleted dead machine is replaced under RollingUpdate", strategy: cpmsv1.RollingUpdate,
			machines: []CPMSMachine{ready("m-0", 0), deleting(notReady(ready("m-1", 1))), ready("m-2", 2)},
			want:     CPMSPlan{Create: []int{1}}},
		{name: "the replacement of a deleted machine is not duplicated", strategy: cpmsv1.OnDelete,
			machines: []CPMSMachine{ready("m-0", 0), deleting(ready("m-1", 1)), notReady(ready("n-1", 1)), ready("m-2", 2)}},
		{name: "a failed replacement deleted: one new machine for the index, not two", strategy: cpmsv1.OnDelete,
			machines: []CPMSMachine{ready("m-0", 0), deleting(ready("m-1", 1)), deleting(notReady(ready("n-1", 1))), ready("m-2", 2)},
			want:     CPMSPlan{Create: []int{1}}},
		{name: "two machines deleted at once: two replacements", strategy: cpmsv1.OnDelete,
			machines: []CPMSMachine{deleting(ready("m-0", 0)), deleting(ready("m-1", 1)), ready("m-2", 2)},
			want:     CPMSPlan{Create: []int{0, 1}}},
		{name: "OnDelete leaves outdated machines", strategy: cpmsv1.OnDelete,
			machines: []CPMSMachine{old("m-0", 0), old("m-1", 1), old("m-2", 2)}},
		{name: "RollingUpdate replaces one index at a time", strategy: cpmsv1.RollingUpdate,
			machines: []CPMSMachine{old("m-0", 0), old("m-1", 1), old("m-2", 2)},
			want:     CPMSPlan{Create: []int{0}}},
		{name: "the outdated machine stays until its replacement is ready", strategy: cpmsv1.RollingUpdate,
			machines: []CPMSMachine{old("m-0", 0), notReady(ready("n-0", 0)), old("m-1", 1), old("m-2", 2)}},
		{name: "a ready replacement: the outdated machine goes", strategy: cpmsv1.RollingUpdate,
			machines: []CPMSMachine{old("m-0", 0), ready("n-0", 0), old("m-1", 1), old("m-2", 2)},
			want:     CPMSPlan{Delete: []string{"m-0"}}},
		// M6: a machine being deleted still counts towards the surge.
		{name: "the next index waits until the previous old machine is gone", strategy: cpmsv1.RollingUpdate,
			machines: []CPMSMachine{deleting(old("m-0", 0)), ready("n-0", 0), old("m-1", 1), old("m-2", 2)}},
		{name: "the next index once the previous old machine is gone", strategy: cpmsv1.RollingUpdate,
			machines: []CPMSMachine{ready("n-0", 0), old("m-1", 1), old("m-2", 2)},
			want:     CPMSPlan{Create: []int{1}}},
		{name: "two machines deleted at once under RollingUpdate: one replacement at a time", strategy: cpmsv1.RollingUpdate,
			machines: []CPMSMachine{deleting(ready("m-0", 0)), ready("m-1", 1), deleting(ready("m-2", 2))},
			want:     CPMSPlan{Create: []int{0}}},
		{name: "the second deleted machine is replaced once the first is gone", strategy: cpmsv1.RollingUpdate,
			machines: []CPMSMachine{ready("n-0", 0), ready("m-1", 1), deleting(ready("m-2", 2))},
			want:     CPMSPlan{Create: []int{2}}},
		{name: "not while the first replacement and the old machines are all there", strategy: cpmsv1.RollingUpdate,
			machines: []CPMSMachine{deleting(ready("m-0", 0)), notReady(ready("n-0", 0)), ready("m-1", 1), deleting(ready("m-2", 2))}},
		{name: "two ready machines of one index: the oldest goes", strategy: cpmsv1.RollingUpdate,
			machines: []CPMSMachine{ready("m-0", 0), ready("m-1", 1), older(ready("m-2", 2)), ready("n-2", 2)},
			want:     CPMSPlan{Delete: []string{"m-2"}}},
		{name: "two machines of one index, the new one not ready yet: both stay", strategy: cpmsv1.RollingUpdate,
			machines: []CPMSMachine{ready("m-0", 0), ready("m-1", 1), older(ready("m-2", 2)), notReady(ready("n-2", 2))}},
		{name: "machines of indexes beyond replicas are left alone", strategy: cpmsv1.RollingUpdate,
			machines: []CPMSMachine{ready("m-0", 0), ready("m-1", 1), ready("m-2", 2), old("m-3", 3)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := PlanControlPlane(3, tc.strategy, tc.machines)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("PlanControlPlane = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestCPMSStatusAndConditions(t *testing.T) {
	machines := []CPMSMachine{
		{Name: "m-0", Index: 0, Ready: true},
		{Name: "m-1", Index: 1, Ready: true, NeedsUpdate: true},
		{Name: "m-2", Index: 2, Deleting: true},
	}
	st := CPMSStatus(3, machines)
	want := cpmsv1.ControlPlaneMachineSetStatus{Replicas: 3, ReadyReplicas: 2, UpdatedReplicas: 1, UnavailableReplicas: 1}
	if !reflect.DeepEqual(st, want) {
		t.Fatalf("CPMSStatus = %+v, want %+v", st, want)
	}
	byType := map[string]metav1.Condition{}
	for _, c := range cpmsConditions(3, st, 4) {
		byType[c.Type] = c
		if c.ObservedGeneration != 4 {
			t.Errorf("%s: observedGeneration %d, want 4", c.Type, c.ObservedGeneration)
		}
	}
	for typ, w := range map[string]struct{ status, reason, msg string }{
		cpmsAvailable:   {"False", reasonUnavailableReplicas, "Missing 1 available replica(s)"},
		cpmsDegraded:    {"False", reasonAsExpected, ""},
		cpmsProgressing: {"True", reasonNeedsUpdateReplicas, "Observed 2 replica(s) in need of update"},
	} {
		c := byType[typ]
		if string(c.Status) != w.status || c.Reason != w.reason || c.Message != w.msg {
			t.Errorf("%s = %s %s %q, want %s %s %q", typ, c.Status, c.Reason, c.Message, w.status, w.reason, w.msg)
		}
	}
	all := CPMSStatus(3, []CPMSMachine{{Name: "a-0", Index: 0, Ready: true}, {Name: "a-1", Index: 1, Ready: true}, {Name: "a-2", Index: 2, Ready: true}})
	for _, c := range cpmsConditions(3, all, 1) {
		if c.Type == cpmsAvailable && (c.Status != metav1.ConditionTrue || c.Reason != reasonAllReplicasAvailable) ||
			c.Type == cpmsProgressing && (c.Status != metav1.ConditionFalse || c.Reason != reasonAllReplicasUpdated) {
			t.Errorf("settled control plane: %s = %s %s", c.Type, c.Status, c.Reason)
		}
	}
	none := CPMSStatus(3, nil)
	for _, c := range cpmsConditions(3, none, 1) {
		if c.Type == cpmsDegraded && (c.Status != metav1.ConditionTrue || c.Reason != reasonNoReadyMachines) {
			t.Errorf("no machines: Degraded = %s %s, want True %s", c.Status, c.Reason, reasonNoReadyMachines)
		}
	}
}

func TestMachineIndex(t *testing.T) {
	for name, want := range map[string]int{
		"capstan-x7k2p-master-0":       0,
		"capstan-master-bcdfg-2":       2,
		"capstan-x7k2p-master-12":      12,
		"capstan-x7k2p-master":         -1,
		"capstan-x7k2p-master-":        -1,
		"capstan-master-1-replacement": -1,
	} {
		if got := MachineIndex(name); got != want {
			t.Errorf("MachineIndex(%q) = %d, want %d", name, got, want)
		}
	}
}

func TestFailureDomainZones(t *testing.T) {
	aws := func(zones ...string) *cpmsv1.FailureDomains {
		var fds []cpmsv1.AWSFailureDomain
		for _, z := range zones {
			fds = append(fds, cpmsv1.AWSFailureDomain{Placement: cpmsv1.AWSFailureDomainPlacement{AvailabilityZone: z}})
		}
		return &cpmsv1.FailureDomains{Platform: "AWS", AWS: &fds}
	}
	for _, tc := range []struct {
		name    string
		fd      *cpmsv1.FailureDomains
		current map[int]string
		want    string
	}{
		{"none", nil, nil, "map[]"},
		{"three zones, sorted", aws("c", "a", "b"), nil, "map[0:a 1:b 2:c]"},
		{"two zones wrap", aws("b", "a"), nil, "map[0:a 1:b 2:a]"},
		{"machines in a domain keep it", aws("a", "b"), map[int]string{0: "b", 1: "a", 2: "c"}, "map[0:b 1:a 2:a]"},
		{"gcp", &cpmsv1.FailureDomains{Platform: "GCP", GCP: &[]cpmsv1.GCPFailureDomain{{Zone: "z1"}}}, nil, "map[0:z1 1:z1 2:z1]"},
		{"openstack is refused", &cpmsv1.FailureDomains{Platform: "OpenStack", OpenStack: []cpmsv1.OpenStackFailureDomain{{AvailabilityZone: "x"}}}, nil, "platform OpenStack: the simulated provider"},
	} {
		got, err := FailureDomainZones(tc.fd, 3, tc.current)
		s := fmt.Sprint(got)
		if err != nil {
			s = err.Error()
		}
		if !strings.Contains(s, tc.want) {
			t.Errorf("%s: %s, want %s", tc.name, s, tc.want)
		}
	}
}
