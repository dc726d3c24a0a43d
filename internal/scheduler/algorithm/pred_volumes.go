package algorithm

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/component-helpers/storage/ephemeral"
)

// noDiskConflict is upstream's VolumeRestrictions: a GCE PD, AWS EBS, RBD
// or iSCSI volume mounted by a pod on the node cannot be mounted again
// (read-only GCE PD, RBD and iSCSI mounts may share), and a claim with the
// ReadWriteOncePod access mode that a pod anywhere uses takes no other.
type noDiskConflict struct{}

func (noDiskConflict) Name() string { return "NoDiskConflict" }

const diskConflictKey = "NoDiskConflict"

// rwopState is how many of the pod's ReadWriteOncePod claims other pods
// use.
type rwopState struct {
	claims    map[string]bool
	conflicts int
}

func (noDiskConflict) PreFilter(cs *CycleState, pi *PodInfo) {
	st := &rwopState{}
	for i := range pi.Pod.Spec.Volumes {
		v := &pi.Pod.Spec.Volumes[i]
		if v.PersistentVolumeClaim == nil {
			continue
		}
		var pvc *corev1.PersistentVolumeClaim
		var err error = apierrors.NewNotFound(corev1.Resource("persistentvolumeclaim"), v.PersistentVolumeClaim.ClaimName)
		if l := cs.Snapshot.PersistentVolumeClaims; l != nil {
			pvc, err = l.PersistentVolumeClaims(pi.Pod.Namespace).Get(v.PersistentVolumeClaim.ClaimName)
		}
		if err != nil {
			cs.Reject("NoDiskConflict", err.Error(), true)
			return
		}
		if hasAccessModes(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod}) {
			if st.claims == nil {
				st.claims = map[string]bool{}
			}
			st.claims[pvc.Name] = true
		}
	}
	for name := range st.claims {
		if cs.Snapshot.claimInUse(pi.Pod.Namespace, name) {
			st.conflicts++
		}
	}
	// Neither a disk to check nor a claim in use: upstream skips the
	// plugin for the cycle, pods put on a node later included.
	if st.conflicts == 0 && !hasInTreeDisk(pi.Pod) {
		cs.Write(diskConflictKey, skipped{})
		return
	}
	cs.Write(diskConflictKey, st)
}

// Clone copies the count for a preemption's dry run.
func (st *rwopState) Clone() any {
	out := *st
	return &out
}

// update counts the pod's ReadWriteOncePod claims other uses, as
// upstream's updateWithPod does.
func (st *rwopState) update(other *PodInfo, n int) {
	for i := range other.Pod.Spec.Volumes {
		if c := other.Pod.Spec.Volumes[i].PersistentVolumeClaim; c != nil && st.claims[c.ClaimName] {
			st.conflicts += n
		}
	}
}

func (noDiskConflict) AddPod(cs *CycleState, _, other *PodInfo, _ *NodeInfo) {
	if st, _ := cs.Read(diskConflictKey).(*rwopState); st != nil {
		st.update(other, 1)
	}
}

func (noDiskConflict) RemovePod(cs *CycleState, _, other *PodInfo, _ *NodeInfo) {
	if st, _ := cs.Read(diskConflictKey).(*rwopState); st != nil {
		st.update(other, -1)
	}
}

// skipped marks a predicate upstream would skip for the whole cycle.
type skipped struct{}

// hasInTreeDisk reports a volume of the kinds that conflict on a node.
func hasInTreeDisk(pod *corev1.Pod) bool {
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if v.GCEPersistentDisk != nil || v.AWSElasticBlockStore != nil || v.RBD != nil || v.ISCSI != nil {
			return true
		}
	}
	return false
}

func (noDiskConflict) Filter(cs *CycleState, pi *PodInfo, ni *NodeInfo) []string {
	if _, skip := cs.Read(diskConflictKey).(skipped); skip {
		return nil
	}
	for i := range pi.Pod.Spec.Volumes {
		v := &pi.Pod.Spec.Volumes[i]
		for _, ep := range ni.Pods {
			for j := range ep.Pod.Spec.Volumes {
				if volumesConflict(v, &ep.Pod.Spec.Volumes[j]) {
					return []string{ReasonDiskConflict}
				}
			}
		}
	}
	if st, _ := cs.Read(diskConflictKey).(*rwopState); st != nil && st.conflicts > 0 {
		return []string{ReasonReadWriteOncePodConflict}
	}
	return nil
}

// resolvable: the pod holding the disk or the claim may be a victim.
func (noDiskConflict) resolvable(*PodInfo, *NodeInfo, []string) bool { return true }

func volumesConflict(a, b *corev1.Volume) bool {
	switch {
	case a.GCEPersistentDisk != nil && b.GCEPersistentDisk != nil:
		return a.GCEPersistentDisk.PDName == b.GCEPersistentDisk.PDName &&
			!(a.GCEPersistentDisk.ReadOnly && b.GCEPersistentDisk.ReadOnly)
	case a.AWSElasticBlockStore != nil && b.AWSElasticBlockStore != nil:
		return a.AWSElasticBlockStore.VolumeID == b.AWSElasticBlockStore.VolumeID
	case a.ISCSI != nil && b.ISCSI != nil:
		return a.ISCSI.IQN == b.ISCSI.IQN && !(a.ISCSI.ReadOnly && b.ISCSI.ReadOnly)
	case a.RBD != nil && b.RBD != nil:
		return a.RBD.RBDPool == b.RBD.RBDPool && a.RBD.RBDImage == b.RBD.RBDImage &&
			sharesMonitor(a.RBD.CephMonitors, b.RBD.CephMonitors) && !(a.RBD.ReadOnly && b.RBD.ReadOnly)
	}
	return false
}

func sharesMonitor(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}

// claimName is the claim a pod volume mounts: its persistentVolumeClaim's,
// or, for a generic ephemeral volume, the one the ephemeral volume
// controller creates for it (<pod>-<volume>). ok is false for volumes of
// no claim.
func claimName(pod *corev1.Pod, v *corev1.Volume) (name string, isEphemeral, ok bool) {
	switch {
	case v.PersistentVolumeClaim != nil:
		return v.PersistentVolumeClaim.ClaimName, false, true
	case v.Ephemeral != nil:
		return ephemeral.VolumeClaimName(pod, v), true, true
	}
	return "", false, false
}

// claimedVolume resolves a pod volume to its persistent volume, through its
// claim. It returns the claim (nil for volumes of no claim), the bound
// volume (nil while unbound) and, when the claim cannot be used, why: it
// does not exist (yet), is lost or being deleted, or, for an ephemeral
// volume, was not made for this pod. Those reasons are upstream's
// VolumeBinding's.
func claimedVolume(s *Snapshot, pod *corev1.Pod, v *corev1.Volume) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume, string) {
	name, isEphemeral, ok := claimName(pod, v)
	if !ok {
		return nil, nil, ""
	}
	var pvc *corev1.PersistentVolumeClaim
	var err error = apierrors.NewNotFound(corev1.Resource("persistentvolumeclaim"), name)
	if s.PersistentVolumeClaims != nil {
		pvc, err = s.PersistentVolumeClaims.PersistentVolumeClaims(pod.Namespace).Get(name)
	}
	switch {
	case err != nil && isEphemeral && apierrors.IsNotFound(err):
		return nil, nil, fmt.Sprintf("waiting for ephemeral volume controller to create the persistentvolumeclaim %q", name)
	case err != nil:
		return nil, nil, err.Error()
	case pvc.Status.Phase == corev1.ClaimLost:
		return nil, nil, fmt.Sprintf("persistentvolumeclaim %q bound to non-existent persistentvolume %q", pvc.Name, pvc.Spec.VolumeName)
	case pvc.DeletionTimestamp != nil:
		return nil, nil, fmt.Sprintf("persistentvolumeclaim %q is being deleted", pvc.Name)
	}
	if isEphemeral {
		if err := ephemeral.VolumeIsForPod(pod, pvc); err != nil {
			return nil, nil, err.Error()
		}
	}
	if pvc.Spec.VolumeName == "" || s.PersistentVolumes == nil {
		return pvc, nil, ""
	}
	pv, err := s.PersistentVolumes.Get(pvc.Spec.VolumeName)
	if err != nil {
		return pvc, nil, ""
	}
	return pvc, pv, ""
}

// noVolumeZoneConflict: the zones and regions of the pod's bound persistent
// volumes must include the node's.
type noVolumeZoneConflict struct{}

func (noVolumeZoneConflict) Name() string { return "NoVolumeZoneConflict" }

var zoneLabelKeys = []string{corev1.LabelTopologyZone, corev1.LabelTopologyRegion,
	corev1.LabelFailureDomainBetaZone, corev1.LabelFailureDomainBetaRegion}

func (noVolumeZoneConflict) Filter(cs *CycleState, pi *PodInfo, ni *NodeInfo) []string {
	if !pi.HasClaims || !ni.HasZoneLabels {
		return nil
	}
	for i := range pi.Pod.Spec.Volumes {
		_, pv, reason := claimedVolume(cs.Snapshot, pi.Pod, &pi.Pod.Spec.Volumes[i])
		if reason != "" {
			return []string{reason}
		}
		if pv == nil {
			continue
		}
		for _, k := range zoneLabelKeys {
			want, ok := pv.Labels[k]
			if !ok {
				continue
			}
			have, ok := ni.Labels[k]
			if !ok || !contains(strings.Split(want, "__"), have) {
				return []string{ReasonVolumeZoneConflict}
			}
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// maxVolumeCount limits how many volumes of one cloud disk type a node
// attaches: counted across its pods and the new one, each disk once.
type maxVolumeCount struct {
	name     string
	limit    int
	resource corev1.ResourceName // allocatable that overrides the limit
	id       func(*corev1.Volume, *corev1.PersistentVolume) string
}

func newMaxEBS() *maxVolumeCount {
	return &maxVolumeCount{name: "MaxEBSVolumeCount", limit: 39, resource: "attachable-volumes-aws-ebs",
		id: func(v *corev1.Volume, pv *corev1.PersistentVolume) string {
			switch {
			case v != nil && v.AWSElasticBlockStore != nil:
				return v.AWSElasticBlockStore.VolumeID
			case pv != nil && pv.Spec.AWSElasticBlockStore != nil:
				return pv.Spec.AWSElasticBlockStore.VolumeID
			case pv != nil && pv.Spec.CSI != nil && pv.Spec.CSI.Driver == "ebs.csi.aws.com":
				return pv.Spec.CSI.VolumeHandle
			}
			return ""
		}}
}

func newMaxGCEPD() *maxVolumeCount {
	return &maxVolumeCount{name: "MaxGCEPDVolumeCount", limit: 16, resource: "attachable-volumes-gce-pd",
		id: func(v *corev1.Volume, pv *corev1.PersistentVolume) string {
			switch {
			case v != nil && v.GCEPersistentDisk != nil:
				return v.GCEPersistentDisk.PDName
			case pv != nil && pv.Spec.GCEPersistentDisk != nil:
				return pv.Spec.GCEPersistentDisk.PDName
			case pv != nil && pv.Spec.CSI != nil && pv.Spec.CSI.Driver == "pd.csi.storage.gke.io":
				return pv.Spec.CSI.VolumeHandle
			}
			return ""
		}}
}

func newMaxAzureDisk() *maxVolumeCount {
	return &maxVolumeCount{name: "MaxAzureDiskVolumeCount", limit: 16, resource: "attachable-volumes-azure-disk",
		id: func(v *corev1.Volume, pv *corev1.PersistentVolume) string {
			switch {
			case v != nil && v.AzureDisk != nil:
				return v.AzureDisk.DiskName
			case pv != nil && pv.Spec.AzureDisk != nil:
				return pv.Spec.AzureDisk.DiskName
			case pv != nil && pv.Spec.CSI != nil && pv.Spec.CSI.Driver == "disk.csi.azure.com":
				return pv.Spec.CSI.VolumeHandle
			}
			return ""
		}}
}

func (p *maxVolumeCount) Name() string { return p.name }

// resolvable: victims' volumes are detached with them.
func (p *maxVolumeCount) resolvable(*PodInfo, *NodeInfo, []string) bool { return true }

func (p *maxVolumeCount) volumes(s *Snapshot, pod *corev1.Pod, into map[string]bool) {
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		var pv *corev1.PersistentVolume
		if _, _, ok := claimName(pod, v); ok {
			_, pv, _ = claimedVolume(s, pod, v)
			v = nil
		}
		if id := p.id(v, pv); id != "" {
			into[id] = true
		}
	}
}

func (p *maxVolumeCount) Filter(cs *CycleState, pi *PodInfo, ni *NodeInfo) []string {
	fresh := map[string]bool{}
	p.volumes(cs.Snapshot, pi.Pod, fresh)
	if len(fresh) == 0 {
		return nil
	}
	existing := map[string]bool{}
	for _, ep := range ni.Pods {
		p.volumes(cs.Snapshot, ep.Pod, existing)
	}
	for id := range fresh {
		if existing[id] {
			delete(fresh, id)
		}
	}
	limit := int64(p.limit)
	if v, ok := ni.Allocatable.Scalar[p.resource]; ok {
		limit = v
	}
	if int64(len(existing)+len(fresh)) > limit {
		return []string{ReasonMaxVolumeCountExceeded}
	}
	return nil
}

// checkVolumeBinding: a bound claim's volume must be reachable from the
// node (its node affinity); an unbound claim of a WaitForFirstConsumer
// class needs a volume that would fit it there and that no other decision
// reserved, or a provisioner that can create one there; an unbound claim
// of an Immediate class must be bound first. The decision records what to
// bind (Decision.VolumeBindings).
type checkVolumeBinding struct{}

func (checkVolumeBinding) Name() string { return "CheckVolumeBinding" }

// PreFilter rejects what no node can change, as upstream's VolumeBinding
// PreFilter does: a claim that cannot be used (missing, lost, being
// deleted, an ephemeral volume's not made for the pod) or an unbound claim
// whose class binds at once, which the volume controller must bind first.
func (checkVolumeBinding) PreFilter(cs *CycleState, pi *PodInfo) {
	if !pi.HasClaims {
		return
	}
	for i := range pi.Pod.Spec.Volumes {
		pvc, _, why := claimedVolume(cs.Snapshot, pi.Pod, &pi.Pod.Spec.Volumes[i])
		switch {
		case why != "":
			cs.Reject("CheckVolumeBinding", why, true)
			return
		case pvc == nil || fullyBound(pvc):
			continue
		}
		if class := storageClass(cs.Snapshot, pvc); pvc.Spec.VolumeName != "" || class == nil || class.VolumeBindingMode == nil ||
			*class.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer {
			cs.Reject("CheckVolumeBinding", ReasonUnboundImmediatePVC, true)
			return
		}
	}
}

// fullyBound is upstream's isPVCFullyBound: a volume named and the volume
// controller's binding done.
func fullyBound(pvc *corev1.PersistentVolumeClaim) bool {
	_, done := pvc.Annotations[annBindCompleted]
	return pvc.Spec.VolumeName != "" && done
}

// annBindCompleted on a claim says the volume controller finished binding
// it.
const annBindCompleted = "pv.kubernetes.io/bind-completed"

func (checkVolumeBinding) Filter(cs *CycleState, pi *PodInfo, ni *NodeInfo) []string {
	if !pi.HasClaims {
		return nil
	}
	if _, reason := bindClaims(cs.Snapshot, pi.Pod, ni.Node); reason != "" {
		return []string{reason}
	}
	return nil
}

func pvReachable(pv *corev1.PersistentVolume, node *corev1.Node) bool {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return true
	}
	ok, err := nodeaffinity.NewLazyErrorNodeSelector(pv.Spec.NodeAffinity.Required).Match(node)
	return err == nil && ok
}

func storageClassName(pvc *corev1.PersistentVolumeClaim) string {
	if pvc.Spec.StorageClassName != nil {
		return *pvc.Spec.StorageClassName
	}
	return ""
}

func hasAccessModes(have, want []corev1.PersistentVolumeAccessMode) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			if h == w {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
