package simulate

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
)

func course(change time.Duration, notReady, removed, added time.Duration, set string, pending int) *Report {
	r := &Report{
		NodesNotReady: []NodeChange{{Node: "a-1", At: Duration(change + notReady)}},
		Removed:       []PodRemoval{{Pod: "shop/web-1", At: Duration(change + removed)}, {Pod: "shop/web-2", At: Duration(change + removed + time.Second)}},
		NodesAdded:    []NodeChange{{Node: "b-2", MachineSet: set, At: Duration(change + added)}},
	}
	if change > 0 {
		r.Changes = []AppliedChange{{Change: "zone-outage=a", At: Duration(change)}}
	}
	for range pending {
		r.Pending = append(r.Pending, PendingPod{Pod: "shop/x"})
	}
	r.Pending = append(r.Pending, PendingPod{Pod: "shop/before", AlreadyPending: true})
	return r
}

func TestACourseAgreesWithinTheToleranceOfTheObservedOne(t *testing.T) {
	// The simulation's change came 30 s into its run; the recording's
	// times count from the outage. The observed course is 100 s long:
	// 10 s of tolerance.
	predicted := course(30*time.Second, 45*time.Second, 80*time.Second, 92*time.Second, "workers-b", 0)
	observed := course(0, 50*time.Second, 78*time.Second, 100*time.Second, "workers-b", 0)
	c := Compare(predicted, observed, 0)
	if !c.Agree || c.Course != Duration(100*time.Second) || c.Tolerance != Duration(10*time.Second) {
		t.Fatalf("comparison %+v; want agreement within 10s of a 100s course", c)
	}
	var out strings.Builder
	if err := c.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"AGREE: every count equal and every time within 10s (10% of the observed course of 1m40s)",
		"nodes added to workers-b", "pods removed", "pods left pending"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

func TestACourseDisagreesOnATimeACountOrAMachineSet(t *testing.T) {
	observed := course(0, 50*time.Second, 78*time.Second, 100*time.Second, "workers-b", 0)
	for name, tc := range map[string]struct {
		predicted *Report
		row, why  string
	}{
		"late":          {course(0, 50*time.Second, 78*time.Second, 111*time.Second, "workers-b", 0), "nodes added to workers-b", "the first 11s off"},
		"another set":   {course(0, 50*time.Second, 78*time.Second, 100*time.Second, "workers-c", 0), "nodes added to workers-b", "0 predicted, 1 observed"},
		"pods pending":  {course(0, 50*time.Second, 78*time.Second, 100*time.Second, "workers-b", 2), "pods left pending", "2 predicted, 0 observed"},
		"last removals": {course(0, 50*time.Second, 60*time.Second, 100*time.Second, "workers-b", 0), "pods removed", "the first 18s off"},
	} {
		t.Run(name, func(t *testing.T) {
			c := Compare(tc.predicted, observed, 0)
			if c.Agree {
				t.Fatalf("%+v agrees", c)
			}
			found := false
			for _, r := range c.Rows {
				if r.What == tc.row {
					found = true
					if r.Agrees || r.Why != tc.why {
						t.Errorf("row %q: agrees %v, why %q; want %q", r.What, r.Agrees, r.Why, tc.why)
					}
				}
			}
			if !found {
				t.Errorf("no row %q in %+v", tc.row, c.Rows)
			}
		})
	}
}

// A Machine on its way to a node keeps a run from settling: a boot longer
// than --quiet would otherwise end it with the node's pods pending.
func TestAMachineOnItsWayToANodeKeepsTheRunGoing(t *testing.T) {
	machine := func(name, phase, node string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
			"metadata": map[string]any{"name": name, "namespace": "openshift-machine-api"}, "status": map[string]any{"phase": phase}}}
		if node != "" {
			_ = unstructured.SetNestedField(u.Object, node, "status", "nodeRef", "name")
		}
		return u
	}
	for name, tc := range map[string]struct {
		machines []*unstructured.Unstructured
		want     bool
	}{
		"booting":         {[]*unstructured.Unstructured{machine("a", "Running", "a"), machine("b", "Provisioned", "")}, true},
		"all with a node": {[]*unstructured.Unstructured{machine("a", "Running", "a")}, false},
		"failed":          {[]*unstructured.Unstructured{machine("b", "Failed", "")}, false},
	} {
		idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
		for _, m := range tc.machines {
			if err := idx.Add(m); err != nil {
				t.Fatal(err)
			}
		}
		r := &recorder{machines: cache.NewGenericLister(idx, machinesGVR.GroupResource())}
		if got := r.provisioning(); got != tc.want {
			t.Errorf("%s: provisioning %v, want %v", name, got, tc.want)
		}
	}
}
