package scheduler

import (
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"

	"github.com/capstan-dev/capstan/internal/scheduler/algorithm"
)

// nodeCache is the scheduler's incremental view of nodes and the pods
// assigned to them, updated in place from informer events and from the
// scheduler's own assumptions (pods it bound but has not yet seen bound).
// A decision holds the lock for its whole duration and reads the cache
// directly: there is no per-pod copy.
type nodeCache struct {
	mu sync.Mutex
	// infos holds every node seen, and placeholders for nodes that pods
	// name but that are not (yet) known.
	infos map[string]*algorithm.NodeInfo
	// list and index are the nodes that exist, for snapshots.
	list  []*algorithm.NodeInfo
	index map[string]*algorithm.NodeInfo
	// podNode maps each accounted pod to its node.
	podNode map[types.UID]string
	// pods indexes the accounted pods for inter-pod affinity.
	pods *algorithm.PodIndex
	// assumed are pods this scheduler placed and has not yet observed
	// bound.
	assumed map[types.UID]*assumption
	// labelKeys are the label keys the Policy reads.
	labelKeys []string
	// volumes are volumes reserved by decisions for claims (volume name to
	// claim namespace/name) until the API shows them bound: the next
	// decisions never give them to another claim.
	volumes map[string]string
	// nominated are the pending pods preemption made room for, by the node
	// they wait for, as decisions read them; nominatedOn says where each
	// is.
	nominated   map[string][]*algorithm.PodInfo
	nominatedOn map[types.UID]string
}

// assumedPodExpiry is how long after its binding finished an assumed pod
// that never shows up bound is kept, as the legacy scheduler did (its
// cache TTL): then its resources are given back.
const assumedPodExpiry = 15 * time.Minute

// assumption is a pod the scheduler placed before the API confirmed it.
type assumption struct {
	pod *corev1.Pod
	// volumes are those reserved for the pod's claims.
	volumes []string
	// deadline is set when the binding finished: the pod is forgotten
	// then if the informer has not shown it bound.
	deadline time.Time
}

// newNodeCache makes a cache whose nodes keep at hand their values of the
// label keys the Policy reads.
func newNodeCache(labelKeys []string) *nodeCache {
	return &nodeCache{
		labelKeys: labelKeys,
		infos:     map[string]*algorithm.NodeInfo{},
		index:     map[string]*algorithm.NodeInfo{},
		podNode:   map[types.UID]string{},
		pods:      algorithm.NewPodIndex(),
		assumed:   map[types.UID]*assumption{},
		volumes:   map[string]string{},

		nominated:   map[string][]*algorithm.PodInfo{},
		nominatedOn: map[types.UID]string{},
	}
}

// nominate records that pod waits for room on node (status
// .nominatedNodeName, or the scheduler's own preemption before the API
// shows it); an empty node forgets any nomination.
func (c *nodeCache) nominate(pod *corev1.Pod, node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nominateLocked(pod, node)
}

func (c *nodeCache) nominateLocked(pod *corev1.Pod, node string) {
	if old, ok := c.nominatedOn[pod.UID]; ok {
		pods := slices.DeleteFunc(c.nominated[old], func(pi *algorithm.PodInfo) bool { return pi.Pod.UID == pod.UID })
		if len(pods) == 0 {
			delete(c.nominated, old)
		} else {
			c.nominated[old] = pods
		}
		delete(c.nominatedOn, pod.UID)
	}
	if node == "" {
		return
	}
	c.nominated[node] = append(c.nominated[node], algorithm.NewPodInfo(pod))
	c.nominatedOn[pod.UID] = node
}

// nominatedBelow returns the pods nominated to node with a priority below
// prio: a preemption there takes the room they counted on.
func (c *nodeCache) nominatedBelow(node string, prio int32) []*corev1.Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*corev1.Pod
	for _, pi := range c.nominated[node] {
		if corev1helpers.PodPriority(pi.Pod) < prio {
			out = append(out, pi.Pod)
		}
	}
	return out
}

func (c *nodeCache) info(name string) *algorithm.NodeInfo {
	ni := c.infos[name]
	if ni == nil {
		ni = &algorithm.NodeInfo{}
		ni.UseLabelKeys(c.labelKeys)
		c.infos[name] = ni
	}
	return ni
}

func (c *nodeCache) setNode(node *corev1.Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ni := c.info(node.Name)
	if ni.Node == nil {
		c.list = append(c.list, ni)
		c.index[node.Name] = ni
	}
	ni.SetNode(node)
}

func (c *nodeCache) removeNode(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ni := c.infos[name]
	if ni == nil || ni.Node == nil {
		return
	}
	for i, x := range c.list {
		if x == ni {
			c.list[i] = c.list[len(c.list)-1]
			c.list = c.list[:len(c.list)-1]
			break
		}
	}
	delete(c.index, name)
	ni.Node = nil
	if len(ni.Pods) == 0 {
		delete(c.infos, name)
	}
}

// hasNode reports whether a node exists now.
func (c *nodeCache) hasNode(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.index[name]
	return ok
}

// accountPod adds or updates an assigned pod (observed through the API).
func (c *nodeCache) accountPod(pod *corev1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(pod)
	// Observed bound: the assumption is confirmed. Its volumes stay
	// reserved until the API shows them bound.
	if a := c.assumed[pod.UID]; a != nil {
		a.volumes = nil
		delete(c.assumed, pod.UID)
	}
	c.addLocked(algorithm.NewPodInfo(pod), pod.Spec.NodeName)
}

func (c *nodeCache) addLocked(pi *algorithm.PodInfo, nodeName string) {
	ni := c.info(nodeName)
	ni.AddPod(pi)
	c.pods.Add(pi, ni)
	c.podNode[pi.Pod.UID] = nodeName
}

// forgetPod removes a pod that is gone (or no longer holds resources),
// whatever the cache knew of it: observed bound, assumed, or nothing. It
// reports whether the pod held a place.
func (c *nodeCache) forgetPod(pod *corev1.Pod) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, held := c.podNode[pod.UID]
	c.removeLocked(pod)
	c.dropAssumptionLocked(pod.UID)
	return held
}

// dropAssumptionLocked forgets an assumption and the volumes it reserved.
func (c *nodeCache) dropAssumptionLocked(uid types.UID) {
	a := c.assumed[uid]
	if a == nil {
		return
	}
	for _, v := range a.volumes {
		delete(c.volumes, v)
	}
	delete(c.assumed, uid)
}

func (c *nodeCache) removeLocked(pod *corev1.Pod) {
	name, ok := c.podNode[pod.UID]
	if !ok {
		return
	}
	delete(c.podNode, pod.UID)
	if ni := c.infos[name]; ni != nil {
		if pi := ni.RemovePod(pod); pi != nil {
			c.pods.Remove(pi)
		}
		if ni.Node == nil && len(ni.Pods) == 0 {
			delete(c.infos, name)
		}
	}
}

// assumeLocked accounts for a pod on the node the scheduler chose, before
// the binding is confirmed, so the next decision already sees it. The
// caller holds the lock (it is still in its decision).
func (c *nodeCache) assumeLocked(pod *corev1.Pod, nodeName string, bindings []algorithm.VolumeBinding) {
	// Placed: its nomination, if any, is over (the API clears it on
	// binding).
	c.nominateLocked(pod, "")
	assumed := pod.DeepCopy()
	assumed.Spec.NodeName = nodeName
	c.removeLocked(assumed)
	c.dropAssumptionLocked(pod.UID)
	c.addLocked(algorithm.NewPodInfo(assumed), nodeName)
	a := &assumption{pod: assumed}
	for _, b := range bindings {
		if b.Volume != "" {
			c.volumes[b.Volume] = algorithm.ClaimKey(b.Claim)
			a.volumes = append(a.volumes, b.Volume)
		}
	}
	c.assumed[pod.UID] = a
}

// volumeObserved ends the reservation of a volume the API now shows bound
// to the claim it was reserved for (or to any claim: it is no longer
// available either way).
func (c *nodeCache) volumeObserved(pv *corev1.PersistentVolume) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.volumes[pv.Name]; ok && pv.Spec.ClaimRef != nil {
		delete(c.volumes, pv.Name)
	}
}

// unassume drops an assumption whose binding failed.
func (c *nodeCache) unassume(pod *corev1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.assumed[pod.UID] != nil {
		c.removeLocked(pod)
		c.dropAssumptionLocked(pod.UID)
	}
}

// finishBinding starts the expiry of an assumption whose binding the API
// accepted: if the pod is not seen bound by the deadline, it expires.
func (c *nodeCache) finishBinding(pod *corev1.Pod, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if a := c.assumed[pod.UID]; a != nil {
		a.deadline = now.Add(assumedPodExpiry)
	}
}

// expireAssumed forgets the assumed pods whose binding finished more than
// assumedPodExpiry ago without the pod showing up bound, and returns them.
func (c *nodeCache) expireAssumed(now time.Time) []*corev1.Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*corev1.Pod
	for uid, a := range c.assumed {
		if a.deadline.IsZero() || now.Before(a.deadline) {
			continue
		}
		c.removeLocked(a.pod)
		c.dropAssumptionLocked(uid)
		out = append(out, a.pod)
	}
	return out
}

// snapshotLocked returns a snapshot reading the cache; valid while the lock
// is held.
func (c *nodeCache) snapshotLocked(l algorithm.Listers) *algorithm.Snapshot {
	snap := algorithm.NewSharedSnapshot(c.list, c.pods, l)
	snap.AssumedVolumes = c.volumes
	snap.Nominated = c.nominated
	snap.UseNodeIndex(c.index)
	return snap
}
