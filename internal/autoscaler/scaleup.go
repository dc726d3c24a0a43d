package autoscaler

import (
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/planted"
	"github.com/capstan-dev/capstan/internal/scheduler/algorithm"
)

// ScaleUpInput is what one scale-up decision reads. It is a pure
// computation over it: nothing is written.
type ScaleUpInput struct {
	Config    *Config
	Algorithm *algorithm.Algorithm
	// Snapshot holds the registered nodes with their scheduled pods,
	// expendable ones left out. The decision adds the upcoming nodes and
	// places pods while it simulates, and leaves what it placed in it.
	Snapshot *algorithm.Snapshot
	Groups   []*NodeGroup
	// Usage is what the registered and upcoming nodes add up to.
	Usage Usage
	// Pending are the pods the scheduler found no node for.
	Pending []*corev1.Pod
	// BackedOff says whether a node group is backed off after a failed
	// scale-up, and why.
	BackedOff func(id string) (bool, string)
	Expander  *Expander
	// DaemonSets run their pods on every new node that takes them: a new
	// node has that much less room.
	DaemonSets []*appsv1.DaemonSet
	// PodInfos caches the pods' requests from loop to loop (nil: none).
	PodInfos *algorithm.PodInfos
	// Expendable are the pods below the cutoff on each node, which the
	// Snapshot leaves out: a pod that fits only without them fits by
	// preemption, and its verdict says so.
	Expendable map[string][]*algorithm.PodInfo

	// Remembered, set only by the planted window bug UpcomingInMemory, is
	// how many nodes each group is still to bring by the autoscaler's
	// memory of the sizes it set: the upcoming nodes are counted from it,
	// not from the groups' sizes alone.
	Remembered map[string]int

	// daemonPods caches, per node group, the daemon pods of its new nodes.
	daemonPods map[*NodeGroup][]*algorithm.PodInfo
}

// Verdict is what the autoscaler concluded for one pending pod.
type Verdict string

// The verdicts.
const (
	// VerdictExpendable: its priority is below the cutoff.
	VerdictExpendable Verdict = "Expendable"
	// VerdictFits: it fits on a registered or upcoming node.
	VerdictFits Verdict = "FitsExistingNode"
	// VerdictTriggered: a scale-up is for it.
	VerdictTriggered Verdict = "TriggeredScaleUp"
	// VerdictAwaiting: a node group could take it, but another scale-up
	// was chosen this loop.
	VerdictAwaiting Verdict = "AwaitingScaleUp"
	// VerdictNotTriggered: no node group can take it.
	VerdictNotTriggered Verdict = "NotTriggerScaleUp"
)

// PodVerdict explains one pod.
type PodVerdict struct {
	Pod     *corev1.Pod
	Verdict Verdict
	// Node is the node it fits on (VerdictFits).
	Node string
	// Groups says, per node group, why it did not help (the reasons of
	// VerdictNotTriggered, and of the groups not chosen otherwise).
	Groups map[string]string
	// Message is the event's message.
	Message string
}

// Increase is a node group grown by a scale-up.
type Increase struct {
	Group    *NodeGroup
	From, To int
}

func (i Increase) String() string {
	return fmt.Sprintf("{%s %d->%d (max: %d)}", i.Group.ID, i.From, i.To, i.Group.Max)
}

// ScaleUpPlan is one scale-up decision.
type ScaleUpPlan struct {
	Increases []Increase
	Verdicts  map[types.UID]*PodVerdict
	// Options are the node groups that could have taken pods, with the
	// nodes they would have needed.
	Options []Option
	// Skipped names the limits (upstream's codes: CpuResourceLimit, ...)
	// that kept a node group from growing, once per group.
	Skipped []string
}

// ScaleUpInfos formats the increases as upstream's events do.
func (p *ScaleUpPlan) ScaleUpInfos() string {
	parts := make([]string, len(p.Increases))
	for i, inc := range p.Increases {
		parts[i] = inc.String()
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// PlanScaleUp decides which node groups to grow, by how much, for which
// pods, and why each other pod does not make any grow.
func PlanScaleUp(in *ScaleUpInput) *ScaleUpPlan {
	plan := &ScaleUpPlan{Verdicts: map[types.UID]*PodVerdict{}}
	cutoff := in.Config.PriorityCutoff
	var candidates []*podEntry
	for _, pod := range in.Pending {
		if prio := pod.Spec.Priority; prio != nil && *prio < cutoff {
			plan.Verdicts[pod.UID] = &PodVerdict{Pod: pod, Verdict: VerdictExpendable,
				Message: fmt.Sprintf("pod didn't trigger scale-up: priority %d below cutoff %d", *prio, cutoff)}
			continue
		}
		candidates = append(candidates, &podEntry{pod: pod, pi: in.PodInfos.Get(pod)})
	}
	// Higher priorities are placed first, as the scheduler would.
	sort.SliceStable(candidates, func(i, j int) bool {
		return ptr.Deref(candidates[i].pod.Spec.Priority, 0) > ptr.Deref(candidates[j].pod.Spec.Priority, 0)
	})
	if !planted.On(planted.ScaleUpTwice) {
		addUpcoming(in)
	}
	remaining := in.filterSchedulable(candidates, plan)
	if len(remaining) == 0 {
		return plan
	}
	classes := classify(remaining)
	if in.Config.MaxNodesTotal > 0 && in.Usage.Nodes >= in.Config.MaxNodesTotal {
		for _, c := range classes {
			for _, p := range c.pods {
				plan.Verdicts[p.pod.UID] = &PodVerdict{Pod: p.pod, Verdict: VerdictNotTriggered,
					Message: "pod didn't trigger scale-up: max total nodes in cluster reached"}
			}
		}
		return plan
	}
	for _, g := range in.Groups {
		if opt, ok := in.option(g, classes, plan); ok {
			plan.Options = append(plan.Options, opt)
		}
	}
	var chosen []Increase
	if best := in.Expander.Best(plan.Options); best != nil {
		chosen = in.balance(best, plan.Options)
	}
	plan.Increases = chosen
	helped := map[types.UID]bool{}
	for _, inc := range chosen {
		for _, o := range plan.Options {
			if o.Group == inc.Group {
				for _, p := range o.Pods {
					helped[p.UID] = true
				}
			}
		}
	}
	for _, c := range classes {
		for _, p := range c.pods {
			v := &PodVerdict{Pod: p.pod, Groups: c.reasons}
			switch {
			case helped[p.pod.UID]:
				v.Verdict = VerdictTriggered
				v.Message = "pod triggered scale-up: " + plan.ScaleUpInfos()
			case len(c.fits) > 0:
				v.Verdict = VerdictAwaiting
				v.Message = "pod awaits a scale-up of another node group"
			default:
				v.Verdict = VerdictNotTriggered
				v.Message = "pod didn't trigger scale-up: " + reasonsMessage(c.reasons)
			}
			plan.Verdicts[p.pod.UID] = v
		}
	}
	return plan
}

// addUpcoming puts the nodes node groups are to get but that have not
// registered yet into the snapshot, so that pods that fit on them do not
// make the group grow again.
func addUpcoming(in *ScaleUpInput) {
	for _, g := range in.Groups {
		if g.Template == nil {
			continue
		}
		upcoming := g.Upcoming()
		if in.Remembered != nil {
			upcoming = min(upcoming, in.Remembered[g.ID])
		}
		for i := range upcoming {
			in.Snapshot.AddNode(in.newNode(g, fmt.Sprintf("upcoming-%s-%d", g.Set.Name, i)))
		}
	}
}

// newNode is a node like g's template, named name, with the pods the
// DaemonSets would run there.
func (in *ScaleUpInput) newNode(g *NodeGroup, name string) *algorithm.NodeInfo {
	if in.daemonPods == nil {
		in.daemonPods = map[*NodeGroup][]*algorithm.PodInfo{}
	}
	daemons, ok := in.daemonPods[g]
	if !ok {
		daemons = daemonPodsFor(in.Algorithm, g.Template, in.DaemonSets)
		in.daemonPods[g] = daemons
	}
	n := g.Template.DeepCopy()
	n.Name = name
	n.Labels = copyLabels(n.Labels)
	n.Labels[corev1.LabelHostname] = name
	ni := in.Algorithm.NewNodeInfoFor(n)
	for _, p := range daemons {
		ni.AddPod(p)
	}
	return ni
}

func copyLabels(l map[string]string) map[string]string {
	out := make(map[string]string, len(l)+1)
	for k, v := range l {
		out[k] = v
	}
	return out
}

// filterSchedulable places the pods that fit on registered or upcoming
// nodes there (in the snapshot) and returns the others. Once a pod of a
// class fits nowhere, the rest of the class does not either.
func (in *ScaleUpInput) filterSchedulable(pods []*podEntry, plan *ScaleUpPlan) []*podEntry {
	var remaining []*podEntry
	failed := map[string]bool{}
	hint := map[string]int{}
	for _, p := range pods {
		key := classKey(p.pod)
		if key != "" && failed[key] {
			remaining = append(remaining, p)
			continue
		}
		nodes := in.Snapshot.Nodes
		cs := in.Algorithm.PreFilter(p.pi, in.Snapshot)
		start := hint[key]
		var fit *algorithm.NodeInfo
		for k := range nodes {
			i := (start + k) % len(nodes)
			if in.Algorithm.Fits(cs, p.pi, nodes[i]) == nil {
				fit, hint[key] = nodes[i], i
				break
			}
		}
		if fit == nil {
			if key != "" {
				failed[key] = true
			}
			remaining = append(remaining, p)
			continue
		}
		in.Snapshot.Place(p.pi, fit)
		plan.Verdicts[p.pod.UID] = &PodVerdict{Pod: p.pod, Verdict: VerdictFits, Node: fit.Name,
			Message: in.fitMessage(cs, p.pi, fit)}
	}
	return remaining
}

// fitMessage says where a pod fits, and whether only once the expendable
// pods there give way: the scheduler then preempts them and no node is
// added, as the chapter's priority cutoff intends.
func (in *ScaleUpInput) fitMessage(cs *algorithm.CycleState, pi *algorithm.PodInfo, fit *algorithm.NodeInfo) string {
	if exp := in.Expendable[fit.Name]; len(exp) > 0 {
		with := fit.Clone()
		for _, e := range exp {
			with.AddPod(e)
		}
		if in.Algorithm.Fits(cs, pi, with) != nil {
			return fmt.Sprintf("pod fits on node %s once pods below the priority cutoff %d there are preempted", fit.Name, in.Config.PriorityCutoff)
		}
	}
	return "pod fits on node " + fit.Name
}

// classKey is the class of a controlled pod, "" for one without a
// controller (always a class of its own).
func classKey(pod *corev1.Pod) string {
	for _, o := range pod.OwnerReferences {
		if o.Controller != nil && *o.Controller && o.Kind != "DaemonSet" {
			return string(o.UID) + "\x00" + specKey(pod)
		}
	}
	return ""
}

// option simulates new nodes of g for the classes: which classes a new
// node takes (recording why not for the others), and, unless g cannot grow
// now, how many nodes the pods need (first-fit decreasing).
func (in *ScaleUpInput) option(g *NodeGroup, classes []*podClass, plan *ScaleUpPlan) (Option, bool) {
	if g.Template == nil {
		for _, c := range classes {
			c.reasons[g.ID] = "cannot simulate a new node: " + g.TemplateErr.Error()
		}
		return Option{}, false
	}
	skip := ""
	room := g.Max - g.Target
	switch {
	case room <= 0:
		skip = "max node group size reached"
	default:
		if off, why := in.BackedOff(g.ID); off {
			skip = why
		} else if n, limit := in.Config.Headroom(in.Usage, g.Template, room); n == 0 {
			skip = limit.Why
			plan.Skipped = append(plan.Skipped, limit.Code)
		} else {
			room = n
		}
	}
	probe := in.newNode(g, "template-node-for-"+g.Set.Name)
	in.Snapshot.AddNode(probe)
	var fitting []*podClass
	for _, c := range classes {
		cs := in.Algorithm.PreFilter(c.exemplar.pi, in.Snapshot)
		if f := in.Algorithm.Fits(cs, c.exemplar.pi, probe); f != nil {
			c.reasons[g.ID] = "pod does not fit the template: " + strings.Join(f.Reasons, ", ")
			continue
		}
		// Where the pod would fit, a group that cannot grow says why.
		if skip != "" {
			c.reasons[g.ID] = skip
			continue
		}
		fitting = append(fitting, c)
	}
	in.Snapshot.RemoveNode(probe)
	if len(fitting) == 0 {
		return Option{}, false
	}
	opt := in.binpack(g, fitting, room)
	if opt.NodeCount == 0 {
		return Option{}, false
	}
	for _, c := range fitting {
		c.fits[g.ID] = true
	}
	return opt, true
}

// binpack places the classes' pods on new nodes of g, first-fit with the
// largest pods first, adding at most limit nodes, and returns the option:
// how many nodes took pods and which pods. The snapshot is left as it was.
func (in *ScaleUpInput) binpack(g *NodeGroup, classes []*podClass, limit int) Option {
	alloc := g.Template.Status.Allocatable
	cpu, mem := float64(alloc.Cpu().MilliValue()), float64(alloc.Memory().Value())
	score := func(c *podClass) float64 {
		r := c.exemplar.pi.Requests
		s := 0.0
		if cpu > 0 {
			s += float64(r.MilliCPU) / cpu
		}
		if mem > 0 {
			s += float64(r.Memory) / mem
		}
		return s
	}
	sorted := append([]*podClass(nil), classes...)
	sort.SliceStable(sorted, func(i, j int) bool { return score(sorted[i]) > score(sorted[j]) })
	var added []*algorithm.NodeInfo
	opt := Option{Group: g}
	place := func(p *podEntry) {
		opt.Pods = append(opt.Pods, p.pod)
		opt.MilliCPU += p.pi.Requests.MilliCPU
		opt.Memory += p.pi.Requests.Memory
	}
	type placement struct {
		pi *algorithm.PodInfo
		ni *algorithm.NodeInfo
	}
	var undo []placement
	for _, c := range sorted {
		c.hint = 0
	pods:
		for _, p := range c.pods {
			cs := in.Algorithm.PreFilter(p.pi, in.Snapshot)
			for i := c.hint; i < len(added); i++ {
				if in.Algorithm.Fits(cs, p.pi, added[i]) == nil {
					in.Snapshot.Place(p.pi, added[i])
					undo = append(undo, placement{p.pi, added[i]})
					place(p)
					c.hint = i
					continue pods
				}
			}
			if len(added) >= limit {
				break
			}
			ni := in.newNode(g, fmt.Sprintf("%s-new-%d", g.Set.Name, len(added)))
			in.Snapshot.AddNode(ni)
			cs = in.Algorithm.PreFilter(p.pi, in.Snapshot)
			if in.Algorithm.Fits(cs, p.pi, ni) != nil {
				// Not even an empty node takes it (its own pods' anti-affinity,
				// say): the rest of the class will not fit either.
				in.Snapshot.RemoveNode(ni)
				break
			}
			added = append(added, ni)
			in.Snapshot.Place(p.pi, ni)
			undo = append(undo, placement{p.pi, ni})
			place(p)
			c.hint = len(added) - 1
		}
	}
	for i := len(undo) - 1; i >= 0; i-- {
		in.Snapshot.Unplace(undo[i].pi, undo[i].ni)
	}
	for _, ni := range added {
		in.Snapshot.RemoveNode(ni)
	}
	opt.NodeCount = len(added)
	return opt
}

// reasonsMessage aggregates why node groups did not help, as upstream's
// NotTriggerScaleUp events do: "1 max node group size reached, 2 pod does
// not fit the template: Insufficient cpu".
func reasonsMessage(reasons map[string]string) string {
	if len(reasons) == 0 {
		return "no node group can be scaled (no MachineSet has a MachineAutoscaler)"
	}
	counts := map[string]int{}
	for _, r := range reasons {
		counts[r]++
	}
	parts := make([]string, 0, len(counts))
	for r, n := range counts {
		parts = append(parts, fmt.Sprintf("%d %s", n, r))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
