// Package v1beta1 holds the autoscaling.openshift.io/v1beta1 API: the
// MachineAutoscaler, which makes a MachineSet a node group of the cluster
// autoscaler between a minimum and a maximum number of replicas. The types
// follow OpenShift's cluster-autoscaler-operator field for field.
package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// SchemeGroupVersion is autoscaling.openshift.io/v1beta1.
var SchemeGroupVersion = schema.GroupVersion{Group: "autoscaling.openshift.io", Version: "v1beta1"}

var (
	schemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme registers the v1beta1 types.
	AddToScheme = schemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &MachineAutoscaler{}, &MachineAutoscalerList{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}

// MachineAutoscaler lets the cluster autoscaler scale its target MachineSet
// between MinReplicas and MaxReplicas.
type MachineAutoscaler struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   MachineAutoscalerSpec   `json:"spec"`
	Status MachineAutoscalerStatus `json:"status,omitempty"`
}

// MachineAutoscalerList is a list of MachineAutoscalers.
type MachineAutoscalerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MachineAutoscaler `json:"items"`
}

// MachineAutoscalerSpec bounds the target's replicas.
type MachineAutoscalerSpec struct {
	// MinReplicas is the fewest replicas the autoscaler leaves.
	MinReplicas int32 `json:"minReplicas"`
	// MaxReplicas is the most replicas the autoscaler adds up to.
	MaxReplicas int32 `json:"maxReplicas"`
	// ScaleTargetRef is the MachineSet to scale.
	ScaleTargetRef CrossVersionObjectReference `json:"scaleTargetRef"`
}

// MachineAutoscalerStatus records the target last configured, so that the
// annotations are taken off it when the target changes.
type MachineAutoscalerStatus struct {
	LastTargetRef *CrossVersionObjectReference `json:"lastTargetRef,omitempty"`
}

// CrossVersionObjectReference names an object of the MachineAutoscaler's
// namespace.
type CrossVersionObjectReference struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
}

// DeepCopyInto copies the object into out.
func (in *MachineAutoscaler) DeepCopyInto(out *MachineAutoscaler) {
	*out = *in
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if in.Status.LastTargetRef != nil {
		ref := *in.Status.LastTargetRef
		out.Status.LastTargetRef = &ref
	}
}

// DeepCopy returns a deep copy.
func (in *MachineAutoscaler) DeepCopy() *MachineAutoscaler {
	if in == nil {
		return nil
	}
	out := new(MachineAutoscaler)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *MachineAutoscaler) DeepCopyObject() runtime.Object {
	if c := in.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopyInto copies the list into out.
func (in *MachineAutoscalerList) DeepCopyInto(out *MachineAutoscalerList) {
	*out = *in
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]MachineAutoscaler, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopy returns a deep copy.
func (in *MachineAutoscalerList) DeepCopy() *MachineAutoscalerList {
	if in == nil {
		return nil
	}
	out := new(MachineAutoscalerList)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *MachineAutoscalerList) DeepCopyObject() runtime.Object {
	if c := in.DeepCopy(); c != nil {
		return c
	}
	return nil
}
