package autoscaler

import (
	"crypto/sha256"
	"encoding/json"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capstan-dev/capstan/internal/scheduler/algorithm"
)

// podClass is a set of pods the scheduler cannot tell apart: the same
// controller, labels and spec. What one of them fits, they all fit, so the
// simulations ask once per class, as upstream's equivalence groups do.
type podClass struct {
	pods []*podEntry
	// exemplar is the first pod, the one the simulations ask about.
	exemplar *podEntry
	// hint is the first of the simulation's new nodes a pod of the class
	// may still fit on: nodes only fill up, so those before it are full
	// for the class.
	hint int
	// reasons maps a node group to why the class does not help it scale,
	// one reason each.
	reasons map[string]string
	// fits lists the node groups whose new node takes the class.
	fits map[string]bool
}

// podEntry is a pending pod with its scheduling information, computed once.
type podEntry struct {
	pod *corev1.Pod
	pi  *algorithm.PodInfo
}

// maxClassesPerController bounds how many classes the pods of one
// controller form, as upstream does; further variants join singleton
// classes.
const maxClassesPerController = 10

// classify groups pods into classes, keeping the pods' order within each
// class and the classes in the order of their first pod.
func classify(pods []*podEntry) []*podClass {
	var out []*podClass
	byKey := map[string]*podClass{}
	perController := map[string]int{}
	for _, p := range pods {
		owner := metav1.GetControllerOf(p.pod)
		if owner == nil || owner.Kind == "DaemonSet" {
			out = append(out, newClass(p))
			continue
		}
		key := string(owner.UID) + "\x00" + specKey(p.pod)
		if c := byKey[key]; c != nil {
			c.pods = append(c.pods, p)
			continue
		}
		if perController[string(owner.UID)] >= maxClassesPerController {
			out = append(out, newClass(p))
			continue
		}
		perController[string(owner.UID)]++
		c := newClass(p)
		byKey[key] = c
		out = append(out, c)
	}
	return out
}

func newClass(p *podEntry) *podClass {
	return &podClass{pods: []*podEntry{p}, exemplar: p, reasons: map[string]string{}, fits: map[string]bool{}}
}

// specKey identifies what the scheduler reads of a pod: its labels and its
// spec without the fields set per pod.
func specKey(pod *corev1.Pod) string {
	spec := pod.Spec.DeepCopy()
	spec.NodeName, spec.Hostname, spec.Subdomain = "", "", ""
	raw, _ := json.Marshal(spec)
	keys := make([]string, 0, len(pod.Labels))
	for k, v := range pod.Labels {
		keys = append(keys, k+"="+v)
	}
	sort.Strings(keys)
	h := sha256.New()
	h.Write([]byte(strings.Join(keys, "\x00")))
	h.Write(raw)
	return string(h.Sum(nil))
}
