package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/mco"
	"github.com/capstan-dev/capstan/internal/nodes"
	"github.com/capstan-dev/capstan/internal/sim"
)

// The invariants every scenario shares, each read from the history of the
// cluster's storage.

// ownedBy reports whether obj's controller is the MachineSet set.
func ownedBy(obj metav1.Object, set string) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && ref.Kind == "MachineSet" && ref.Name == set
}

// machinesOf are the names of every machine the MachineSet set ever had,
// in the order they were created.
func machinesOf(h *History, set string) []string {
	var out []string
	seen := map[string]bool{}
	for _, e := range h.Events(machinesKey) {
		m, ok := e.Obj.(*machinev1.Machine)
		if !ok || e.Prev != nil || !ownedBy(m, set) || seen[m.Name] {
			continue
		}
		seen[m.Name] = true
		out = append(out, m.Name)
	}
	return out
}

// instancesCreated counts the simulated cloud's instance launches for
// each machine (the machine an instance is tagged with; its own name for
// one that backs none): a cloud whose create is not idempotent launches a
// second instance, under a host name of its own, for a create retried
// without its client token.
func instancesCreated(h *History) map[string]int {
	out := map[string]int{}
	for _, e := range h.Events(instancesKey) {
		if cm, ok := e.Obj.(*corev1.ConfigMap); ok && e.Prev == nil && cm.Labels[sim.InstanceLabel] == "true" {
			name := cm.Name
			if m := cm.Labels[sim.MachineLabel]; m != "" {
				name = m
			}
			out[name]++
		}
	}
	return out
}

// maxReplicas is the most replicas the MachineSet set ever asked for.
func maxReplicas(h *History, set string) int {
	most := 0
	for _, e := range h.Events(machineSetsKey) {
		if ms, ok := e.Obj.(*machinev1.MachineSet); ok && ms.Name == set {
			most = max(most, int(ptr.Deref(ms.Spec.Replicas, 0)))
		}
	}
	return most
}

// checkMachineSet checks that the MachineSet set made want machines, each
// with one instance, and never asked for more than want replicas.
func checkMachineSet(h *History, set string, want int) []Violation {
	var out []Violation
	if most := maxReplicas(h, set); most > want {
		out = append(out, Violation{"replicas", fmt.Sprintf("MachineSet %s asked for %d replicas at most, the decision was %d", set, most, want)})
	}
	made := machinesOf(h, set)
	if len(made) != want {
		out = append(out, Violation{"machines", fmt.Sprintf("MachineSet %s created %d machines (%s), want %d", set, len(made), summarize(made, 8), want)})
	}
	created := instancesCreated(h)
	for _, m := range made {
		if n := created[m]; n != 1 {
			out = append(out, Violation{"instances", fmt.Sprintf("machine %s had %d instances created, want 1", m, n)})
		}
	}
	return out
}

// nodeStates replays the nodes, calling fn after each change with every
// node as it then was.
func nodeStates(h *History, fn func(rev int64, changed *corev1.Node, prev *corev1.Node, all map[string]*corev1.Node)) {
	all := map[string]*corev1.Node{}
	for _, e := range h.Events(nodesKey) {
		var n, prev *corev1.Node
		if e.Obj != nil {
			n = e.Obj.(*corev1.Node)
			all[n.Name] = n
		}
		if e.Prev != nil {
			prev = e.Prev.(*corev1.Node)
			if n == nil {
				delete(all, prev.Name)
			}
		}
		fn(e.Rev, n, prev, all)
	}
}

// rebootsFor counts, per node, the boots (new boot IDs) while the node was
// told to run config.
func rebootsFor(h *History, config string) map[string]int {
	out := map[string]int{}
	nodeStates(h, func(_ int64, n, prev *corev1.Node, _ map[string]*corev1.Node) {
		if n == nil || prev == nil || n.Status.NodeInfo.BootID == prev.Status.NodeInfo.BootID || prev.Status.NodeInfo.BootID == "" {
			return
		}
		if n.Annotations[mco.DesiredConfigAnnotation] == config {
			out[n.Name]++
		}
	})
	return out
}

// busy reports whether a node is out of service for an update: not Ready,
// cordoned, or not yet done with its desired configuration.
func busy(n *corev1.Node) bool {
	a := n.Annotations
	return !nodes.Ready(n) || n.Spec.Unschedulable || a[mco.CurrentConfigAnnotation] != a[mco.DesiredConfigAnnotation] || a[mco.StateAnnotation] != mco.StateDone
}

// checkRollout checks a pool's rollout to config over the nodes member
// selects, of which there are want: never more than maxUnavailable of
// them out of service at once (from the first node targeted on), and each
// rebooted exactly once into config (a node that joined running it,
// never). A rollout it cannot see (no node
// targeted, nodes missing) is a violation, not a pass.
func checkRollout(h *History, pool string, member func(*corev1.Node) bool, config string, maxUnavailable, want int) []Violation {
	var out []Violation
	started := false
	worst, worstRev := 0, int64(0)
	var worstNodes []string
	// A node counts once it has served: one that joins the pool (a user
	// scaled its MachineSet) is out of service while it boots, by the
	// user's doing, not the MCO's. joinedInto is the configuration each
	// node first ran.
	served := map[string]bool{}
	joinedInto := map[string]string{}
	nodeStates(h, func(rev int64, _ *corev1.Node, _ *corev1.Node, all map[string]*corev1.Node) {
		var out []string
		for _, n := range all {
			if !member(n) {
				continue
			}
			if cur := n.Annotations[mco.CurrentConfigAnnotation]; cur != "" && joinedInto[n.Name] == "" {
				joinedInto[n.Name] = cur
			}
			started = started || n.Annotations[mco.DesiredConfigAnnotation] == config
			if !busy(n) {
				served[n.Name] = true
			} else if served[n.Name] {
				out = append(out, n.Name)
			}
		}
		if started && len(out) > worst {
			sort.Strings(out)
			worst, worstRev, worstNodes = len(out), rev, out
		}
	})
	if worst > maxUnavailable {
		out = append(out, Violation{"maxUnavailable", fmt.Sprintf("pool %s had %d nodes unavailable at once (%s, revision %d), maxUnavailable is %d",
			pool, worst, strings.Join(worstNodes, ", "), worstRev, maxUnavailable)})
	}
	reboots := rebootsFor(h, config)
	var members []string
	nodeStates(h, func(_ int64, n, _ *corev1.Node, _ map[string]*corev1.Node) {
		if n != nil && member(n) && !slices.Contains(members, n.Name) {
			members = append(members, n.Name)
		}
	})
	sort.Strings(members)
	if !started {
		out = append(out, Violation{"rollout", fmt.Sprintf("no node of pool %s was ever told to run %s: there is no rollout to check", pool, config)})
	}
	if len(members) != want {
		out = append(out, Violation{"rollout", fmt.Sprintf("the history holds %d nodes of pool %s (%s), want %d", len(members), pool, strings.Join(members, ", "), want)})
	}
	for _, name := range members {
		// A node that joined running config boots into it with no reboot.
		want, times := 1, "once"
		if joinedInto[name] == config {
			want, times = 0, "never (it joined running it)"
		}
		if r := reboots[name]; r != want {
			out = append(out, Violation{"reboots", fmt.Sprintf("node %s of pool %s booted %d times into %s, want %s", name, pool, r, config, times)})
		}
	}
	return out
}

// inSet reports whether a node belongs to a machine of the MachineSet set
// (its template labels the node).
func inSet(n *corev1.Node, set string) bool { return n.Labels["chaos.capstan.dev/set"] == set }

// setLabel is the node label of a scenario's MachineSet.
func setLabel(set string) map[string]string { return map[string]string{"chaos.capstan.dev/set": set} }
