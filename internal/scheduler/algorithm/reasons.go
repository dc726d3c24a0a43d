package algorithm

// Reasons a predicate gives for rejecting a node, worded as the scheduler's
// events show them (counted per reason: "3 node(s) didn't match node
// selector").
const (
	ReasonNodeSelectorNotMatch          = "node(s) didn't match node selector"
	ReasonHostNameNotMatch              = "node(s) didn't match the requested hostname"
	ReasonHostPortsNotFree              = "node(s) didn't have free ports for the requested pod ports"
	ReasonDiskConflict                  = "node(s) had no available disk"
	ReasonVolumeZoneConflict            = "node(s) had no available volume zone"
	ReasonMaxVolumeCountExceeded        = "node(s) exceed max volume count"
	ReasonVolumeNodeAffinityConflict    = "node(s) had volume node affinity conflict"
	ReasonVolumeBindConflict            = "node(s) didn't find available persistent volumes to bind"
	ReasonUnboundImmediatePVC           = "pod has unbound immediate PersistentVolumeClaims"
	ReasonReadWriteOncePodConflict      = "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod"
	ReasonPodAffinityRulesNotMatch      = "node(s) didn't match pod affinity rules"
	ReasonPodAntiAffinityRulesNotMatch  = "node(s) didn't match pod anti-affinity rules"
	ReasonExistingPodsAntiAffinityNotOK = "node(s) didn't satisfy existing pods anti-affinity rules"
	ReasonAffinityTermParseError        = "pod affinity term could not be parsed"
	ReasonNodeLabelPresenceViolated     = "node(s) didn't have the requested labels"
	ReasonServiceAffinityViolated       = "node(s) didn't match service affinity"
	ReasonMemoryPressure                = "node(s) had memory pressure"
	ReasonDiskPressure                  = "node(s) had disk pressure"
	ReasonPIDPressure                   = "node(s) had pid pressure"
	ReasonNodeNotReady                  = "node(s) were not ready"
	ReasonNetworkUnavailable            = "node(s) had unavailable network"
	ReasonNodeUnschedulable             = "node(s) were unschedulable"
	ReasonTooManyPods                   = "Too many pods"
	ReasonSpreadConstraintsNotMatch     = "node(s) didn't match pod topology spread constraints"
	ReasonSpreadMissingLabel            = ReasonSpreadConstraintsNotMatch + " (missing required label)"
	ReasonSpreadConstraintsInvalid      = "pod topology spread constraints could not be parsed"
)

// insufficient is the reason for a resource the node lacks.
func insufficient(resource string) string { return "Insufficient " + resource }

// untoleratedTaint is the reason for a taint the pod does not tolerate, as
// upstream words it: node(s) had untolerated taint {dedicated: groupName}.
func untoleratedTaint(key, value string) string {
	return "node(s) had untolerated taint {" + key + ": " + value + "}"
}
