package algorithm

import (
	"encoding/json"
	"strings"

	"github.com/capstan-dev/capstan/internal/taints"

	corev1 "k8s.io/api/core/v1"
)

// taintTolerationPriority favours nodes with fewer PreferNoSchedule taints
// the pod does not tolerate.
type taintTolerationPriority struct{}

func (taintTolerationPriority) Name() string { return "TaintTolerationPriority" }

func (taintTolerationPriority) Score(_ *CycleState, pi *PodInfo, nodes []*NodeInfo, scores []int64) {
	var tols []corev1.Toleration
	for _, t := range pi.Pod.Spec.Tolerations {
		if t.Effect == "" || t.Effect == corev1.TaintEffectPreferNoSchedule {
			tols = append(tols, t)
		}
	}
	for i, ni := range nodes {
		var n int64
		for j := range ni.Node.Spec.Taints {
			t := &ni.Node.Spec.Taints[j]
			if t.Effect == corev1.TaintEffectPreferNoSchedule && !taints.Tolerated(tols, t) {
				n++
			}
		}
		scores[i] = n
	}
	normalize(scores, true)
}

// preferAvoidPodsAnnotation lists controllers whose pods a node would
// rather not run.
const preferAvoidPodsAnnotation = "scheduler.alpha.kubernetes.io/preferAvoidPods"

// nodePreferAvoidPods scores 0 the nodes whose preferAvoidPods annotation
// names the replication controller or replica set owning the pod, 10 the
// others; pods of other controllers are not concerned.
type nodePreferAvoidPods struct{}

func (nodePreferAvoidPods) Name() string { return "NodePreferAvoidPodsPriority" }

func (nodePreferAvoidPods) Score(_ *CycleState, pi *PodInfo, nodes []*NodeInfo, scores []int64) {
	var ref *metav1OwnerRef
	for _, o := range pi.Pod.OwnerReferences {
		if o.Controller != nil && *o.Controller && (o.Kind == "ReplicationController" || o.Kind == "ReplicaSet") {
			ref = &metav1OwnerRef{kind: o.Kind, uid: string(o.UID)}
		}
	}
	for i, ni := range nodes {
		scores[i] = MaxPriority
		if ref == nil {
			continue
		}
		raw, ok := ni.Node.Annotations[preferAvoidPodsAnnotation]
		if !ok {
			continue
		}
		var avoid corev1.AvoidPods
		if json.Unmarshal([]byte(raw), &avoid) != nil {
			continue
		}
		for _, e := range avoid.PreferAvoidPods {
			c := e.PodSignature.PodController
			if c != nil && c.Kind == ref.kind && string(c.UID) == ref.uid {
				scores[i] = 0
				break
			}
		}
	}
}

type metav1OwnerRef struct{ kind, uid string }

// Image sizes between which ImageLocalityPriority scales its score: the
// legacy priority's fixed thresholds, whatever the number of containers.
const (
	minImgSize int64 = 23 * 1024 * 1024
	maxImgSize int64 = 1000 * 1024 * 1024
)

// imageLocality favours nodes that already have the pod's images, by their
// size, discounted by how few nodes have them (so it does not herd pods
// onto the one node that pulled an image).
type imageLocality struct{}

func (imageLocality) Name() string { return "ImageLocalityPriority" }

func (imageLocality) Score(cs *CycleState, pi *PodInfo, nodes []*NodeInfo, scores []int64) {
	images := make([]string, 0, len(pi.Pod.Spec.Containers))
	for _, c := range pi.Pod.Spec.Containers {
		images = append(images, normalizeImage(c.Image))
	}
	total := len(cs.Snapshot.Nodes)
	spread := map[string]float64{}
	for _, img := range images {
		n := 0
		for _, ni := range cs.Snapshot.Nodes {
			if _, ok := ni.ImageSizes[img]; ok {
				n++
			}
		}
		if total > 0 {
			spread[img] = float64(n) / float64(total)
		}
	}
	for i, ni := range nodes {
		var sum int64
		for _, img := range images {
			if size, ok := ni.ImageSizes[img]; ok {
				sum += int64(float64(size) * spread[img])
			}
		}
		sum = min(max(sum, minImgSize), maxImgSize)
		scores[i] = MaxPriority * (sum - minImgSize) / (maxImgSize - minImgSize)
	}
}

// normalizeImage adds the implicit ":latest" tag.
func normalizeImage(name string) string {
	if strings.Contains(name, "@") {
		return name
	}
	if i := strings.LastIndex(name, ":"); i < 0 || i < strings.LastIndex(name, "/") {
		return name + ":latest"
	}
	return name
}

// equalPriority gives every node 1.
type equalPriority struct{}

func (equalPriority) Name() string { return "EqualPriority" }

func (equalPriority) Score(_ *CycleState, _ *PodInfo, _ []*NodeInfo, scores []int64) {
	for i := range scores {
		scores[i] = 1
	}
}

// labelPreference (configurable) scores 10 the nodes that have the label
// (presence) or lack it (no presence), 0 the others.
type labelPreference struct {
	name     string
	label    string
	presence bool
}

func (p *labelPreference) Name() string { return p.name }

func (p *labelPreference) Score(_ *CycleState, _ *PodInfo, nodes []*NodeInfo, scores []int64) {
	for i, ni := range nodes {
		_, has := ni.Label(p.label)
		if has == p.presence {
			scores[i] = MaxPriority
		} else {
			scores[i] = 0
		}
	}
}
