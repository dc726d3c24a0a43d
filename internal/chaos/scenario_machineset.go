package chaos

import (
	"context"
	"fmt"
	"syscall"
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
func machineSetScenario() *Scenario { return machineSetOp(false) }

// capstanPause is how long the pause scenario stops capstan up: longer
// than a Lease (15s), shorter than the Nodes' grace (40s).
const capstanPause = 20 * time.Second

// machineSetPauseScenario is the machineset scenario with capstan up
// stopped (SIGSTOP) between the scale-up and the scale-down.
func machineSetPauseScenario() *Scenario {
	s := machineSetOp(true)
	s.Name = "pause"
	s.Doc = fmt.Sprintf("the machineset scenario with capstan up stopped (SIGSTOP) for %s, longer than a Lease, once the pods run, "+
		"then continued (SIGCONT): the scale-down goes on, exactly 3 machines and 3 instances ever made, never more than 3 replicas, "+
		"each node drained before its instance goes, nothing left at the end, the API back within %s of the pause's end", capstanPause, pauseRecovery)
	s.Span += capstanPause
	s.MaxOutage = capstanPause + pauseRecovery
	return s
}

// pauseRecovery bounds how long the API may take to serve again after
// capstan is continued.
const pauseRecovery = 30 * time.Second

func machineSetOp(pause bool) *Scenario {
	const set = "chaos-ms"
	return &Scenario{
		Name: "machineset",
		Doc: "a MachineSet scaled 0 -> 3 -> 0 under a Deployment of a pod per node: exactly 3 machines and 3 instances ever made, " +
			"never more than 3 replicas, each node drained before its instance goes, nothing left at the end",
		// Instances take a moment to boot and to shut down, as a cloud's do.
		Args: []string{"--control-plane-nodes", "1", "--nodes", "1", "--boot-delay", "3s", "--terminate-delay", "2s"},
		// Its operations took 6 to 12 s (machineset-cloud 8 to 12,
		// power 8 to 9) in the fresh-seed campaigns of 2026-12-06/07.
		Span:    5 * time.Second,
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
				if pause {
					return false, "pausing capstan", setPhase(ctx, r, "pause")
				}
				return false, "scaling down", setPhase(ctx, r, "down")
			case "pause":
				if err := pauseCapstan(r, capstanPause); err != nil {
					return false, "", err
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

// lostAnswers is how many launches of each start of the machineset-cloud
// scenario answer an error: the install's two machines and the set's
// three.
const lostAnswers = 5

// machineSetCloudScenario is the machineset scenario on a cloud that
// fails as real ones do.
func machineSetCloudScenario() *Scenario {
	s := machineSetScenario()
	s.Name = "machineset-cloud"
	s.Doc = fmt.Sprintf("the machineset scenario on a simulated cloud whose create is not idempotent (a retry without the "+
		"machine's client token launches another instance) and answers an error after launching the first %d instances of each "+
		"start (a timeout after the commit: the install's and the set's), and whose describe does not see an instance launched in "+
		"the last 3s (eventually consistent), so a retry cannot find what the lost answer launched: still exactly 3 machines and "+
		"one instance for each ever made, never more than 3 replicas, each node drained before its instance goes, nothing left at "+
		"the end", lostAnswers)
	s.Faults = failpoint.FormatFirstFaults(failpoint.CloudCreateAnswerLost, lostAnswers) + "," +
		failpoint.FormatFault(failpoint.CloudDescribeLags, time.Second, time.Second)
	return s
}

// pauseCapstan stops capstan up (SIGSTOP) for d and continues it
// (SIGCONT), as a VM paused by its host or a process stopped in a
// debugger would be. A kill meanwhile ends it the same.
func pauseCapstan(r *Run, d time.Duration) error {
	p := r.upProcess()
	if p == nil {
		return fmt.Errorf("capstan up is not up to pause")
	}
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("stopping capstan up: %w", err)
	}
	select {
	case <-p.done:
	case <-time.After(d):
	}
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil && !p.exited() {
		return fmt.Errorf("continuing capstan up: %w", err)
	}
	return nil
}

// userScale scales a MachineSet as its user would, once, records the
// intent, and moves to phase next.
func userScale(ctx context.Context, r *Run, set string, replicas int, next string) error {
	return userScaleThen(ctx, r, set, replicas, func() error { return setPhase(ctx, r, next) })
}

// userScaleThen is userScale, then moves the scenario on with next.
func userScaleThen(ctx context.Context, r *Run, set string, replicas int, next func() error) error {
	ms, err := scaleTo(ctx, r, set, replicas)
	if err != nil {
		return err
	}
	if err := r.intents.wrote(machineSetsKey+machine.Namespace+"/"+set, "replicas", fmt.Sprint(replicas), ms.ResourceVersion, setReplicas); err != nil {
		return err
	}
	return next()
}

// setReplicas reads a stored MachineSet's replicas.
func setReplicas(obj runtime.Object) string {
	ms, ok := obj.(*machinev1.MachineSet)
	if !ok {
		return "not a MachineSet"
	}
	return fmt.Sprint(ptr.Deref(ms.Spec.Replicas, 0))
}
