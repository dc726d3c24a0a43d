package autoscaler

import (
	"k8s.io/utils/clock"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"

	"github.com/capstan-dev/capstan/internal/scheduler/algorithm"
)

// clusterState is what one loop reads of the cluster, put together once.
type clusterState struct {
	cfg *Config
	// clock measures the time between instants (see simclock).
	clock clock.PassiveClock
	// nodes are the registered nodes, less those of node groups that
	// have not started (see NodeGroup.NotStarted).
	nodes    []*corev1.Node
	groups   []*NodeGroup
	bad      []BadGroup
	sets     []*machinev1.MachineSet
	machines []*machinev1.Machine
	// scheduled are the pods bound to a node and not finished.
	scheduled []*corev1.Pod
	// pending are the pods the scheduler marked Unschedulable.
	pending []*corev1.Pod
	// nominated are the pending pods preemption made room for: they wait
	// on their nominated node, whose room is theirs.
	nominated []*corev1.Pod
	// unprocessed counts the unbound pods the scheduler has not tried
	// yet (no PodScheduled condition).
	unprocessed int
	// usage counts registered nodes and the upcoming ones.
	usage Usage
	// podInfos keeps the pods' scheduling facts from loop to loop (nil:
	// made afresh each time).
	podInfos *algorithm.PodInfos
}

func newClusterState(cfg *Config, all []*corev1.Node, pods []*corev1.Pod, sets []*machinev1.MachineSet, machines []*machinev1.Machine, c clock.PassiveClock, now time.Time) *clusterState {
	s := &clusterState{cfg: cfg, sets: sets, machines: machines, clock: c}
	s.groups, s.bad = NodeGroups(sets, machines, all, c, now, cfg.MaxNodeStartupTime)
	for _, g := range s.groups {
		g.Template = sanitizeTemplate(g.Template, cfg.StartupTaints)
	}
	// A node group's nodes that have not started are among its upcoming
	// nodes: decisions see the group's template in their place (they
	// cannot take pods yet), and count them once.
	starting := map[string]bool{}
	for _, g := range s.groups {
		for _, n := range g.NotStarted {
			starting[n.Name] = true
		}
	}
	for _, n := range all {
		if !starting[n.Name] {
			s.nodes = append(s.nodes, n)
		}
	}
	nodes := s.nodes
	for _, p := range pods {
		switch {
		case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
		case p.Spec.NodeName != "":
			s.scheduled = append(s.scheduled, p)
		case Unschedulable(p):
			s.pending = append(s.pending, p)
		case p.Status.NominatedNodeName != "" && p.DeletionTimestamp.IsZero():
			s.nominated = append(s.nominated, p)
		case p.DeletionTimestamp.IsZero() && !scheduledTried(p):
			s.unprocessed++
		}
	}
	for _, n := range nodes {
		s.usage.Add(n, 1)
	}
	for _, g := range s.groups {
		if g.Template != nil {
			s.usage.Add(g.Template, g.Upcoming())
		}
	}
	return s
}

// Unschedulable reports whether the scheduler found no node for the pod:
// not bound, not going away, no node nominated, PodScheduled False with
// reason Unschedulable.
func Unschedulable(p *corev1.Pod) bool {
	if p.Spec.NodeName != "" || p.DeletionTimestamp != nil || p.Status.NominatedNodeName != "" {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
		}
	}
	return false
}

// expendable reports whether a pod's priority is below the cutoff.
func (s *clusterState) expendable(p *corev1.Pod) bool {
	return p.Spec.Priority != nil && *p.Spec.Priority < s.cfg.PriorityCutoff
}

// snapshot is the registered nodes with their non-expendable pods:
// expendable pods give way, so they take no room in a simulation.
func (s *clusterState) snapshot(alg *algorithm.Algorithm, l algorithm.Listers, extra ...*corev1.Pod) *algorithm.Snapshot {
	infos := make([]*algorithm.NodeInfo, 0, len(s.nodes))
	byName := make(map[string]*algorithm.NodeInfo, len(s.nodes))
	for _, n := range s.nodes {
		ni := alg.NewNodeInfoFor(n)
		infos = append(infos, ni)
		byName[n.Name] = ni
	}
	for _, p := range append(s.scheduled[:len(s.scheduled):len(s.scheduled)], extra...) {
		if ni := byName[p.Spec.NodeName]; ni != nil && !s.expendable(p) {
			ni.AddPod(s.podInfos.Get(p))
		}
	}
	// A pod waiting for the victims of its preemption to go counts on its
	// nominated node, as upstream's autoscaler puts it there: other
	// pending pods cannot count on that room.
	for _, p := range s.nominated {
		if ni := byName[p.Status.NominatedNodeName]; ni != nil && !s.expendable(p) {
			placed := p.DeepCopy()
			placed.Spec.NodeName = ni.Name
			ni.AddPod(algorithm.NewPodInfo(placed))
		}
	}
	return algorithm.NewSnapshot(infos, l)
}

// expendableOn are the infos of the expendable pods of each node: the
// room a pod may take from them by preemption.
func (s *clusterState) expendableOn() map[string][]*algorithm.PodInfo {
	out := map[string][]*algorithm.PodInfo{}
	for _, p := range s.scheduled {
		if s.expendable(p) {
			out[p.Spec.NodeName] = append(out[p.Spec.NodeName], s.podInfos.Get(p))
		}
	}
	return out
}

// podsByNode groups the scheduled pods, and extra, by their node.
func (s *clusterState) podsByNode(extra ...*corev1.Pod) map[string][]*corev1.Pod {
	out := map[string][]*corev1.Pod{}
	for _, p := range append(s.scheduled[:len(s.scheduled):len(s.scheduled)], extra...) {
		out[p.Spec.NodeName] = append(out[p.Spec.NodeName], p)
	}
	return out
}

// notStartedAndUpcoming adds up the node groups' registered nodes that
// have not started and their upcoming nodes (which include the former).
func (s *clusterState) notStartedAndUpcoming() (notStarted, upcoming int) {
	for _, g := range s.groups {
		notStarted += len(g.NotStarted)
		upcoming += g.Upcoming()
	}
	return notStarted, upcoming
}

// scheduledTried reports whether the scheduler has set the pod's
// PodScheduled condition.
func scheduledTried(p *corev1.Pod) bool {
	_, c := podutil.GetPodCondition(&p.Status, corev1.PodScheduled)
	return c != nil
}
