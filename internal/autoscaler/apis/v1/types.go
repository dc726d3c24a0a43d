// Package v1 holds the autoscaling.openshift.io/v1 API: the
// ClusterAutoscaler, which configures the cluster autoscaler. The types
// follow OpenShift's cluster-autoscaler-operator field for field, so the
// documentation's manifests apply unchanged; the operator's Go module is
// not importable here, so they are written out again.
package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of the autoscaler's objects.
const GroupName = "autoscaling.openshift.io"

// SchemeGroupVersion is autoscaling.openshift.io/v1.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1"}

// DefaultName is the only name a ClusterAutoscaler may have.
const DefaultName = "default"

var (
	schemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme registers the v1 types.
	AddToScheme = schemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &ClusterAutoscaler{}, &ClusterAutoscalerList{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}

// ClusterAutoscaler configures the cluster autoscaler. It is cluster-scoped
// and only the name "default" is accepted.
type ClusterAutoscaler struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ClusterAutoscalerSpec   `json:"spec,omitempty"`
	Status ClusterAutoscalerStatus `json:"status,omitempty"`
}

// ClusterAutoscalerList is a list of ClusterAutoscalers.
type ClusterAutoscalerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterAutoscaler `json:"items"`
}

// ClusterAutoscalerSpec is the autoscaler's configuration.
type ClusterAutoscalerSpec struct {
	// ResourceLimits bound the totals over all nodes of the cluster,
	// control plane included.
	ResourceLimits *ResourceLimits `json:"resourceLimits,omitempty"`
	// ScaleDown configures the removal of unneeded nodes.
	ScaleDown *ScaleDownConfig `json:"scaleDown,omitempty"`
	// ScaleUp configures the addition of nodes.
	ScaleUp *ScaleUpConfig `json:"scaleUp,omitempty"`
	// MaxPodGracePeriod caps, in seconds, the grace period a pod gets when
	// its node is scaled down.
	MaxPodGracePeriod *int32 `json:"maxPodGracePeriod,omitempty"`
	// MaxNodeProvisionTime is how long a new node may take to register
	// before its node group is considered failed, e.g. "15m".
	MaxNodeProvisionTime string `json:"maxNodeProvisionTime,omitempty"`
	// PodPriorityThreshold is the priority below which pods neither
	// trigger a scale-up nor block a scale-down (they are expendable).
	PodPriorityThreshold *int32 `json:"podPriorityThreshold,omitempty"`
	// BalanceSimilarNodeGroups spreads a scale-up over node groups that
	// differ only by zone.
	BalanceSimilarNodeGroups *bool `json:"balanceSimilarNodeGroups,omitempty"`
	// BalancingIgnoredLabels are further labels ignored when comparing
	// node groups for balancing.
	BalancingIgnoredLabels []string `json:"balancingIgnoredLabels,omitempty"`
	// IgnoreDaemonsetsUtilization leaves daemon set pods out of a node's
	// utilization.
	IgnoreDaemonsetsUtilization *bool `json:"ignoreDaemonsetsUtilization,omitempty"`
	// SkipNodesWithLocalStorage keeps nodes whose pods use local storage
	// (emptyDir, hostPath); true by default.
	SkipNodesWithLocalStorage *bool `json:"skipNodesWithLocalStorage,omitempty"`
	// LogVerbosity is the autoscaler's log level.
	LogVerbosity *int32 `json:"logVerbosity,omitempty"`
	// Expanders choose among node groups that can take the pending pods,
	// applied in order.
	Expanders []ExpanderString `json:"expanders"`
	// EnforceNodeGroupMinSize scales node groups below their minimum up
	// to it.
	EnforceNodeGroupMinSize *EnabledDisabled `json:"enforceNodeGroupMinSize,omitempty"`
	// StartupTaints are taint keys a new node carries until it is ready
	// for pods; the autoscaler ignores them on its simulated nodes.
	StartupTaints []string `json:"startupTaints,omitempty"`
}

// ClusterAutoscalerStatus is empty, as OpenShift's: the autoscaler reports
// in the cluster-autoscaler-status ConfigMap, events and node conditions.
type ClusterAutoscalerStatus struct{}

// ResourceLimits bound cluster totals.
type ResourceLimits struct {
	// MaxNodesTotal is the most nodes the cluster may have, every machine
	// counted.
	MaxNodesTotal *int32 `json:"maxNodesTotal,omitempty"`
	// Cores bounds the total CPU cores.
	Cores *ResourceRange `json:"cores,omitempty"`
	// Memory bounds the total memory, in GiB.
	Memory *ResourceRange `json:"memory,omitempty"`
	// GPUS bounds the total of each GPU type.
	GPUS []GPULimit `json:"gpus,omitempty"`
}

// ResourceRange is a minimum and a maximum.
type ResourceRange struct {
	Min int32 `json:"min"`
	Max int32 `json:"max"`
}

// GPULimit bounds the GPUs of one type (the value of the node label
// cluster-api/accelerator, or the resource name nvidia.com/gpu).
type GPULimit struct {
	Type string `json:"type"`
	Min  int32  `json:"min"`
	Max  int32  `json:"max"`
}

// ScaleDownConfig configures scale-down.
type ScaleDownConfig struct {
	// Enabled allows the removal of unneeded nodes.
	Enabled bool `json:"enabled"`
	// DelayAfterAdd is how long after a scale-up scale-down resumes.
	DelayAfterAdd *string `json:"delayAfterAdd,omitempty"`
	// DelayAfterDelete is how long after a node deletion scale-down
	// resumes.
	DelayAfterDelete *string `json:"delayAfterDelete,omitempty"`
	// DelayAfterFailure is how long after a failed scale-down it resumes.
	DelayAfterFailure *string `json:"delayAfterFailure,omitempty"`
	// UnneededTime is how long a node must be unneeded before it goes.
	UnneededTime *string `json:"unneededTime,omitempty"`
	// UtilizationThreshold is the utilization (requests over allocatable)
	// below which a node is a candidate, between 0 and 1, e.g. "0.5".
	UtilizationThreshold *string `json:"utilizationThreshold,omitempty"`
	// CordonNodeBeforeTerminating cordons a node before it is removed.
	CordonNodeBeforeTerminating *EnabledDisabled `json:"cordonNodeBeforeTerminating,omitempty"`
}

// ScaleUpConfig configures scale-up.
type ScaleUpConfig struct {
	// NewPodScaleUpDelay is how old an unschedulable pod must be before it
	// is considered for a scale-up.
	NewPodScaleUpDelay *string `json:"newPodScaleUpDelay,omitempty"`
}

// ExpanderString names an expander.
type ExpanderString string

// The expanders. MostPods is capstan's addition to OpenShift's three; it is
// upstream's most-pods.
const (
	LeastWasteExpander ExpanderString = "LeastWaste"
	PriorityExpander   ExpanderString = "Priority"
	RandomExpander     ExpanderString = "Random"
	MostPodsExpander   ExpanderString = "MostPods"
)

// EnabledDisabled is Enabled or Disabled.
type EnabledDisabled string

// The values of an EnabledDisabled.
const (
	Enabled  EnabledDisabled = "Enabled"
	Disabled EnabledDisabled = "Disabled"
)
