package differential

import (
	"context"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/capstan-dev/capstan/internal/scheduler/algorithm"
	"github.com/capstan-dev/capstan/internal/scheduler/policy"
)

// capstanRun runs capstan's predicates, and its preemption when the pod
// fits nowhere, on a case, with the Policy of upstream's default profile.
func capstanRun(ctx context.Context, c *Case) (*verdict, error) {
	alg, err := algorithm.New(policy.UpstreamDefault(), 1)
	if err != nil {
		return nil, err
	}
	// The listers read stores filled directly: nothing here follows
	// events.
	f := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	listers, _ := algorithm.ListersFrom(f)
	for _, err := range []error{
		fill(f.Core().V1().Namespaces().Informer().GetStore(), c.Namespaces),
		fill(f.Policy().V1().PodDisruptionBudgets().Informer().GetStore(), c.PDBs),
		fill(f.Core().V1().PersistentVolumeClaims().Informer().GetStore(), c.Claims),
		fill(f.Core().V1().PersistentVolumes().Informer().GetStore(), c.Volumes),
		fill(f.Storage().V1().StorageClasses().Informer().GetStore(), c.Classes),
		fill(f.Storage().V1().CSINodes().Informer().GetStore(), c.CSINodes),
		fill(f.Core().V1().Services().Informer().GetStore(), c.Services),
		fill(f.Apps().V1().ReplicaSets().Informer().GetStore(), c.ReplicaSets),
	} {
		if err != nil {
			return nil, err
		}
	}
	infos := make([]*algorithm.NodeInfo, 0, len(c.Nodes))
	byName := map[string]*algorithm.NodeInfo{}
	for _, n := range c.Nodes {
		ni := alg.NewNodeInfoFor(n)
		infos = append(infos, ni)
		byName[n.Name] = ni
	}
	for _, p := range c.Pods {
		byName[p.Spec.NodeName].AddPod(algorithm.NewPodInfo(p))
	}
	snap := algorithm.NewSnapshot(infos, listers)
	snap.Nominated = map[string][]*algorithm.PodInfo{}
	for _, p := range c.Nominated {
		snap.Nominated[p.Status.NominatedNodeName] = append(snap.Nominated[p.Status.NominatedNodeName], algorithm.NewPodInfo(p))
	}
	d := alg.Schedule(ctx, c.Pod, snap, algorithm.Options{Explain: true})
	v := &verdict{feasible: map[string]bool{}, unresolvable: map[string]bool{}, reasons: map[string]string{}}
	for _, s := range d.Scored {
		v.feasible[s.Node] = true
	}
	for name, f := range d.Filtered {
		v.reasons[name] = f.Predicate + ": " + strings.Join(f.Reasons, ", ")
		if f.Unresolvable {
			v.unresolvable[name] = true
		}
	}
	if len(v.feasible) > 0 {
		return v, nil
	}
	p := alg.Preempt(ctx, d, snap, 0)
	v.eligible = !p.NotEligible
	if len(p.Candidates) > 0 {
		v.candidates = map[string]candidate{}
		for _, cand := range p.Candidates {
			var names []string
			for _, victim := range cand.Victims {
				names = append(names, victim.Name)
			}
			v.candidates[cand.Node] = candidate{victims: names, violations: cand.PDBViolations}
		}
	}
	v.chosen = p.Node
	v.message = p.Message
	for n, f := range p.Failed {
		v.reasons["preemption "+n] = f.Predicate + ": " + strings.Join(f.Reasons, ", ")
	}
	return v, nil
}

// fill adds objects to a lister's store.
func fill[T any](store cache.Store, objs []T) error {
	for _, o := range objs {
		if err := store.Add(o); err != nil {
			return err
		}
	}
	return nil
}

// describe prints a case's pod and cluster for a failure message.
func describe(c *Case) string {
	var b strings.Builder
	b.WriteString("pod: " + podLine(c.Pod) + "\n")
	for _, n := range c.Nodes {
		b.WriteString("node " + n.Name + ": labels " + mapLine(n.Labels) + " taints " + taintsLine(n.Spec.Taints) +
			" alloc cpu=" + n.Status.Allocatable.Cpu().String() + " mem=" + n.Status.Allocatable.Memory().String() +
			" pods=" + n.Status.Allocatable.Pods().String())
		if n.Spec.Unschedulable {
			b.WriteString(" unschedulable")
		}
		b.WriteString("\n")
		for _, p := range c.Pods {
			if p.Spec.NodeName == n.Name {
				b.WriteString("  " + podLine(p) + "\n")
			}
		}
	}
	for _, p := range c.Nominated {
		b.WriteString("nominated to " + p.Status.NominatedNodeName + ": " + podLine(p) + "\n")
	}
	for _, p := range c.PDBs {
		b.WriteString("pdb " + p.Namespace + "/" + p.Name + " " + mapLine(p.Spec.Selector.MatchLabels) + " allowed " + strconv.Itoa(int(p.Status.DisruptionsAllowed)) + "\n")
	}
	for _, p := range c.Claims {
		b.WriteString("claim " + p.Namespace + "/" + p.Name + " volume " + p.Spec.VolumeName + "\n")
	}
	return b.String()
}

func podLine(p *corev1.Pod) string {
	s := p.Namespace + "/" + p.Name + " labels " + mapLine(p.Labels)
	if p.Spec.Priority != nil {
		s += " prio " + strconv.Itoa(int(*p.Spec.Priority))
	}
	for _, c := range p.Spec.Containers {
		s += " req " + c.Resources.Requests.Cpu().String() + "/" + c.Resources.Requests.Memory().String()
	}
	if p.DeletionTimestamp != nil {
		s += " terminating"
	}
	if p.Spec.Affinity != nil {
		s += " affinity"
	}
	if len(p.Spec.TopologySpreadConstraints) > 0 {
		s += " spread"
	}
	if len(p.Spec.Volumes) > 0 {
		s += " volumes"
	}
	return s
}

func mapLine(m map[string]string) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, k+"="+v)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func taintsLine(ts []corev1.Taint) string {
	var parts []string
	for _, t := range ts {
		parts = append(parts, t.ToString())
	}
	return "[" + strings.Join(parts, ",") + "]"
}
