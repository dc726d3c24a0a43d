package algorithm

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// noDiskConflict: a GCE PD, AWS EBS, RBD or iSCSI volume mounted by a pod
// on the node cannot be mounted again (read-only GCE PD, RBD and iSCSI
// mounts may share).
type noDiskConflict struct{}

func (noDiskConflict) Name() string { return "NoDiskConflict" }

func (noDiskConflict) Filter(_ *CycleState, pi *PodInfo, ni *NodeInfo) []string {
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
	return nil
}

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

// claimedVolume resolves a pod volume to its persistent volume, through its
// claim. It returns the claim, the bound volume (nil while unbound) and
// whether the claim exists.
func claimedVolume(s *Snapshot, ns string, v *corev1.Volume) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume, bool) {
	if v.PersistentVolumeClaim == nil {
		return nil, nil, true
	}
	if s.PersistentVolumeClaims == nil {
		return nil, nil, false
	}
	pvc, err := s.PersistentVolumeClaims.PersistentVolumeClaims(ns).Get(v.PersistentVolumeClaim.ClaimName)
	if err != nil {
		return nil, nil, false
	}
	if pvc.Spec.VolumeName == "" || s.PersistentVolumes == nil {
		return pvc, nil, true
	}
	pv, err := s.PersistentVolumes.Get(pvc.Spec.VolumeName)
	if err != nil {
		return pvc, nil, true
	}
	return pvc, pv, true
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
		_, pv, found := claimedVolume(cs.Snapshot, pi.Pod.Namespace, &pi.Pod.Spec.Volumes[i])
		if !found {
			return []string{ReasonPVCNotFound}
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

func (p *maxVolumeCount) volumes(s *Snapshot, pod *corev1.Pod, into map[string]bool) {
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		var pv *corev1.PersistentVolume
		if v.PersistentVolumeClaim != nil {
			_, pv, _ = claimedVolume(s, pod.Namespace, v)
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
