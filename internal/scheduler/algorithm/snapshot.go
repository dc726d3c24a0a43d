package algorithm

import (
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
)

// Listers give the predicates and priorities read access to the objects
// besides nodes and pods they consult. Any of them may be nil, meaning no
// such objects.
type Listers struct {
	Services               corelisters.ServiceLister
	ReplicationControllers corelisters.ReplicationControllerLister
	ReplicaSets            appslisters.ReplicaSetLister
	StatefulSets           appslisters.StatefulSetLister
	PersistentVolumeClaims corelisters.PersistentVolumeClaimLister
	PersistentVolumes      corelisters.PersistentVolumeLister
	StorageClasses         storagelisters.StorageClassLister
	Namespaces             corelisters.NamespaceLister
	// PodDisruptionBudgets are the budgets preemption tries not to
	// violate.
	PodDisruptionBudgets policylisters.PodDisruptionBudgetLister
	// CSINodes give each node's attach limit per CSI driver.
	CSINodes storagelisters.CSINodeLister
}

// Snapshot is an immutable view of the cluster that one scheduling
// decision reads.
type Snapshot struct {
	Nodes []*NodeInfo
	// Pods indexes the pods on the nodes for inter-pod affinity.
	Pods *PodIndex
	// AssumedVolumes are volumes decisions reserved for claims (volume
	// name to claim namespace/name) that the API does not show bound yet:
	// no other claim gets them.
	AssumedVolumes map[string]string
	// Nominated are the pods waiting for room preemption makes for them,
	// by the node they are nominated to (status.nominatedNodeName).
	Nominated map[string][]*PodInfo
	Listers

	// byName indexes Nodes, built on first use; usedClaims are the claims
	// its pods mount, also built on first use.
	byName     map[string]*NodeInfo
	usedClaims map[string]bool

	nsMu     sync.Mutex
	nsLabels map[string]labelsSet
}

// NewSnapshot indexes nodes and their pods.
func NewSnapshot(nodes []*NodeInfo, l Listers) *Snapshot {
	s := &Snapshot{Nodes: nodes, Pods: NewPodIndex(), Listers: l, nsLabels: map[string]labelsSet{}}
	for _, n := range nodes {
		for _, p := range n.Pods {
			s.Pods.Add(p, n)
		}
	}
	return s
}

// NamespaceLabels returns the labels of a namespace (empty when unknown).
func (s *Snapshot) NamespaceLabels(ns string) labels.Set {
	s.nsMu.Lock()
	defer s.nsMu.Unlock()
	if l, ok := s.nsLabels[ns]; ok {
		return l
	}
	var l labels.Set
	if s.Namespaces != nil {
		if n, err := s.Namespaces.Get(ns); err == nil {
			l = labels.Set(n.Labels)
		}
	}
	s.nsLabels[ns] = l
	return l
}

// podServices returns the services whose selector matches the pod, by name.
func (s *Snapshot) podServices(pod *corev1.Pod) []*corev1.Service {
	if s.Services == nil {
		return nil
	}
	svcs, err := s.Services.Services(pod.Namespace).List(labels.Everything())
	if err != nil {
		return nil
	}
	podLabels := labels.Set(pod.Labels)
	var out []*corev1.Service
	for _, svc := range svcs {
		if len(svc.Spec.Selector) > 0 && labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
			out = append(out, svc)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// podSelectors returns the selectors of the services, replication
// controllers, replica sets and stateful sets a pod belongs to. onlyServices
// limits it to services (ServiceSpreadingPriority).
func (s *Snapshot) podSelectors(pod *corev1.Pod, onlyServices bool) []labels.Selector {
	var out []labels.Selector
	for _, svc := range s.podServices(pod) {
		out = append(out, labels.SelectorFromSet(svc.Spec.Selector))
	}
	if onlyServices {
		return out
	}
	if s.ReplicationControllers != nil {
		if rcs, err := s.ReplicationControllers.GetPodControllers(pod); err == nil {
			for _, rc := range rcs {
				out = append(out, labels.SelectorFromSet(rc.Spec.Selector))
			}
		}
	}
	if s.ReplicaSets != nil {
		if rss, err := s.ReplicaSets.GetPodReplicaSets(pod); err == nil {
			for _, rs := range rss {
				if sel, err := labelSelector(rs.Spec.Selector); err == nil {
					out = append(out, sel)
				}
			}
		}
	}
	if s.StatefulSets != nil {
		if sss, err := s.StatefulSets.GetPodStatefulSets(pod); err == nil {
			for _, ss := range sss {
				if sel, err := labelSelector(ss.Spec.Selector); err == nil {
					out = append(out, sel)
				}
			}
		}
	}
	return out
}

// firstServiceSelector returns the selector of the first service (by name)
// a pod belongs to, as the legacy service (anti-)affinity functions used;
// nil when it belongs to none.
func (s *Snapshot) firstServiceSelector(pod *corev1.Pod) labels.Selector {
	svcs := s.podServices(pod)
	if len(svcs) == 0 {
		return nil
	}
	return labels.SelectorFromSet(svcs[0].Spec.Selector)
}

type labelsSet = labels.Set

// ListersFrom are the listers of a shared informer factory, with their
// informers registered so that starting the factory starts them.
func ListersFrom(f informers.SharedInformerFactory) (Listers, []cache.InformerSynced) {
	l := Listers{
		Services:               f.Core().V1().Services().Lister(),
		ReplicationControllers: f.Core().V1().ReplicationControllers().Lister(),
		ReplicaSets:            f.Apps().V1().ReplicaSets().Lister(),
		StatefulSets:           f.Apps().V1().StatefulSets().Lister(),
		PersistentVolumeClaims: f.Core().V1().PersistentVolumeClaims().Lister(),
		PersistentVolumes:      f.Core().V1().PersistentVolumes().Lister(),
		StorageClasses:         f.Storage().V1().StorageClasses().Lister(),
		Namespaces:             f.Core().V1().Namespaces().Lister(),
		PodDisruptionBudgets:   f.Policy().V1().PodDisruptionBudgets().Lister(),
		CSINodes:               f.Storage().V1().CSINodes().Lister(),
	}
	var synced []cache.InformerSynced
	for _, inf := range []cache.SharedIndexInformer{
		f.Core().V1().Services().Informer(), f.Core().V1().ReplicationControllers().Informer(),
		f.Apps().V1().ReplicaSets().Informer(), f.Apps().V1().StatefulSets().Informer(),
		f.Core().V1().PersistentVolumeClaims().Informer(), f.Core().V1().PersistentVolumes().Informer(),
		f.Storage().V1().StorageClasses().Informer(), f.Core().V1().Namespaces().Informer(),
		f.Policy().V1().PodDisruptionBudgets().Informer(), f.Storage().V1().CSINodes().Informer(),
	} {
		synced = append(synced, inf.HasSynced)
	}
	return l, synced
}

// claimInUse reports whether a pod on a node of the snapshot mounts the
// claim ns/name (ReadWriteOncePod lets only one do so).
func (s *Snapshot) claimInUse(ns, name string) bool {
	s.nsMu.Lock()
	defer s.nsMu.Unlock()
	if s.usedClaims == nil {
		s.usedClaims = map[string]bool{}
		for _, ni := range s.Nodes {
			for _, p := range ni.Pods {
				for i := range p.Pod.Spec.Volumes {
					if c := p.Pod.Spec.Volumes[i].PersistentVolumeClaim; c != nil {
						s.usedClaims[p.Pod.Namespace+"/"+c.ClaimName] = true
					}
				}
			}
		}
	}
	return s.usedClaims[ns+"/"+name]
}
