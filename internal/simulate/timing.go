package simulate

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/capstan-dev/capstan/internal/nodes"
)

// firstReadyWithin bounds how long after its registration a node's Ready
// condition may have last turned True for that to be its first time
// Ready: a later transition is a reboot's or an outage's.
const firstReadyWithin = 30 * time.Minute

// installWindow is how long after its first Machine a cluster counts as
// being installed: its Machines then wait for the control plane (or, in
// capstan up, boot at once), and say nothing of how long one takes later.
const installWindow = time.Hour

// bootTimeOf is how long the snapshot's cluster took to make a Machine of
// a MachineSet a Ready node: the median over its machines whose nodes
// it holds, from the Machine's creation to the node's first Ready (or its
// registration, when Ready turned later). Machines of no MachineSet (the
// installer's) and those made while the cluster was installed
// (installWindow) are left out. ok is false when no machine tells.
func bootTimeOf(s *Snapshot) (median time.Duration, samples int, ok bool) {
	nodesByName := map[string]*unstructured.Unstructured{}
	for i, n := range s.Objects["v1/nodes"] {
		nodesByName[n.GetName()] = &s.Objects["v1/nodes"][i]
	}
	machines := s.Objects["machine.openshift.io/v1beta1/machines"]
	var first time.Time
	for _, m := range machines {
		if c := m.GetCreationTimestamp().Time; first.IsZero() || c.Before(first) {
			first = c
		}
	}
	var delays []time.Duration
	for _, m := range machines {
		if !ownedByMachineSet(&m) || m.GetCreationTimestamp().Time.Before(first.Add(installWindow)) {
			continue
		}
		ref, _, _ := unstructured.NestedString(m.Object, "status", "nodeRef", "name")
		u := nodesByName[ref]
		if u == nil {
			continue
		}
		n, err := typed[corev1.Node](u)
		if err != nil {
			continue
		}
		ready := n.CreationTimestamp.Time
		if c := nodes.Condition(n, corev1.NodeReady); c != nil && c.Status == corev1.ConditionTrue &&
			c.LastTransitionTime.After(ready) && c.LastTransitionTime.Sub(ready) < firstReadyWithin {
			ready = c.LastTransitionTime.Time
		}
		if d := ready.Sub(m.GetCreationTimestamp().Time); d > 0 {
			delays = append(delays, d)
		}
	}
	if len(delays) == 0 {
		return 0, 0, false
	}
	slices.Sort(delays)
	return delays[len(delays)/2].Round(time.Second), len(delays), true
}

func ownedByMachineSet(u *unstructured.Unstructured) bool {
	for _, r := range u.GetOwnerReferences() {
		if r.Kind == "MachineSet" {
			return true
		}
	}
	return false
}

// resolveBootTime sets o.BootTime from the snapshot when it is not given
// (0), and says where it came from.
func resolveBootTime(o *RunOptions) string {
	if o.BootTime > 0 {
		return fmt.Sprintf("new instances become Ready nodes after %s (--boot-time)", o.BootTime)
	}
	if d, n, ok := bootTimeOf(o.Snapshot); ok {
		o.BootTime = d
		return fmt.Sprintf("new instances become Ready nodes after %s, the median of the snapshot's %s of MachineSets from creation to Ready", d, plural(n, "machine"))
	}
	o.BootTime = DefaultBootTime
	return fmt.Sprintf("new instances become Ready nodes after %s, the default: no machine of a MachineSet made after the cluster's installation tells how long its cluster takes", DefaultBootTime)
}
