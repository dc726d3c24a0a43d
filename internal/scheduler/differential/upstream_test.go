package differential

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	resourceslicetracker "k8s.io/dynamic-resource-allocation/resourceslice/tracker"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultpreemption"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodevolumelimits"
	"k8s.io/kubernetes/pkg/scheduler/framework/preemption"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
	"k8s.io/kubernetes/pkg/scheduler/util/assumecache"
)

// The upstream side: kube-scheduler's own framework, built from the default
// profile of its latest configuration with its in-tree plugins, over a
// snapshot of the case's cluster. Nothing of capstan is involved.

// verdict is one scheduler's answer for one pod.
type verdict struct {
	// feasible are the nodes the filters pass; unresolvable, of the
	// others, those preemption would not try.
	feasible, unresolvable map[string]bool
	// reasons say why each other node failed, for failure messages.
	reasons map[string]string
	// preemption, when the pod fits nowhere.
	eligible   bool
	candidates map[string]candidate
	chosen     string
	// message is capstan's preemption message; tiedWith is upstream's
	// answer to whether a candidate is as good as its choice.
	message  string
	tiedWith func(node string) bool
}

type candidate struct {
	victims    []string
	violations int
}

// nominator is the pod nominator of the upstream framework: the pods a
// case says are nominated, by node (the scheduling queue keeps them so).
type nominator struct {
	byNode map[string][]fwk.PodInfo
}

func (n *nominator) AddNominatedPod(klog.Logger, fwk.PodInfo, *fwk.NominatingInfo) {}
func (n *nominator) DeleteNominatedPodIfExists(*corev1.Pod)                        {}
func (n *nominator) UpdateNominatedPod(klog.Logger, *corev1.Pod, fwk.PodInfo)      {}
func (n *nominator) NominatedPodsForNode(node string) []fwk.PodInfo                { return n.byNode[node] }

var (
	draOnce    sync.Once
	draManager fwk.SharedDRAManager
	draErr     error
)

// sharedDRAManager is upstream's DRA manager over an empty cluster: the
// cases' claims never exist, and no node publishes devices, as in capstan.
func sharedDRAManager() (fwk.SharedDRAManager, error) {
	draOnce.Do(func() {
		ctx := context.Background()
		client := fake.NewClientset()
		f := informers.NewSharedInformerFactory(client, 0)
		claims := assumecache.NewAssumeCache(klog.Background(), f.Resource().V1().ResourceClaims().Informer(), "ResourceClaim", "", nil)
		tracker, err := resourceslicetracker.StartTracker(ctx, resourceslicetracker.Options{SliceInformer: f.Resource().V1().ResourceSlices(), KubeClient: client})
		if err != nil {
			draErr = err
			return
		}
		f.Start(ctx.Done())
		f.WaitForCacheSync(ctx.Done())
		draManager = dynamicresources.NewDRAManager(ctx, claims, tracker, f)
	})
	return draManager, draErr
}

// upstreamRun runs kube-scheduler's filters, and its preemption when the
// pod fits nowhere, on a case.
func upstreamRun(ctx context.Context, c *Case) (*verdict, error) {
	metrics.Register()
	cfg, err := latest.Default()
	if err != nil {
		return nil, err
	}
	profile := &cfg.Profiles[0]
	objs := c.objects()
	client := fake.NewClientset(objs...)
	f := informers.NewSharedInformerFactory(client, 0)
	dra, err := sharedDRAManager()
	if err != nil {
		return nil, err
	}
	var nodes []*corev1.Node
	var pods []*corev1.Pod
	for _, n := range c.Nodes {
		nodes = append(nodes, n)
	}
	for _, p := range c.Pods {
		pods = append(pods, p)
	}
	snapshot := internalcache.NewSnapshot(pods, nodes)
	nom := &nominator{byNode: map[string][]fwk.PodInfo{}}
	for _, p := range c.Nominated {
		pi, err := framework.NewPodInfo(p)
		if err != nil {
			return nil, err
		}
		nom.byNode[p.Status.NominatedNodeName] = append(nom.byNode[p.Status.NominatedNodeName], pi)
	}
	fw, err := frameworkruntime.NewFramework(ctx, plugins.NewInTreeRegistry(), profile,
		frameworkruntime.WithClientSet(client),
		frameworkruntime.WithInformerFactory(f),
		frameworkruntime.WithSnapshotSharedLister(snapshot),
		frameworkruntime.WithSharedDRAManager(dra),
		frameworkruntime.WithSharedCSIManager(nodevolumelimits.NewCSIManager(f.Storage().V1().CSINodes().Lister())),
		frameworkruntime.WithPodNominator(nom),
		frameworkruntime.WithParallelism(1),
	)
	if err != nil {
		return nil, fmt.Errorf("upstream framework: %w", err)
	}
	defer fw.Close()
	pl, err := defaultpreemption.New(ctx, &config.DefaultPreemptionArgs{MinCandidateNodesPercentage: 10, MinCandidateNodesAbsolute: 100}, fw,
		feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate))
	if err != nil {
		return nil, fmt.Errorf("upstream DefaultPreemption: %w", err)
	}
	// Informers: the plugins' listers read their stores; the volume
	// binder's caches follow their events, so a case with claims waits
	// until the binder sees every claim.
	informersCtx, stop := context.WithCancel(ctx)
	f.Start(informersCtx.Done())
	defer f.Shutdown()
	defer stop()
	f.WaitForCacheSync(informersCtx.Done())
	if len(c.Claims) > 0 {
		if err := waitVolumeBinder(ctx, fw, c); err != nil {
			return nil, err
		}
	}
	return upstreamDecide(ctx, fw, pl, snapshot, c)
}

// waitVolumeBinder waits until upstream's volume binder has every claim and
// volume of the case in its caches: a pod mounting each claim gets past
// PreFilter without "error getting PVC" and past Filter without an error.
func waitVolumeBinder(ctx context.Context, fw framework.Framework, c *Case) error {
	probe := &corev1.Pod{}
	probe.Name, probe.Namespace, probe.UID = "binder-probe", c.Claims[0].Namespace, "binder-probe"
	return wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, pvc := range c.Claims {
			probe.Namespace = pvc.Namespace
			probe.Spec.Volumes = []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.Name}}}}
			state := framework.NewCycleState()
			_, s, _ := fw.RunPreFilterPlugins(ctx, state, probe)
			if s.Code() == fwk.Error {
				return false, nil
			}
			if !s.IsSuccess() {
				continue
			}
			for _, n := range c.Nodes {
				ni, err := fw.SnapshotSharedLister().NodeInfos().Get(n.Name)
				if err != nil {
					return false, err
				}
				if st := fw.RunFilterPlugins(ctx, state, probe, ni); st.Code() == fwk.Error {
					return false, nil
				}
			}
		}
		return true, nil
	})
}

func upstreamDecide(ctx context.Context, fw framework.Framework, pl *defaultpreemption.DefaultPreemption, snapshot *internalcache.Snapshot, c *Case) (*verdict, error) {
	v := &verdict{feasible: map[string]bool{}, unresolvable: map[string]bool{}, reasons: map[string]string{}}
	pod := c.Pod
	state := framework.NewCycleState()
	preRes, s, _ := fw.RunPreFilterPlugins(ctx, state, pod)
	statuses := framework.NewDefaultNodeToStatus()
	all, err := snapshot.NodeInfos().List()
	if err != nil {
		return nil, err
	}
	switch {
	case s.Code() == fwk.Error:
		return nil, fmt.Errorf("upstream PreFilter: %v", s.AsError())
	case !s.IsSuccess():
		statuses.SetAbsentNodesStatus(s)
		for _, ni := range all {
			v.reasons[ni.Node().Name] = "PreFilter " + s.Plugin() + ": " + s.Message()
			if s.Code() == fwk.UnschedulableAndUnresolvable {
				v.unresolvable[ni.Node().Name] = true
			}
		}
	default:
		for _, ni := range all {
			name := ni.Node().Name
			if !preRes.AllNodes() && !preRes.NodeNames.Has(name) {
				st := fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "node(s) didn't satisfy plugin(s)")
				statuses.Set(name, st)
				v.unresolvable[name] = true
				continue
			}
			st := fw.RunFilterPluginsWithNominatedPods(ctx, state, pod, ni)
			switch {
			case st.IsSuccess():
				v.feasible[name] = true
			case st.Code() == fwk.Error:
				return nil, fmt.Errorf("upstream Filter on %s: %v", name, st.AsError())
			default:
				v.reasons[name] = st.Plugin() + ": " + st.Message()
				statuses.Set(name, st)
				if st.Code() == fwk.UnschedulableAndUnresolvable {
					v.unresolvable[name] = true
				}
			}
		}
	}
	if len(v.feasible) > 0 {
		return v, nil
	}
	nominatedStatus := statuses.Get(pod.Status.NominatedNodeName)
	v.eligible, _ = pl.PodEligibleToPreemptOthers(ctx, pod, nominatedStatus)
	if !v.eligible {
		return v, nil
	}
	potential, err := statuses.NodesForStatusCode(snapshot.NodeInfos(), fwk.Unschedulable)
	if err != nil {
		return nil, err
	}
	if len(potential) == 0 {
		return v, nil
	}
	// Every potential node is tried (the cases are under 100 nodes), from
	// the first, in the snapshot's order.
	pdbs, err := fw.SharedInformerFactory().Policy().V1().PodDisruptionBudgets().Lister().List(labels.Everything())
	if err != nil {
		return nil, err
	}
	cands, _, err := pl.Evaluator.DryRunPreemption(ctx, state, pod, potential, pdbs, 0, int32(len(potential)))
	if err != nil {
		return nil, fmt.Errorf("upstream DryRunPreemption: %w", err)
	}
	v.candidates = map[string]candidate{}
	for _, cand := range cands {
		var names []string
		for _, p := range cand.Victims().Pods {
			names = append(names, p.Name)
		}
		v.candidates[cand.Name()] = candidate{victims: names, violations: int(cand.Victims().NumPDBViolations)}
	}
	best := pl.Evaluator.SelectCandidate(ctx, cands)
	if best == nil {
		return v, nil
	}
	v.chosen = best.Name()
	// Whether upstream's selection cannot tell another candidate from its
	// choice: given just the two, it picks either (its last tie-break is
	// a map's order); asked often enough, a strict preference always
	// answers the same.
	v.tiedWith = func(node string) bool {
		var other preemption.Candidate
		for _, c := range cands {
			if c.Name() == node {
				other = c
			}
		}
		if other == nil {
			return false
		}
		seen := map[string]bool{}
		for range 64 {
			seen[pl.Evaluator.SelectCandidate(ctx, []preemption.Candidate{best, other}).Name()] = true
		}
		return len(seen) == 2
	}
	return v, nil
}

// sortedKeys lists a set.
func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
