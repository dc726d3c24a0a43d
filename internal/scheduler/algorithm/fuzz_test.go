package algorithm

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/capstan-dev/capstan/internal/fuzzseed"
	"github.com/capstan-dev/capstan/internal/scheduler/policy"
)

// FuzzPolicy reads arbitrary Policy files: one is refused with the entry
// named, or builds a scheduler that places a pod on a node every
// predicate passes, or on none.
func FuzzPolicy(f *testing.F) {
	fuzzseed.Files(f, "testdata/policies")
	nodes := []*corev1.Node{
		node("a", map[string]string{"region": "r1", "zone": "z1"}),
		node("b", map[string]string{"region": "r1", "zone": "z2"}, corev1.Taint{Key: "dedicated", Effect: corev1.TaintEffectNoSchedule}),
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := policy.Parse(raw)
		if err != nil {
			if p != nil {
				t.Fatalf("Parse returned a policy with its error %v", err)
			}
			return
		}
		a, err := New(p, 1)
		if err != nil {
			t.Fatalf("a validated policy does not build a scheduler: %v", err)
		}
		snap := snapshot(nodes, nil, Listers{})
		d := a.Schedule(context.Background(), pod("p", map[string]string{"app": "x"}), snap, Options{Explain: true})
		if d.Selected != "" && d.Filtered[d.Selected] != nil {
			t.Fatalf("selected %s, which failed %v", d.Selected, d.Filtered[d.Selected])
		}
	})
}
