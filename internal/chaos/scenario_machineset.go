package chaos

import (
	"context"
	"fmt"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/failpoint"
	"github.com/capstan-dev/capstan/internal/machine"
)

// msReplicas is how far the machineset scenario scales up.
const msReplicas = 3

// machineSetScenario scales a MachineSet 0 -> 3 -> 0 under a Deployment
// with a pod per node, whose pods are drained on the way down.
func machineSetScenario() *Scenario {
	const set = "chaos-ms"
	return &Scenario{
		Name: "machineset",
		Doc: "a MachineSet scaled 0 -> 3 -> 0 under a Deployment of a pod per node: exactly 3 machines and 3 instances ever made, " +
			"never more than 3 replicas, each node drained before its instance goes, nothing left at the end",
		// Instances take a moment to boot and to shut down, as a cloud's do.
		Args:    []string{"--control-plane-nodes", "1", "--nodes", "1", "--boot-delay", "3s", "--terminate-delay", "2s"},
		Span:    12 * time.Second,
		Points:  []Point{{failpoint.MachineSetCreate, 3}, {failpoint.MachineInstanceLaunched, 3}, {failpoint.DrainStarted, 2}},
		Timeout: settleTime,
		// The phases, each write made once (a kill may repeat the last):
		// "" the set and its Deployment made; up, the set scaled to 3;
		// scaled-up until the pods run; down, the set scaled to 0;
		// scaled-down until nothing is left.
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
				dep := &appsv1.Deployment{
					ObjectMeta: metav1.ObjectMeta{Name: set, Namespace: ackNamespace},
					Spec: appsv1.DeploymentSpec{
						Replicas: ptr.To(int32(msReplicas)),
						Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": set}},
						Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": set}}, Spec: podSpec(set)},
					},
				}
				if _, err := r.Kube.AppsV1().Deployments(ackNamespace).Create(ctx, dep, metav1.CreateOptions{}); created(err) != nil {
					return false, "", err
				}
				return false, "scaling up", setPhase(ctx, r, "up")
			case "up":
				return false, "scaled up", userScale(ctx, r, set, msReplicas, "scaled-up")
			case "scaled-up":
				running, _, err := runningPods(ctx, r, set)
				if err != nil || running < msReplicas {
					return false, fmt.Sprintf("%d of %d pods running on the set's nodes", running, msReplicas), err
				}
				return false, "scaling down", setPhase(ctx, r, "down")
			case "down":
				return false, "scaled down", userScale(ctx, r, set, 0, "scaled-down")
			}
			st, err := readSet(ctx, r, set)
			if err != nil {
				return false, "", err
			}
			if ok, why := st.gone(); !ok {
				return false, why, nil
			}
			running, _, err := runningPods(ctx, r, set)
			if err != nil || running > 0 {
				return false, fmt.Sprintf("%d pods still running", running), err
			}
			return true, "", nil
		},
		Check: func(ctx context.Context, r *Run) []Violation {
			out := checkMachineSet(r.History, set, msReplicas)
			out = append(out, r.intents.check(r.History, machineSetsKey+machine.Namespace+"/"+set)...)
			return append(out, checkDrained(r.History, machinesOf(r.History, set))...)
		},
	}
}

// userScale scales a MachineSet as its user would, once, records the
// intent, and moves to phase next.
func userScale(ctx context.Context, r *Run, set string, replicas int, next string) error {
	ms, err := scaleTo(ctx, r, set, replicas)
	if err != nil {
		return err
	}
	if err := r.intents.wrote(machineSetsKey+machine.Namespace+"/"+set, "replicas", fmt.Sprint(replicas), ms.ResourceVersion, setReplicas); err != nil {
		return err
	}
	return setPhase(ctx, r, next)
}

// setReplicas reads a stored MachineSet's replicas.
func setReplicas(obj runtime.Object) string {
	ms, ok := obj.(*machinev1.MachineSet)
	if !ok {
		return "not a MachineSet"
	}
	return fmt.Sprint(ptr.Deref(ms.Spec.Replicas, 0))
}
