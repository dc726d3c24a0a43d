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
	missing := 0
	schedulers := map[string]int{}
	for _, p := range snap.Objects["v1/pods"] {
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
	if len(byKind) > 0 {
		var kinds []string
		n := 0
		for k, c := range byKind {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, c))
			n += c
		}
		sort.Strings(kinds)
		out = append(out, fmt.Sprintf("%s run by controllers the simulation does not run (%s): removed, they are not replaced, where the cluster would replace them",
			plural(n, "pod"), strings.Join(kinds, ", ")))
	}
	if missing > 0 {
		out = append(out, fmt.Sprintf("%s run by workloads the snapshot does not hold: removed, they are not replaced", plural(missing, "pod")))
	}
	if len(schedulers) > 0 {
		var names []string
		n := 0
		for name, c := range schedulers {
			names = append(names, fmt.Sprintf("%s %d", name, c))
			n += c
		}
		sort.Strings(names)
		out = append(out, fmt.Sprintf("%s name schedulers the simulation does not run (%s): made again, they stay pending, where the cluster would place them",
			plural(n, "pod"), strings.Join(names, ", ")))
	}
	return out
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
