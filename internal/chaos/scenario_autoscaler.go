package chaos

import (
	"context"
	"fmt"
	"math"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/autoscaler"
	"github.com/capstan-dev/capstan/internal/failpoint"
	"github.com/capstan-dev/capstan/internal/machine"
)

// asPods is how many one-node pods the autoscaler scenario makes pending.
const asPods = 3

var machineAutoscalers = schema.GroupVersionResource{Group: "autoscaling.openshift.io", Version: "v1beta1", Resource: "machineautoscalers"}

// autoscalerScenario has the autoscaler scale a MachineSet up for pending
// pods and down once they are gone, each machine's drain held by a
// preDrain hook that a hook controller releases.
func autoscalerScenario() *Scenario {
	const set = "chaos-as"
	return &Scenario{
		Name: "autoscaler",
		Doc: "the autoscaler scales a MachineSet 0 -> 3 for 3 pending one-node pods, then back to 0 once they are deleted, " +
			"each drain held by the proactive-replacement preDrain hook: the scale-up decided once (never above 3 replicas, exactly 3 machines " +
			"and instances), no node drained or terminated while its hook held it, no other node removed",
		Args: []string{"--control-plane-nodes", "1", "--nodes", "1", "--autoscaler-scan-interval", "2s", "--boot-delay", "3s", "--terminate-delay", "2s",
			"--hooks", "proactive-replacement", "--hook-selector", machine.MachineSetLabel + "=" + set},
		// Its operations took 25 to 43 s in the fresh-seed campaigns of
		// 2026-12-06/07.
		Span:    20 * time.Second,
		Points:  []Point{{failpoint.AutoscalerScaleUp, 1}, {failpoint.MachineSetCreate, 3}, {failpoint.MachineInstanceLaunched, 3}, {failpoint.AutoscalerScaleDown, 1}},
		Timeout: settleTime,
		// The phases, each write made once (a kill may repeat the last):
		// "" the set and its autoscaling made; up, the pods created;
		// pending until they run; down, the pods deleted; deleted until
		// the set is empty.
		Progress: func(ctx context.Context, r *Run) (bool, string, error) {
			ph, err := phase(ctx, r)
			if err != nil {
				return false, "", err
			}
			switch ph {
			case "":
				if err := ensureMachineSet(ctx, r, newMachineSet(set, nil)); err != nil {
					return false, "", err
				}
				if err := ensureAutoscaling(ctx, r, set); err != nil {
					return false, "", err
				}
				return false, "making pods pending", setPhase(ctx, r, "up")
			case "up":
				for i := range asPods {
					if _, err := r.Kube.CoreV1().Pods(ackNamespace).Create(ctx, bigPod(fmt.Sprintf("%s-%d", set, i), set), metav1.CreateOptions{}); created(err) != nil {
						return false, "", err
					}
				}
				return false, "pods pending", setPhase(ctx, r, "pending")
			case "pending":
				running, _, err := runningPods(ctx, r, set)
				if err != nil || running < asPods {
					return false, fmt.Sprintf("%d of %d pods running after the scale-up", running, asPods), err
				}
				return false, "deleting the pods", setPhase(ctx, r, "down")
			case "down":
				for i := range asPods {
					err := r.Kube.CoreV1().Pods(ackNamespace).Delete(ctx, fmt.Sprintf("%s-%d", set, i), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
					if err != nil && !apierrors.IsNotFound(err) {
						return false, "", err
					}
				}
				return false, "pods deleted", setPhase(ctx, r, "deleted")
			}
			st, err := readSet(ctx, r, set)
			if err != nil {
				return false, "", err
			}
			if ok, why := st.gone(); !ok {
				return false, "scaling down: " + why, nil
			}
			return true, "", nil
		},
		Check: func(ctx context.Context, r *Run) []Violation {
			out := checkMachineSet(r.History, set, asPods)
			out = append(out, checkHooksHeld(r.History, set)...)
			return append(out, checkOnlySetRemoved(r.History, set)...)
		},
	}
}

// ensureAutoscaling creates the MachineAutoscaler of set (0 to 4
// replicas) and a ClusterAutoscaler that scales down empty nodes after
// 15 seconds.
func ensureAutoscaling(ctx context.Context, r *Run, set string) error {
	ma := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "autoscaling.openshift.io/v1beta1", "kind": "MachineAutoscaler",
		"metadata": map[string]any{"name": set, "namespace": machine.Namespace},
		"spec": map[string]any{"minReplicas": int64(0), "maxReplicas": int64(4),
			"scaleTargetRef": map[string]any{"apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineSet", "name": set}},
	}}
	if _, err := r.Dynamic.Resource(machineAutoscalers).Namespace(machine.Namespace).Create(ctx, ma, metav1.CreateOptions{}); created(err) != nil {
		return fmt.Errorf("creating MachineAutoscaler %s: %w", set, err)
	}
	ca := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "autoscaling.openshift.io/v1", "kind": "ClusterAutoscaler",
		"metadata": map[string]any{"name": "default"},
		// The autoscaler does not cordon the nodes it removes, so that a
		// cordon is the Machine API's drain, which the hooks must hold.
		"spec": map[string]any{"scaleDown": map[string]any{"enabled": true, "delayAfterAdd": "0s", "delayAfterDelete": "0s", "unneededTime": "15s",
			"cordonNodeBeforeTerminating": "Disabled"}},
	}}
	if _, err := r.Dynamic.Resource(autoscaler.ClusterAutoscalerResource).Create(ctx, ca, metav1.CreateOptions{}); created(err) != nil {
		return fmt.Errorf("creating ClusterAutoscaler default: %w", err)
	}
	return nil
}

// checkHooksHeld checks that no machine of set had its node cordoned for
// the drain, or its instance terminated, while a preDrain hook was on it.
func checkHooksHeld(h *History, set string) []Violation {
	var out []Violation
	// The revision at which each machine's preDrain hooks went (the hook
	// holds it until then).
	held := map[string]int64{}
	hooked := map[string]bool{}
	for _, e := range h.Events(machinesKey) {
		m, ok := e.Obj.(*machinev1.Machine)
		prev, _ := e.Prev.(*machinev1.Machine)
		switch {
		case ok && ownedBy(m, set) && len(m.Spec.LifecycleHooks.PreDrain) > 0:
			hooked[m.Name] = true
			held[m.Name] = math.MaxInt64
		case prev != nil && len(prev.Spec.LifecycleHooks.PreDrain) > 0 && held[prev.Name] == math.MaxInt64:
			held[prev.Name] = e.Rev
		}
	}
	for _, m := range machinesOf(h, set) {
		if !hooked[m] {
			out = append(out, Violation{"hooks", fmt.Sprintf("machine %s never had its preDrain hook", m)})
			continue
		}
		if rev := terminatedAt(h, instancesKey+m); rev != 0 && rev < held[m] {
			out = append(out, Violation{"hooks", fmt.Sprintf("machine %s's instance was terminated (revision %d) while its preDrain hook held it (%s)", m, rev, until(held[m]))})
		}
	}
	nodeStates(h, func(rev int64, n, prev *corev1.Node, _ map[string]*corev1.Node) {
		if n == nil || !inSet(n, set) || !n.Spec.Unschedulable || prev == nil || prev.Spec.Unschedulable {
			return
		}
		if released, ok := held[n.Name]; ok && rev < released {
			out = append(out, Violation{"hooks", fmt.Sprintf("node %s was cordoned for its drain (revision %d) while its machine's preDrain hook held it (%s)", n.Name, rev, until(held[n.Name]))})
		}
	})
	return out
}

// until says until when a hook held a machine.
func until(rev int64) string {
	if rev == math.MaxInt64 {
		return "it still does"
	}
	return fmt.Sprintf("until revision %d", rev)
}

// checkOnlySetRemoved checks that no machine but set's was ever deleted.
func checkOnlySetRemoved(h *History, set string) []Violation {
	var out []Violation
	for _, e := range h.Events(machinesKey) {
		m, ok := e.Obj.(*machinev1.Machine)
		if !ok || ownedBy(m, set) || m.DeletionTimestamp == nil {
			continue
		}
		if p, ok := e.Prev.(*machinev1.Machine); ok && p.DeletionTimestamp == nil {
			out = append(out, Violation{"removals", fmt.Sprintf("machine %s, not of %s, was deleted (revision %d)", m.Name, set, e.Rev)})
		}
	}
	return out
}
