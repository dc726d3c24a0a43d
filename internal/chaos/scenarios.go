package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/sim"
)

// Scenarios are the campaign's scenarios, in the order `all` runs them.
func Scenarios() []*Scenario {
	return []*Scenario{updateScenario(), autoscalerScenario(), machineSetScenario(), machineSetCloudScenario(), machineSetPauseScenario(), powerScenario(), mcoScenario(), mcoPauseScenario(), evictionScenario(),
		etcdDeadScenario(), etcdTwoScenario(), etcdFailedScenario(), etcdMemberScenario(), etcdPauseScenario(), etcdPartitionScenario(), etcdBridgeScenario(), etcdMinorityScenario(), etcdAPIServerCutScenario(), etcdRelabelScenario(), etcdDiskFullScenario(), etcdRemoteScenario()}
}

// created treats AlreadyExists as success: each write of a scenario may
// be made again after a kill.
func created(err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// phase is where a multi-step scenario is, kept in the cluster (so a
// kill of the campaign's target loses nothing of it): a ConfigMap
// chaos-phase in the campaign's namespace. "" is the setup, before the
// operation starts.
func phase(ctx context.Context, r *Run) (string, error) {
	raw, err := phaseData(ctx, r)
	if err != nil {
		return "", err
	}
	r.op.enter(raw)
	return raw, nil
}

// phaseData is what the phase ConfigMap keeps ("" before the operation).
func phaseData(ctx context.Context, r *Run) (string, error) {
	cm, err := r.Kube.CoreV1().ConfigMaps(ackNamespace).Get(ctx, "chaos-phase", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return cm.Data["phase"], nil
}

// typedPhase is a scenario's phase kept as JSON in the phase ConfigMap
// (a kill of capstan loses none of it), named by its step.
type typedPhase interface{ step() string }

// readTypedPhase reads a phase kept as JSON (writeTypedPhase) into a P
// (the zero P before the operation), and enters its step.
func readTypedPhase[P typedPhase](ctx context.Context, r *Run) (P, error) {
	var p P
	raw, err := phaseData(ctx, r)
	if err != nil {
		// Unread (the API is down): the operation stays where it was.
		return p, err
	}
	if raw == "" {
		r.op.enter("")
		return p, nil
	}
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		return p, fmt.Errorf("the phase %q: %w", raw, err)
	}
	r.op.enter(p.step())
	return p, nil
}

// writeTypedPhase moves the scenario to phase p, kept as JSON.
func writeTypedPhase(ctx context.Context, r *Run, p typedPhase) error {
	raw, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return setPhaseAs(ctx, r, string(raw), p.step())
}

// setPhase moves the scenario to its next step.
func setPhase(ctx context.Context, r *Run, p string) error { return setPhaseAs(ctx, r, p, p) }

// setPhaseAs moves the scenario to its next step, kept as p and named
// name (a typed phase is kept as JSON).
func setPhaseAs(ctx context.Context, r *Run, p, name string) error {
	patch := fmt.Sprintf(`{"data":{"phase":%q}}`, p)
	_, err := r.Kube.CoreV1().ConfigMaps(ackNamespace).Patch(ctx, "chaos-phase", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "chaos-phase", Namespace: ackNamespace}, Data: map[string]string{"phase": p}}
		_, err = r.Kube.CoreV1().ConfigMaps(ackNamespace).Create(ctx, cm, metav1.CreateOptions{})
	}
	if err == nil {
		r.op.enter(name)
	}
	return err
}

// newMachineSet is a scenario's MachineSet of 4-core workers in one zone,
// whose nodes carry setLabel(name).
func newMachineSet(name string, annotations map[string]string) *machinev1.MachineSet {
	return &machinev1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: machine.Namespace, Annotations: annotations},
		Spec: machinev1.MachineSetSpec{
			Replicas: ptr.To(int32(0)),
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{machine.MachineSetLabel: name}},
			Template: machinev1.MachineTemplateSpec{
				ObjectMeta: machinev1.ObjectMeta{Labels: map[string]string{machine.MachineSetLabel: name}},
				Spec: machinev1.MachineSpec{
					ObjectMeta:   machinev1.ObjectMeta{Labels: setLabel(name)},
					ProviderSpec: machinev1.ProviderSpec{Value: machine.RawProviderSpec(machine.ProviderSpec{InstanceType: "capstan.large", Zone: "sim-zone-a"})},
				},
			},
		},
	}
}

// ensureMachineSet creates a scenario's MachineSet unless it exists.
func ensureMachineSet(ctx context.Context, r *Run, ms *machinev1.MachineSet) error {
	_, err := r.Machine.MachineV1beta1().MachineSets(machine.Namespace).Create(ctx, ms, metav1.CreateOptions{})
	return created(err)
}

// scaleTo sets a MachineSet's replicas.
func scaleTo(ctx context.Context, r *Run, set string, replicas int) (*machinev1.MachineSet, error) {
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	return r.Machine.MachineV1beta1().MachineSets(machine.Namespace).Patch(ctx, set, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
}

// setState is what the cluster holds of a MachineSet: its replicas, its
// machines (deleting ones too) and the nodes of its machines.
type setState struct {
	replicas int
	machines []machinev1.Machine
	nodes    []corev1.Node
}

func readSet(ctx context.Context, r *Run, set string) (*setState, error) {
	ms, err := r.Machine.MachineV1beta1().MachineSets(machine.Namespace).Get(ctx, set, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	st := &setState{replicas: int(ptr.Deref(ms.Spec.Replicas, 0))}
	ml, err := r.Machine.MachineV1beta1().Machines(machine.Namespace).List(ctx, metav1.ListOptions{LabelSelector: machine.MachineSetLabel + "=" + set})
	if err != nil {
		return nil, err
	}
	st.machines = ml.Items
	nl, err := r.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "chaos.capstan.dev/set=" + set})
	if err != nil {
		return nil, err
	}
	st.nodes = nl.Items
	return st, nil
}

// gone reports whether the set has no machine, instance or node left.
func (st *setState) gone() (bool, string) {
	if st.replicas != 0 || len(st.machines) > 0 || len(st.nodes) > 0 {
		return false, fmt.Sprintf("%d replicas, %d machines, %d nodes left", st.replicas, len(st.machines), len(st.nodes))
	}
	return true, ""
}

// bigPod is a pod that takes most of a 4-core node, on a node of set.
func bigPod(name, set string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ackNamespace, Labels: map[string]string{"app": set}},
		Spec:       podSpec(set),
	}
}

func podSpec(set string) corev1.PodSpec {
	return corev1.PodSpec{
		NodeSelector:                  setLabel(set),
		TerminationGracePeriodSeconds: ptr.To[int64](0),
		Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}}}},
	}
}

// runningPods counts the pods of app that run on a node.
func runningPods(ctx context.Context, r *Run, app string) (int, []corev1.Pod, error) {
	list, err := r.Kube.CoreV1().Pods(ackNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		return 0, nil, err
	}
	n := 0
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning {
			n++
		}
	}
	return n, list.Items, nil
}

// podsOnAt replays the pods of namespace ns and returns those bound to
// each node at revision rev, not terminating.
func podsOnAt(h *History, ns string, rev int64) map[string][]string {
	live := map[string]*corev1.Pod{}
	for _, e := range h.Events(podsKey + ns + "/") {
		if e.Rev > rev {
			break
		}
		if p, ok := e.Obj.(*corev1.Pod); ok {
			live[p.Name] = p
		} else if p, ok := e.Prev.(*corev1.Pod); ok {
			delete(live, p.Name)
		}
	}
	out := map[string][]string{}
	for _, p := range live {
		if p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
			out[p.Spec.NodeName] = append(out[p.Spec.NodeName], p.Name)
		}
	}
	return out
}

// terminatedAt is the revision at which the instance stored at key
// started terminating: the cloud wrote its termination time, or deleted
// it outright (0: never). Termination is the instant the machine goes,
// not the instance's removal, which comes lazily after it.
func terminatedAt(h *History, key string) int64 {
	for _, e := range h.Events(key) {
		if e.Key != key {
			continue
		}
		cm, ok := e.Obj.(*corev1.ConfigMap)
		if !ok {
			return e.Rev // deleted
		}
		if inst, err := sim.InstanceFromConfigMap(cm); err == nil && inst.TerminateAt != nil {
			return e.Rev
		}
	}
	return 0
}

// launched reports whether the history holds the instance stored at key.
func launched(h *History, key string) bool {
	return slices.ContainsFunc(h.Events(key), func(e Event) bool { return e.Key == key && e.Obj != nil })
}

// checkDrained checks that each machine's node had no pod of namespace ns
// left when its instance was terminated, and that every instance was
// terminated: a machine gone with its instance left running (or one whose
// instance the history never held) is a leak, and leaves the drain
// unchecked.
func checkDrained(h *History, machines []string) []Violation {
	var out []Violation
	for _, m := range machines {
		rev := terminatedAt(h, instancesKey+m)
		switch {
		case rev == 0 && launched(h, instancesKey+m):
			out = append(out, Violation{"instances", fmt.Sprintf("machine %s's instance was never terminated", m)})
			continue
		case rev == 0:
			out = append(out, Violation{"instances", fmt.Sprintf("the history holds no instance of machine %s", m)})
			continue
		}
		if left := podsOnAt(h, ackNamespace, rev)[m]; len(left) > 0 {
			out = append(out, Violation{"drain", fmt.Sprintf("machine %s's instance was terminated (revision %d) with pods still on its node: %s", m, rev, summarize(left, 5))})
		}
	}
	return out
}

// settleTime is how long a scenario may take after its last kill.
const settleTime = 5 * time.Minute
