package simulate

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
)

// revisionTimeout bounds the wait for a restored StatefulSet's or
// DaemonSet's controller to record its first revision.
const revisionTimeout = time.Minute

// createWithoutRolling creates a StatefulSet or a DaemonSet so that it
// adopts the restored pods as they are, never replacing them. Its
// controller takes a pod for up to date when the pod's
// controller-revision-hash label names the controller's current
// revision, a hash of the template; the restored template is not the
// snapshot's (its seconds are scaled, its secrets digested, its labels
// renamed by --anonymize), so no restored pod's label would match, and
// the controller would roll every pod. The workload is made with the
// OnDelete strategy, its pods are labelled with the revision its
// controller records, then its own strategy is put back.
//
// A workload that was rolling out at the snapshot goes on rolling: only
// the pods of its update revision at the snapshot (updated, the hash of
// their controller-revision-hash label) are labelled with the new one;
// the others keep a revision the controller takes for an old one, and it
// replaces them as it would have. updated empty (the snapshot does not
// say) labels them all.
func (r *restorer) createWithoutRolling(ctx context.Context, res Resource, u *unstructured.Unstructured, updated string) error {
	strategy, hasStrategy, _ := unstructured.NestedFieldCopy(u.Object, "spec", "updateStrategy")
	if err := unstructured.SetNestedField(u.Object, map[string]any{"type": "OnDelete"}, "spec", "updateStrategy"); err != nil {
		return err
	}
	ri := r.dyn.Resource(res.GVR).Namespace(u.GetNamespace())
	created, err := ri.Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	hash, err := r.currentRevision(ctx, res.Kind, created)
	if err != nil {
		return err
	}
	// Both controllers read the same label.
	if err := r.adopt(ctx, created, func(p *corev1.Pod) map[string]any {
		if updated != "" && revisionHash(p.Labels[appsv1.ControllerRevisionHashLabelKey]) != updated {
			return nil
		}
		return map[string]any{appsv1.ControllerRevisionHashLabelKey: hash}
	}); err != nil {
		return err
	}
	var restore any // JSON null: the API server's default strategy
	if hasStrategy {
		restore = strategy
	}
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"updateStrategy": restore}})
	if err != nil {
		return err
	}
	if _, err := ri.Patch(ctx, created.GetName(), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("putting its update strategy back: %w", err)
	}
	return nil
}

// currentRevision waits for a workload's controller to record its
// revision, and returns what its up-to-date pods' controller-revision-hash
// label says.
func (r *restorer) currentRevision(ctx context.Context, kind string, w *unstructured.Unstructured) (string, error) {
	var hash string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, revisionTimeout, true, func(ctx context.Context) (bool, error) {
		switch kind {
		case "StatefulSet":
			sts, err := r.kube.AppsV1().StatefulSets(w.GetNamespace()).Get(ctx, w.GetName(), metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			// A StatefulSet's pods carry the revision's name.
			hash = sts.Status.UpdateRevision
			return hash != "" && sts.Status.ObservedGeneration >= sts.Generation, nil
		default:
			// A DaemonSet's pods carry the hash its newest
			// ControllerRevision is labelled with.
			revs, err := r.kube.AppsV1().ControllerRevisions(w.GetNamespace()).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			var newest *appsv1.ControllerRevision
			for i := range revs.Items {
				cr := &revs.Items[i]
				if metav1.IsControlledBy(cr, w) && (newest == nil || cr.Revision > newest.Revision) {
					newest = cr
				}
			}
			if newest == nil {
				return false, nil
			}
			hash = newest.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]
			return hash != "", nil
		}
	})
	if err != nil {
		return "", fmt.Errorf("waiting for its controller's first revision: %w", err)
	}
	return hash, nil
}

// workloadSelector is a workload's pod selector as a label selector
// string.
func workloadSelector(w *unstructured.Unstructured) (string, error) {
	raw, ok, _ := unstructured.NestedMap(w.Object, "spec", "selector")
	if !ok {
		return "", fmt.Errorf("no spec.selector")
	}
	var sel metav1.LabelSelector
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &sel); err != nil {
		return "", err
	}
	s, err := metav1.LabelSelectorAsSelector(&sel)
	if err != nil {
		return "", fmt.Errorf("spec.selector: %w", err)
	}
	return s.String(), nil
}

// revisionHash is the hash a controller-revision-hash label or a
// revision's name ends with: a StatefulSet's pods carry the revision's
// name (the StatefulSet's, which --anonymize renames, and the hash), a
// DaemonSet's the hash alone.
func revisionHash(v string) string {
	if i := strings.LastIndexByte(v, '-'); i >= 0 {
		return v[i+1:]
	}
	return v
}

// updateRevision is the hash of a StatefulSet's or DaemonSet's update
// revision at the snapshot: the StatefulSet's status.updateRevision, or
// the newest of the snapshot's ControllerRevisions the DaemonSet
// controlled. Empty when the snapshot does not say.
func (r *restorer) updateRevision(kind string, w *unstructured.Unstructured) string {
	if kind == "StatefulSet" {
		v, _, _ := unstructured.NestedString(w.Object, "status", "updateRevision")
		return revisionHash(v)
	}
	var newest int64
	hash := ""
	for _, u := range r.objects("apps/v1/controllerrevisions") {
		if u.GetNamespace() != w.GetNamespace() {
			continue
		}
		owned := false
		for _, ref := range u.GetOwnerReferences() {
			owned = owned || (ref.UID == w.GetUID() && ref.UID != "")
		}
		rev, _, _ := unstructured.NestedInt64(u.Object, "revision")
		if owned && rev > newest {
			newest, hash = rev, u.GetLabels()[appsv1.DefaultDaemonSetUniqueLabelKey]
		}
	}
	return revisionHash(hash)
}

// revisions restores the snapshot's ControllerRevisions of the
// StatefulSets and DaemonSets it restores, without owners: each
// workload's controller adopts those its selector matches, and so keeps
// its history (rollout undo). An anonymized snapshot holds their
// revision numbers and hashes without their data (the pod templates):
// those are not restored.
func (r *restorer) revisions(ctx context.Context) error {
	restored := map[types.UID]bool{}
	for _, key := range []string{"apps/v1/statefulsets", "apps/v1/daemonsets"} {
		for _, w := range r.objects(key) {
			if w.GetDeletionTimestamp() == nil {
				restored[w.GetUID()] = true
			}
		}
	}
	return r.createEach(ctx, "apps/v1/controllerrevisions", false, func(u *unstructured.Unstructured) bool {
		if _, ok := u.Object["data"]; !ok {
			return false
		}
		for _, ref := range u.GetOwnerReferences() {
			if (ref.Kind == "StatefulSet" || ref.Kind == "DaemonSet") && restored[ref.UID] {
				return true
			}
		}
		return false
	})
}

// adopt makes the restored pods a workload selects its own, as its
// controller would adopt them, many at once: the controller adopts one
// pod after another, each a request, and a ReplicaSet of thousands of
// pods would take minutes before it counted any. labels, when set, are
// labels to add to a pod (nil: none).
func (r *restorer) adopt(ctx context.Context, owner *unstructured.Unstructured, labels func(*corev1.Pod) map[string]any) error {
	selector, err := workloadSelector(owner)
	if err != nil {
		return err
	}
	pods, err := r.kube.CoreV1().Pods(owner.GetNamespace()).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return fmt.Errorf("listing its pods: %w", err)
	}
	ref := map[string]any{"apiVersion": owner.GetAPIVersion(), "kind": owner.GetKind(), "name": owner.GetName(),
		"uid": string(owner.GetUID()), "controller": true, "blockOwnerDeletion": true}
	var todo []*corev1.Pod
	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp == nil {
			todo = append(todo, p)
		}
	}
	return parallel(ctx, todo, func(ctx context.Context, p *corev1.Pod) error {
		meta := map[string]any{}
		// Its controller may have adopted it already.
		if metav1.GetControllerOf(p) == nil {
			meta["ownerReferences"] = []any{ref}
		}
		if labels != nil {
			if l := labels(p); l != nil {
				meta["labels"] = l
			}
		}
		if len(meta) == 0 {
			return nil
		}
		patch, err := json.Marshal(map[string]any{"metadata": meta})
		if err != nil {
			return err
		}
		if _, err := r.kube.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("adopting pod %s: %w", p.Name, err)
		}
		return nil
	})
}

// markerTimeout bounds the wait for kube-controller-manager to see the
// restored pods.
const markerTimeout = 2 * time.Minute

// awaitControllersSeePods waits until kube-controller-manager's pod
// informer holds every pod made so far. A workload's controller that
// syncs before its informer has the restored pods counts too few, makes
// more, and then deletes the surplus, and which it deletes (its own new
// pods or restored ones) changes the cluster the simulation starts from.
// Its informer is not visible from here, so the restore shows it a
// marker: a ReplicaSet of no replicas, then a pod its selector matches,
// made after every restored pod. Its watch delivers pods in the order
// they were made, so once the ReplicaSet controller has acted on the
// marker pod (adopted it, or deleted it as one too many), every earlier
// pod is in the informer the workload controllers share.
func (r *restorer) awaitControllersSeePods(ctx context.Context) error {
	const ns = metav1.NamespaceDefault
	name := "capstan-restore-marker-" + rand.String(5)
	labels := map[string]string{"capstan.dev/restore-marker": name}
	spec := corev1.PodSpec{
		// No scheduler serves it: it stays pending, and goes at once.
		SchedulerName: name,
		Containers:    []corev1.Container{{Name: "marker", Image: "capstan.dev/restore-marker"}},
	}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.ReplicaSetSpec{Replicas: new(int32(0)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec}}}
	if _, err := r.kube.AppsV1().ReplicaSets(ns).Create(ctx, rs, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the marker ReplicaSet: %w", err)
	}
	// Deleting the ReplicaSet deletes the pod if it was adopted.
	defer func() {
		background := metav1.DeletePropagationBackground
		_ = r.kube.AppsV1().ReplicaSets(ns).Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{PropagationPolicy: &background})
	}()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}, Spec: spec}
	if _, err := r.kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the marker pod: %w", err)
	}
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, markerTimeout, true, func(ctx context.Context) (bool, error) {
		p, err := r.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		return metav1.GetControllerOf(p) != nil, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for kube-controller-manager's ReplicaSet controller to see the pods (it has not acted on the marker pod %s/%s): %w", ns, name, err)
	}
	return nil
}
