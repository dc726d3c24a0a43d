// Package differential holds capstan's scheduler to kube-scheduler itself:
// generated clusters and pods, each decided by upstream's framework (its
// default profile's filter plugins and its DefaultPreemption) and by
// capstan's algorithm with the same profile as a Policy, on the same
// snapshot. The feasible nodes must be the same, and so must whether
// preemption may try each other node; for a pod that fits nowhere, the
// nodes where preemption helps, the victims on each, and the node chosen
// (or one upstream holds equally good).
package differential

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"slices"
	"testing"
)

var (
	cases = flag.Int("differential.cases", 2000, "how many generated cases TestAgreesWithKubeScheduler decides")
	first = flag.Uint64("differential.seed", 1, "the seed of the first case")
)

// compare runs both schedulers on a case and says how they differ ("" when
// they agree).
func compare(ctx context.Context, c *Case) (string, error) {
	up, err := upstreamRun(ctx, c)
	if err != nil {
		return "", fmt.Errorf("upstream: %w", err)
	}
	ours, err := capstanRun(ctx, c)
	if err != nil {
		return "", fmt.Errorf("capstan: %w", err)
	}
	if !maps.Equal(up.feasible, ours.feasible) {
		return fmt.Sprintf("feasible nodes: kube-scheduler %v, capstan %v\nkube-scheduler: %v\ncapstan: %v", sortedKeys(up.feasible), sortedKeys(ours.feasible), up.reasons, ours.reasons), nil
	}
	for _, n := range c.Nodes {
		if up.feasible[n.Name] {
			continue
		}
		if up.unresolvable[n.Name] != ours.unresolvable[n.Name] {
			return fmt.Sprintf("node %s: unresolvable by preemption: kube-scheduler %v (%s), capstan %v (%s)", n.Name,
				up.unresolvable[n.Name], up.reasons[n.Name], ours.unresolvable[n.Name], ours.reasons[n.Name]), nil
		}
	}
	if len(up.feasible) > 0 {
		return "", nil
	}
	if up.eligible != ours.eligible {
		return fmt.Sprintf("eligible to preempt: kube-scheduler %v, capstan %v (%s)", up.eligible, ours.eligible, ours.message), nil
	}
	if !maps.EqualFunc(up.candidates, ours.candidates, func(a, b candidate) bool {
		return a.violations == b.violations && slices.Equal(a.victims, b.victims)
	}) {
		return fmt.Sprintf("preemption candidates: kube-scheduler %v, capstan %v", up.candidates, ours.candidates), nil
	}
	if up.chosen != ours.chosen && (ours.chosen == "" || !up.tiedWith(ours.chosen)) {
		return fmt.Sprintf("preemption chose %q, kube-scheduler %q among %v", ours.chosen, up.chosen, up.candidates), nil
	}
	return "", nil
}

// TestAgreesWithKubeScheduler decides generated cases with both schedulers.
func TestAgreesWithKubeScheduler(t *testing.T) {
	ctx := context.Background()
	n := *cases
	if testing.Short() {
		n = 200
	}
	var preempting, infeasible int
	for seed := *first; seed < *first+uint64(n); seed++ {
		c := NewCase(seed)
		diff, err := compare(ctx, c)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if diff != "" {
			t.Fatalf("seed %d: %s\n%s", seed, diff, describe(c))
		}
		if ours, _ := capstanRun(ctx, c); len(ours.feasible) == 0 {
			infeasible++
			if ours.chosen != "" {
				preempting++
			}
		}
	}
	t.Logf("%d cases agree: %d pods fit nowhere, %d of them by preemption", n, infeasible, preempting)
	// A generator that stopped making pods that need preemption would
	// make the comparison of preemptions vacuous.
	if preempting < n/50 {
		t.Errorf("only %d of %d cases preempt: the generator no longer exercises preemption", preempting, n)
	}
}

// FuzzAgreesWithKubeScheduler lets the fuzzer choose the seeds.
func FuzzAgreesWithKubeScheduler(f *testing.F) {
	for _, s := range []uint64{1, 2, 3, 42, 1000} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		c := NewCase(seed)
		diff, err := compare(context.Background(), c)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if diff != "" {
			t.Fatalf("seed %d: %s\n%s", seed, diff, describe(c))
		}
	})
}
