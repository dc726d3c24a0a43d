package algorithm

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	csitrans "k8s.io/csi-translation-lib"
	csiplugins "k8s.io/csi-translation-lib/plugins"
	"k8s.io/klog/v2"
)

// maxCSIVolumeCount is upstream's NodeVolumeLimits (the legacy
// MaxCSIVolumeCountPred): the node's CSINode says how many volumes each
// CSI driver may attach there (spec.drivers[].allocatable.count); the
// volumes its pods use, each counted once, and the pod's new ones must fit.
// Volumes of in-tree plugins migrated to CSI (AWS EBS, GCE PD, Azure Disk,
// Cinder, Portworx) count for the driver they migrated to. A node without a
// CSINode, or a driver without a count, has no limit.
type maxCSIVolumeCount struct{}

func (maxCSIVolumeCount) Name() string { return "MaxCSIVolumeCountPred" }

// translator maps in-tree volumes to their CSI drivers, as upstream's does.
var translator = csitrans.New()

// unboundHandlePrefix makes the handle of a claim still to be provisioned,
// which no existing volume shares.
const unboundHandlePrefix = "capstan-unbound-"

// resolvable: the victims' volumes are detached with them.
func (maxCSIVolumeCount) resolvable(_ *PodInfo, _ *NodeInfo, reasons []string) bool {
	return reasons[0] == ReasonMaxVolumeCountExceeded
}

func (maxCSIVolumeCount) Filter(cs *CycleState, pi *PodInfo, ni *NodeInfo) []string {
	pod := pi.Pod
	if len(pod.Spec.Volumes) == 0 {
		return nil
	}
	s := cs.Snapshot
	var csiNode *storagev1.CSINode
	if s.CSINodes != nil {
		csiNode, _ = s.CSINodes.Get(ni.Name)
	}
	fresh := map[string]string{}
	if reason := csiVolumes(s, csiNode, pod, true, fresh); reason != "" {
		return []string{reason}
	}
	if len(fresh) == 0 {
		return nil
	}
	limits := csiLimits(csiNode)
	if len(limits) == 0 {
		return nil
	}
	attached := map[string]string{}
	for _, ep := range ni.Pods {
		csiVolumes(s, csiNode, ep.Pod, false, attached)
	}
	perDriver := map[string]int{}
	for id, driver := range attached {
		delete(fresh, id)
		perDriver[driver]++
	}
	added := map[string]int{}
	for _, driver := range fresh {
		added[driver]++
	}
	for driver, n := range added {
		if limit, ok := limits[driver]; ok && int64(perDriver[driver]+n) > limit {
			return []string{ReasonMaxVolumeCountExceeded}
		}
	}
	return nil
}

// csiLimits are a CSINode's attach limits by driver.
func csiLimits(n *storagev1.CSINode) map[string]int64 {
	out := map[string]int64{}
	if n == nil {
		return out
	}
	for _, d := range n.Spec.Drivers {
		if d.Allocatable != nil && d.Allocatable.Count != nil {
			out[d.Name] = int64(*d.Allocatable.Count)
		}
	}
	return out
}

// csiVolumes adds the pod's attachable volumes to into, by
// "driver/handle", with their driver. For the pod being placed (fresh), a
// claim that cannot be read is the reason it fits nowhere; an existing
// pod's is skipped.
func csiVolumes(s *Snapshot, csiNode *storagev1.CSINode, pod *corev1.Pod, fresh bool, into map[string]string) string {
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if _, _, ok := claimName(pod, v); !ok {
			inlineCSIVolume(csiNode, pod, v, into)
			continue
		}
		pvc, pv, reason := claimedVolume(s, pod, v)
		if reason != "" {
			if fresh {
				return reason
			}
			continue
		}
		driver, handle := claimDriver(s, csiNode, pvc, pv)
		if driver != "" && handle != "" {
			into[driver+"/"+handle] = driver
		}
	}
	return ""
}

// migrationOn is upstream's isCSIMigrationOn: the in-tree plugins whose
// migration is on wherever the node has a CSINode.
func migrationOn(csiNode *storagev1.CSINode, plugin string) bool {
	if csiNode == nil {
		return false
	}
	switch plugin {
	case csiplugins.AWSEBSInTreePluginName, csiplugins.PortworxVolumePluginName, csiplugins.GCEPDInTreePluginName,
		csiplugins.AzureDiskInTreePluginName, csiplugins.CinderInTreePluginName:
		return true
	}
	return false
}

// inlineCSIVolume counts an in-tree inline volume migrated to CSI.
func inlineCSIVolume(csiNode *storagev1.CSINode, pod *corev1.Pod, v *corev1.Volume, into map[string]string) {
	if !translator.IsInlineMigratable(v) {
		return
	}
	plugin, err := translator.GetInTreePluginNameFromSpec(nil, v)
	if err != nil || !migrationOn(csiNode, plugin) {
		return
	}
	pv, err := translator.TranslateInTreeInlineVolumeToCSI(klog.Background(), v, pod.Namespace)
	if err != nil || pv == nil || pv.Spec.CSI == nil {
		return
	}
	driver, err := translator.GetCSINameFromInTreeName(plugin)
	if err != nil {
		return
	}
	into[driver+"/"+pv.Spec.CSI.VolumeHandle] = driver
}

// claimDriver is the CSI driver and handle of a claim's volume: its
// volume's (translated when in-tree), or, unbound, its class's
// provisioner's and a handle of its own.
func claimDriver(s *Snapshot, csiNode *storagev1.CSINode, pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume) (string, string) {
	if pv == nil {
		return classDriver(s, csiNode, pvc)
	}
	if pv.Spec.CSI != nil {
		return pv.Spec.CSI.Driver, pv.Spec.CSI.VolumeHandle
	}
	if !translator.IsPVMigratable(pv) {
		return "", ""
	}
	plugin, err := translator.GetInTreePluginNameFromSpec(pv, nil)
	if err != nil || !migrationOn(csiNode, plugin) {
		return "", ""
	}
	csiPV, err := translator.TranslateInTreePVToCSI(klog.Background(), pv)
	if err != nil || csiPV.Spec.CSI == nil {
		return "", ""
	}
	return csiPV.Spec.CSI.Driver, csiPV.Spec.CSI.VolumeHandle
}

func classDriver(s *Snapshot, csiNode *storagev1.CSINode, pvc *corev1.PersistentVolumeClaim) (string, string) {
	name := storageClassName(pvc)
	if name == "" || s.StorageClasses == nil {
		return "", ""
	}
	sc, err := s.StorageClasses.Get(name)
	if err != nil {
		return "", ""
	}
	handle := fmt.Sprintf("%s%s/%s", unboundHandlePrefix, pvc.Namespace, pvc.Name)
	if translator.IsMigratableIntreePluginByName(sc.Provisioner) {
		if !migrationOn(csiNode, sc.Provisioner) {
			return "", ""
		}
		driver, err := translator.GetCSINameFromInTreeName(sc.Provisioner)
		if err != nil {
			return "", ""
		}
		return driver, handle
	}
	return sc.Provisioner, handle
}
