// Package explain computes what `capstan explain` and the console show:
// the scheduler's decision for a pod, node by node, on the cluster as it
// is now, and the cluster autoscaler's view. Both are read with the
// caller's client, so what it may not read it cannot see explained.
package explain

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/capstan-dev/capstan/internal/autoscaler"
	"github.com/capstan-dev/capstan/internal/scheduler/algorithm"
	"github.com/capstan-dev/capstan/internal/scheduler/policy"
)

// PodDecision is the scheduler's decision for a pod, every predicate on
// every node and every priority's score.
type PodDecision struct {
	Pod       *corev1.Pod
	Algorithm *algorithm.Algorithm
	Decision  *algorithm.Decision
	// Preemption is what the scheduler's preemption concludes for a
	// pending pod that fits nowhere (nil otherwise).
	Preemption *algorithm.Preemption
}

// Preempting says in a line what preemption does for the pod: where it
// makes room and whom it takes, or why it does not help.
func (d *PodDecision) Preempting() string {
	p := d.Preemption
	switch {
	case p == nil:
		return ""
	case p.Node == "":
		return strings.TrimPrefix(p.Message, "preemption: ")
	}
	victims := make([]string, len(p.Victims))
	for i, v := range p.Victims {
		victims[i] = v.Namespace + "/" + v.Name
	}
	msg := fmt.Sprintf("room on node %s by preempting %s", p.Node, strings.Join(victims, ", "))
	if p.PDBViolations > 0 {
		msg += fmt.Sprintf(" (%d against their disruption budget)", p.PDBViolations)
	}
	return msg
}

// Waiting says where a pod nominated by an earlier preemption waits, ""
// when it is not.
func (d *PodDecision) Waiting() string {
	if n := d.Pod.Status.NominatedNodeName; n != "" && d.Pod.Spec.NodeName == "" {
		return "nominated to node " + n + ": it waits there for the pods preempted for it to go"
	}
	return ""
}

// decide runs the decision, and preemption for a pending pod that fits
// nowhere, as the scheduler would.
func decide(ctx context.Context, alg *algorithm.Algorithm, pod *corev1.Pod, snap *algorithm.Snapshot) *PodDecision {
	candidate := pod.DeepCopy()
	candidate.Spec.NodeName = ""
	d := &PodDecision{Pod: pod, Algorithm: alg, Decision: alg.Schedule(ctx, candidate, snap, algorithm.Options{Explain: true})}
	if pod.Spec.NodeName == "" && !d.Decision.Feasible() {
		d.Preemption = alg.Preempt(ctx, d.Decision, snap, 0)
	}
	return d
}

// Pending says whether the pod waits for a node that does not exist.
func (d *PodDecision) Pending() bool { return d.Pod.Spec.NodeName == "" && !d.Decision.Feasible() }

// Pod runs the scheduler's own decision code for a pod; a scheduled pod
// is evaluated as if it were not yet on its node.
func Pod(ctx context.Context, client kubernetes.Interface, p *policy.Policy, ns, name string) (*PodDecision, error) {
	pod, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", ns, name, err)
	}
	alg, err := algorithm.New(p, uint64(time.Now().UnixNano()))
	if err != nil {
		return nil, err
	}
	alg.PercentageOfNodesToScore = 100
	snap, err := Snapshot(ctx, client, pod)
	if err != nil {
		return nil, err
	}
	return decide(ctx, alg, pod, snap), nil
}

// Pending is the scheduler's decision for each pending pod, the oldest
// limit of them, on one snapshot of the cluster: what a page that shows
// every pending pod asks, at the cost of one read of the cluster however
// many pods wait. Total is how many pods are pending.
func Pending(ctx context.Context, client kubernetes.Interface, p *policy.Policy, limit int) (decisions []*PodDecision, total int, err error) {
	list, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=,status.phase=Pending"})
	if err != nil {
		return nil, 0, fmt.Errorf("pending pods: %w", err)
	}
	pods := list.Items
	sort.SliceStable(pods, func(i, j int) bool {
		a, b := pods[i].CreationTimestamp, pods[j].CreationTimestamp
		if !a.Equal(&b) {
			return a.Before(&b)
		}
		return pods[i].Namespace+"/"+pods[i].Name < pods[j].Namespace+"/"+pods[j].Name
	})
	total = len(pods)
	if len(pods) > limit {
		pods = pods[:limit]
	}
	if len(pods) == 0 {
		return nil, total, nil
	}
	alg, err := algorithm.New(p, uint64(time.Now().UnixNano()))
	if err != nil {
		return nil, 0, err
	}
	alg.PercentageOfNodesToScore = 100
	snap, err := Snapshot(ctx, client, nil)
	if err != nil {
		return nil, 0, err
	}
	for i := range pods {
		decisions = append(decisions, decide(ctx, alg, &pods[i], snap))
	}
	return decisions, total, nil
}

// Snapshot reads nodes, assigned pods and the objects the priorities
// consult, leaving out skip (the pod being explained).
func Snapshot(ctx context.Context, client kubernetes.Interface, skip *corev1.Pod) (*algorithm.Snapshot, error) {
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(crcache.TransformStripManagedFields()))
	l, _ := algorithm.ListersFrom(f)
	nodeLister, podLister := f.Core().V1().Nodes().Lister(), f.Core().V1().Pods().Lister()
	infCtx, stop := context.WithCancel(ctx)
	defer func() { stop(); f.Shutdown() }()
	f.Start(infCtx.Done())
	for typ, ok := range f.WaitForCacheSync(infCtx.Done()) {
		if !ok {
			return nil, fmt.Errorf("reading %v from the cluster: %w", typ, ctx.Err())
		}
	}
	nodes, err := nodeLister.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	infos := make([]*algorithm.NodeInfo, len(nodes))
	byName := map[string]*algorithm.NodeInfo{}
	for i, n := range nodes {
		infos[i] = algorithm.NewNodeInfo(n)
		byName[n.Name] = infos[i]
	}
	pods, err := podLister.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	nominated := map[string][]*algorithm.PodInfo{}
	for _, p := range pods {
		if (skip != nil && p.UID == skip.UID) || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if p.Spec.NodeName == "" {
			// Waiting for room preemption made: the scheduler keeps it.
			if n := p.Status.NominatedNodeName; n != "" && p.DeletionTimestamp == nil {
				nominated[n] = append(nominated[n], algorithm.NewPodInfo(p))
			}
			continue
		}
		if ni := byName[p.Spec.NodeName]; ni != nil {
			ni.AddPod(algorithm.NewPodInfo(p))
		}
	}
	snap := algorithm.NewSnapshot(infos, l)
	snap.Nominated = nominated
	return snap, nil
}

// Autoscaler runs the cluster autoscaler's scale-up and scale-down
// decisions on the cluster as it is now.
func Autoscaler(ctx context.Context, cfg *rest.Config, client kubernetes.Interface, p *policy.Policy) (*autoscaler.Explanation, error) {
	opts := autoscaler.DefaultOptions()
	opts.Policy = p
	return autoscaler.Explain(ctx, cfg, client, opts)
}

// NotMarkedUnschedulable is why the autoscaler does not count a pending
// pod the scheduler has not found unschedulable yet.
const NotMarkedUnschedulable = "the pod is not marked Unschedulable by the scheduler (yet): it does not count for a scale-up"

// NominatedNotCounted is why the autoscaler does not count a pod that
// preemption made room for: it waits on its nominated node, as upstream's
// autoscaler leaves it.
func NominatedNotCounted(node string) string {
	return "the pod waits for the pods preempted for it on node " + node + ": it adds no node"
}

// ScaleUp is the autoscaler's verdict on a pending pod, nil when the pod
// does not count for a scale-up (not marked Unschedulable yet).
func ScaleUp(e *autoscaler.Explanation, ns, name string) *autoscaler.PodVerdict {
	if e == nil || e.ScaleUp == nil {
		return nil
	}
	for _, v := range e.ScaleUp.Verdicts {
		if v.Pod.Namespace == ns && v.Pod.Name == name {
			return v
		}
	}
	return nil
}
