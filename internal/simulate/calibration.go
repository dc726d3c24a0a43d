package simulate

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Calibration compares the restored cluster, as the changes begin, with
// the snapshot: what the restore itself changed is no change's doing,
// and a simulation that starts far from the snapshot answers for
// another cluster.
type Calibration struct {
	// Pods are the snapshot's pods restored (neither finished nor being
	// deleted); Same those of them where they were in the snapshot when
	// the changes began: on the same node, or pending still.
	Pods int `json:"pods"`
	Same int `json:"same"`
	// Gone are the snapshot's pods gone when the changes began
	// (replaced or removed during the restore).
	Gone []string `json:"gone"`
	// Placed are pods the snapshot had pending that the simulation's
	// scheduler placed during the restore.
	Placed []PodPlacement `json:"placed"`
	// Made are pods the snapshot does not have, made during the
	// restore (a controller replacing a pod, or making one more), and
	// MadePending those of them no node took.
	Made        []string `json:"made"`
	MadePending int      `json:"madePending"`
}

// restoredPod is a snapshot's pod as the restore made it: on its node
// ("" pending), with its UID here.
type restoredPod struct {
	node string
	uid  types.UID
}

// calibrate compares the pods when the changes begin with those the
// restore made from the snapshot.
func calibrate(restored map[string]restoredPod, pods []*corev1.Pod, zoneOf func(string) string) Calibration {
	c := Calibration{Pods: len(restored), Gone: []string{}, Placed: []PodPlacement{}, Made: []string{}}
	now := map[string]*corev1.Pod{}
	for _, p := range pods {
		if p.DeletionTimestamp == nil {
			now[objectKey(p)] = p
		}
	}
	for key, rp := range restored {
		p, ok := now[key]
		switch {
		case !ok:
			c.Gone = append(c.Gone, key)
		case rp.uid != "" && p.UID != rp.uid:
			// A pod of the same name made again (a StatefulSet's).
			c.Gone = append(c.Gone, key)
			c.Made = append(c.Made, key)
			if p.Spec.NodeName == "" {
				c.MadePending++
			}
		case p.Spec.NodeName == rp.node:
			c.Same++
		default:
			// Restored pending, bound since.
			c.Placed = append(c.Placed, PodPlacement{Pod: key, Node: p.Spec.NodeName, Zone: zoneOf(p.Spec.NodeName)})
		}
	}
	for key, p := range now {
		if _, ok := restored[key]; !ok {
			c.Made = append(c.Made, key)
			if p.Spec.NodeName == "" {
				c.MadePending++
			}
		}
	}
	sort.Strings(c.Gone)
	sort.Strings(c.Made)
	sort.Slice(c.Placed, func(i, j int) bool { return c.Placed[i].Pod < c.Placed[j].Pod })
	return c
}

// Line says in a sentence how the restored cluster compares with the
// snapshot.
func (c Calibration) Line() string {
	if c.Pods == 0 && len(c.Made) == 0 {
		return "the snapshot has no pod to compare the restored cluster with"
	}
	if c.Same == c.Pods && len(c.Made) == 0 {
		return fmt.Sprintf("the restored cluster began as the snapshot: its %s where they were", plural(c.Pods, "pod"))
	}
	var parts []string
	if n := len(c.Gone); n > 0 {
		parts = append(parts, plural(n, "pod")+" gone")
	}
	if n := len(c.Placed); n > 0 {
		parts = append(parts, fmt.Sprintf("%s pending in the snapshot placed", plural(n, "pod")))
	}
	if n := len(c.Made); n > 0 {
		made := plural(n, "pod") + " made"
		if c.MadePending > 0 {
			made += fmt.Sprintf(" (%d pending)", c.MadePending)
		}
		parts = append(parts, made)
	}
	return fmt.Sprintf("the restored cluster began with %d of the snapshot's %s where they were; during the restore %s",
		c.Same, plural(c.Pods, "pod"), strings.Join(parts, ", "))
}
