package algorithm

import corev1 "k8s.io/api/core/v1"

// PodInfos keeps the PodInfo of each pod object from one round of
// snapshots to the next, so that a loop over every pod of a large cluster
// (the autoscaler's) computes requests, ports and selectors only for the
// pods that changed since the last round. It is keyed by the object: an
// informer replaces a pod's object when the pod changes and never writes
// to one it handed out, so an object seen before has the same PodInfo.
//
// A nil *PodInfos caches nothing. It is not safe for concurrent use.
type PodInfos struct {
	prev, cur map[*corev1.Pod]*PodInfo
}

// NewPodInfos returns an empty cache.
func NewPodInfos() *PodInfos {
	return &PodInfos{cur: map[*corev1.Pod]*PodInfo{}}
}

// Get returns the pod's PodInfo, made now if the object was not asked for
// in this round or the last.
func (c *PodInfos) Get(p *corev1.Pod) *PodInfo {
	if c == nil {
		return NewPodInfo(p)
	}
	if pi, ok := c.cur[p]; ok {
		return pi
	}
	pi, ok := c.prev[p]
	if ok {
		delete(c.prev, p)
	} else {
		pi = NewPodInfo(p)
	}
	c.cur[p] = pi
	return pi
}

// NextRound forgets the objects not asked for since the last call: pods
// deleted or replaced by newer objects.
func (c *PodInfos) NextRound() {
	if c == nil {
		return
	}
	c.prev, c.cur = c.cur, make(map[*corev1.Pod]*PodInfo, len(c.cur))
}

// Len is how many objects the cache holds.
func (c *PodInfos) Len() int {
	if c == nil {
		return 0
	}
	return len(c.prev) + len(c.cur)
}
