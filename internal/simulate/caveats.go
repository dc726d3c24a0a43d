package simulate

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// replacing are the controllers whose pods the simulation replaces: the
// kinds a snapshot holds and kube-controller-manager runs (a
// Deployment's pods are its ReplicaSets').
var replacing = map[string]bool{"ReplicaSet": true, "StatefulSet": true, "DaemonSet": true, "Job": true, "Node": true}

// defaultScheduler is the one scheduler a simulation runs (capstan's or
// kube-scheduler).
const defaultScheduler = "default-scheduler"

// caveats are what the snapshot holds that the simulation does not play
// as the cluster would, each a sentence: its answer is optimistic or
// pessimistic there.
func caveats(snap *Snapshot) []string {
	var out []string
	byKind := map[string]int{}
	held := map[string]bool{}
	for _, key := range []string{"apps/v1/replicasets", "apps/v1/statefulsets", "apps/v1/daemonsets", "batch/v1/jobs"} {
		for _, u := range snap.Objects[key] {
			held[u.GetKind()+" "+u.GetNamespace()+"/"+u.GetName()] = true
		}
	}
	missing, orphans := 0, 0
	schedulers := map[string]int{}
	nodeNames := map[string]bool{}
	for _, n := range snap.Objects["v1/nodes"] {
		nodeNames[n.GetName()] = true
	}
	for _, p := range snap.Objects["v1/pods"] {
		if node, _, _ := unstructured.NestedString(p.Object, "spec", "nodeName"); node != "" && !nodeNames[node] && p.GetDeletionTimestamp() == nil {
			orphans++
			continue
		}
		if name, _, _ := unstructured.NestedString(p.Object, "spec", "schedulerName"); name != "" && name != defaultScheduler {
			schedulers[name]++
		}
		ref := controllerOf(&p)
		switch {
		case ref == nil:
		case !replacing[ref[0]]:
			byKind[ref[0]]++
		case ref[0] != "Node" && !held[ref[0]+" "+p.GetNamespace()+"/"+ref[1]]:
			missing++
		}
	}
	if n, kinds := tally(byKind); n > 0 {
		out = append(out, fmt.Sprintf("%s run by controllers the simulation does not run (%s): removed, they are not replaced, where the cluster would replace them",
			plural(n, "pod"), kinds))
	}
	if missing > 0 {
		out = append(out, fmt.Sprintf("%s run by workloads the snapshot does not hold: removed, they are not replaced", plural(missing, "pod")))
	}
	going := terminatingNamespaces(snap)
	leaving := 0
	for key, objs := range snap.Objects {
		if key == "v1/namespaces" {
			continue
		}
		for _, u := range objs {
			if going[u.GetNamespace()] {
				leaving++
			}
		}
	}
	if leaving > 0 {
		out = append(out, fmt.Sprintf("%s of %s being deleted: left out, as they go with %s",
			plural(leaving, "object"), plural(len(going), "namespace"), map[bool]string{true: "it", false: "them"}[len(going) == 1]))
	}
	if orphans > 0 {
		out = append(out, fmt.Sprintf("%s bound to nodes the snapshot does not have (gone while it was taken, or awaiting the pod garbage collector): left out, as the collector deletes them",
			plural(orphans, "pod")))
	}
	if n := len(snap.Objects["autoscaling/v2/horizontalpodautoscalers"]); n > 0 {
		out = append(out, fmt.Sprintf("%s: the simulation serves no pod metrics, so they keep their workloads' replicas between their minimum and maximum and do not scale on load",
			plural(n, "HorizontalPodAutoscaler")))
	}
	if n := len(snap.Objects["batch/v1/cronjobs"]); n > 0 {
		out = append(out, fmt.Sprintf("%s restored suspended: their schedules follow the cluster's clock, which a simulation faster than real time does not keep",
			plural(n, "CronJob")))
	}
	if n, names := tally(schedulers); n > 0 {
		out = append(out, fmt.Sprintf("%s name schedulers the simulation does not run (%s): made again, they stay pending, where the cluster would place them",
			plural(n, "pod"), names))
	}
	return out
}

// tally sums counts by name, and lists them in name order ("a 2, b 1").
func tally(counts map[string]int) (int, string) {
	var names []string
	n := 0
	for name, c := range counts {
		names = append(names, fmt.Sprintf("%s %d", name, c))
		n += c
	}
	sort.Strings(names)
	return n, strings.Join(names, ", ")
}

// controllerOf is the kind and name of an object's controller, if any.
func controllerOf(u *unstructured.Unstructured) []string {
	for _, r := range u.GetOwnerReferences() {
		if r.Controller != nil && *r.Controller {
			return []string{r.Kind, r.Name}
		}
	}
	return nil
}
