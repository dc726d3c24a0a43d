package algorithm

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// Keys the volume binding writes, as kube-scheduler's VolumeBinding does.
const (
	// AnnSelectedNode on a claim asks its provisioner for a volume on that
	// node.
	AnnSelectedNode = "volume.kubernetes.io/selected-node"
	// AnnBoundByController on a volume says a controller, not a user,
	// bound it to its claim.
	AnnBoundByController = "pv.kubernetes.io/bound-by-controller"
	// noProvisioner is the provisioner of classes whose volumes are all
	// created by hand.
	noProvisioner = "kubernetes.io/no-provisioner"
)

// VolumeBinding is what a decision binds for one unbound claim of its pod
// on the chosen node: a matching volume, or, with Volume empty, the node
// for the class's provisioner to create one on.
type VolumeBinding struct {
	Claim *corev1.PersistentVolumeClaim
	// Volume is the PersistentVolume the claim gets; empty when the claim
	// is to be provisioned on Node.
	Volume string
	Node   string
}

// ClaimKey names a claim as namespace/name.
func ClaimKey(pvc *corev1.PersistentVolumeClaim) string { return pvc.Namespace + "/" + pvc.Name }

// bindClaims decides for each unbound WaitForFirstConsumer claim of the pod
// which volume it gets on node (the smallest that fits, never one reserved
// by another decision or taken by another claim of the pod), or whether
// its class's provisioner creates one; reason says why the node cannot
// take the pod, "" when it can.
func bindClaims(s *Snapshot, pod *corev1.Pod, node *corev1.Node) (bindings []VolumeBinding, reason string) {
	var taken map[string]bool
	for i := range pod.Spec.Volumes {
		pvc, pv, why := claimedVolume(s, pod, &pod.Spec.Volumes[i])
		switch {
		case why != "":
			return nil, why
		case pvc == nil:
			continue
		case pv != nil:
			if !pvReachable(pv, node) {
				return nil, ReasonVolumeNodeAffinityConflict
			}
			continue
		case pvc.Spec.VolumeName != "":
			// Bound to a volume that does not exist (yet).
			return nil, ReasonVolumeBindConflict
		}
		class := storageClass(s, pvc)
		if class == nil || class.VolumeBindingMode == nil || *class.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer {
			return nil, ReasonUnboundImmediatePVC
		}
		if selected, ok := pvc.Annotations[AnnSelectedNode]; ok {
			// Already being provisioned for a node: only that one.
			if selected != node.Name {
				return nil, ReasonVolumeBindConflict
			}
			continue
		}
		if pv := bestVolume(s, pvc, node, taken); pv != nil {
			if taken == nil {
				taken = map[string]bool{}
			}
			taken[pv.Name] = true
			bindings = append(bindings, VolumeBinding{Claim: pvc, Volume: pv.Name, Node: node.Name})
			continue
		}
		if class.Provisioner == "" || class.Provisioner == noProvisioner || !topologyAllows(class, node) {
			return nil, ReasonVolumeBindConflict
		}
		bindings = append(bindings, VolumeBinding{Claim: pvc, Node: node.Name})
	}
	return bindings, ""
}

func storageClass(s *Snapshot, pvc *corev1.PersistentVolumeClaim) *storagev1.StorageClass {
	name := storageClassName(pvc)
	if name == "" || s.StorageClasses == nil {
		return nil
	}
	sc, err := s.StorageClasses.Get(name)
	if err != nil {
		return nil
	}
	return sc
}

// bestVolume is the volume a claim would get on node: one pre-bound to the
// claim, else the smallest available one of its class, with its access
// modes, reachable from the node, that neither another decision reserved
// nor another claim of the same pod took.
func bestVolume(s *Snapshot, pvc *corev1.PersistentVolumeClaim, node *corev1.Node, taken map[string]bool) *corev1.PersistentVolume {
	if s.PersistentVolumes == nil {
		return nil
	}
	pvs, err := s.PersistentVolumes.List(everything)
	if err != nil {
		return nil
	}
	want := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	key := ClaimKey(pvc)
	var candidates []*corev1.PersistentVolume
	for _, pv := range pvs {
		if taken[pv.Name] || pv.DeletionTimestamp != nil {
			continue
		}
		if owner, ok := s.AssumedVolumes[pv.Name]; ok && owner != key {
			continue
		}
		if pv.Status.Phase != corev1.VolumeAvailable && pv.Status.Phase != "" {
			continue
		}
		if ref := pv.Spec.ClaimRef; ref != nil {
			if ref.Namespace != pvc.Namespace || ref.Name != pvc.Name || ref.UID != "" && ref.UID != pvc.UID {
				continue
			}
			if pvReachable(pv, node) {
				return pv // pre-bound to this claim
			}
			continue
		}
		if pv.Spec.StorageClassName != storageClassName(pvc) {
			continue
		}
		if have, ok := pv.Spec.Capacity[corev1.ResourceStorage]; !ok || have.Cmp(want) < 0 {
			continue
		}
		if !hasAccessModes(pv.Spec.AccessModes, pvc.Spec.AccessModes) || !pvReachable(pv, node) {
			continue
		}
		candidates = append(candidates, pv)
	}
	if len(candidates) == 0 {
		return nil
	}
	sort.Slice(candidates, func(i, j int) bool {
		ci, cj := candidates[i].Spec.Capacity[corev1.ResourceStorage], candidates[j].Spec.Capacity[corev1.ResourceStorage]
		if c := ci.Cmp(cj); c != 0 {
			return c < 0
		}
		return candidates[i].Name < candidates[j].Name
	})
	return candidates[0]
}

// topologyAllows reports whether the class may provision on node: it
// names no topology, or one of its terms matches the node's labels.
func topologyAllows(class *storagev1.StorageClass, node *corev1.Node) bool {
	if len(class.AllowedTopologies) == 0 {
		return true
	}
	for _, term := range class.AllowedTopologies {
		sel := corev1.NodeSelectorTerm{}
		for _, e := range term.MatchLabelExpressions {
			sel.MatchExpressions = append(sel.MatchExpressions, corev1.NodeSelectorRequirement{Key: e.Key, Operator: corev1.NodeSelectorOpIn, Values: e.Values})
		}
		if ok, err := nodeaffinity.NewLazyErrorNodeSelector(&corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{sel}}).Match(node); err == nil && ok {
			return true
		}
	}
	return false
}
