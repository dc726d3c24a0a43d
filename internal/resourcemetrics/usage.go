// Package resourcemetrics serves the resource metrics API (metrics.k8s.io
// v1beta1) for capstan's simulated nodes, as metrics-server does for real
// ones: an aggregated API server that `kubectl top` and the
// HorizontalPodAutoscaler read. The simulated kubelets' usage comes from
// the sim.LoadAnnotation set on pods and workloads.
package resourcemetrics

import (
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/capstan-dev/capstan/internal/sim"
)

// ReasonInvalidLoad is the reason of the Warning events on objects whose
// load annotation cannot be read (their pods then report no usage).
const ReasonInvalidLoad = sim.ReasonInvalidAnnotation

// listers are what the usage model reads.
type listers struct {
	pods         corelisters.PodLister
	nodes        corelisters.NodeLister
	replicaSets  appslisters.ReplicaSetLister
	deployments  appslisters.DeploymentLister
	statefulSets appslisters.StatefulSetLister
}

// model computes what the simulated kubelets measure: each running pod's
// usage and each node's, the sum of its pods'.
type model struct {
	listers
	clock    clock.PassiveClock
	window   time.Duration
	recorder record.EventRecorder

	mu       sync.Mutex
	reported map[string]bool
}

// sample is one scrape of every kubelet.
type sample struct {
	at    metav1.Time
	pods  map[types.NamespacedName]*podSample
	nodes map[string]corev1.ResourceList
}

type podSample struct {
	pod        *corev1.Pod
	containers []containerSample
}

type containerSample struct {
	name  string
	usage corev1.ResourceList
}

var errNotAWorkload = errors.New("not a workload")

// workload is the owner whose load annotation a pod shares.
type workload struct {
	key  string
	obj  runtime.Object
	load string
}

// scrape measures every running pod on a node whose kubelet runs.
func (m *model) scrape() (*sample, error) {
	pods, err := m.pods.List(everything)
	if err != nil {
		return nil, err
	}
	nodes, err := m.nodes.List(everything)
	if err != nil {
		return nil, err
	}
	up := map[string]bool{}
	for _, n := range nodes {
		up[n.Name] = !sim.Stopped(n)
	}
	s := &sample{at: metav1.NewTime(m.clock.Now()), pods: map[types.NamespacedName]*podSample{}, nodes: map[string]corev1.ResourceList{}}
	for name, ok := range up {
		if ok {
			s.nodes[name] = corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(0, resource.DecimalSI), corev1.ResourceMemory: *resource.NewQuantity(0, resource.BinarySI)}
		}
	}
	var running []*corev1.Pod
	for _, p := range pods {
		if p.Status.Phase == corev1.PodRunning && up[p.Spec.NodeName] {
			running = append(running, p)
		}
	}
	// A workload's load is shared by its running pods.
	owners := make([]*workload, len(running))
	share := map[string]int{}
	for i, p := range running {
		if _, own := p.Annotations[sim.LoadAnnotation]; own {
			continue
		}
		if w := m.workloadOf(p); w != nil {
			owners[i] = w
			share[w.key]++
		}
	}
	for i, p := range running {
		var usage corev1.ResourceList
		if v, own := p.Annotations[sim.LoadAnnotation]; own {
			usage = m.parse(p, v)
		} else if w := owners[i]; w != nil {
			usage = sim.ShareLoad(m.parse(w.obj, w.load), share[w.key])
		}
		ps := &podSample{pod: p, containers: splitAmongContainers(p, usage)}
		s.pods[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = ps
		total := s.nodes[p.Spec.NodeName]
		for _, c := range ps.containers {
			for r, q := range c.usage {
				sum := total[r]
				sum.Add(q)
				total[r] = sum
			}
		}
	}
	return s, nil
}

// workloadOf finds the workload at the top of the pod's ownership chain
// (a ReplicaSet's Deployment, a StatefulSet, a ReplicaSet of its own) and
// returns it when it sets a load. The Deployment controller copies the
// Deployment's annotations onto its ReplicaSets: the Deployment's own is
// the one read, shared by the pods of every revision.
func (m *model) workloadOf(p *corev1.Pod) *workload {
	var top runtime.Object
	var topMeta metav1.Object
	var key string
	ref := metav1.GetControllerOf(p)
	for depth := 0; ref != nil && depth < 2; depth++ {
		var obj metav1.Object
		var err error
		switch ref.Kind {
		case "ReplicaSet":
			obj, err = m.replicaSets.ReplicaSets(p.Namespace).Get(ref.Name)
		case "Deployment":
			obj, err = m.deployments.Deployments(p.Namespace).Get(ref.Name)
		case "StatefulSet":
			obj, err = m.statefulSets.StatefulSets(p.Namespace).Get(ref.Name)
		default:
			err = errNotAWorkload
		}
		if err != nil || obj.GetUID() != ref.UID {
			break
		}
		top, topMeta, key = obj.(runtime.Object), obj, ref.Kind+"/"+p.Namespace+"/"+ref.Name
		ref = metav1.GetControllerOf(obj)
	}
	if topMeta == nil {
		return nil
	}
	v, ok := topMeta.GetAnnotations()[sim.LoadAnnotation]
	if !ok {
		return nil
	}
	return &workload{key: key, obj: top, load: v}
}

// parse reads a load annotation; a bad one counts as no load and is
// reported once per object and value.
func (m *model) parse(obj runtime.Object, v string) corev1.ResourceList {
	load, err := sim.ParseLoad(v)
	if err == nil {
		return load
	}
	if acc, aerr := metav1Accessor(obj); aerr == nil {
		key := fmt.Sprintf("%s/%s", acc.GetUID(), v)
		m.mu.Lock()
		seen := m.reported[key]
		m.reported[key] = true
		m.mu.Unlock()
		if !seen {
			m.recorder.Event(obj, corev1.EventTypeWarning, ReasonInvalidLoad, err.Error())
		}
	}
	return nil
}

// splitAmongContainers gives each of the pod's containers an equal part
// of its usage; a pod without load uses nothing.
func splitAmongContainers(p *corev1.Pod, usage corev1.ResourceList) []containerSample {
	n := len(p.Spec.Containers)
	part := sim.ShareLoad(usage, n)
	out := make([]containerSample, n)
	for i, c := range p.Spec.Containers {
		u := corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewMilliQuantity(0, resource.DecimalSI),
			corev1.ResourceMemory: *resource.NewQuantity(0, resource.BinarySI),
		}
		for r, q := range part {
			u[r] = q
		}
		out[i] = containerSample{name: c.Name, usage: u}
	}
	return out
}
