package v1

import "k8s.io/apimachinery/pkg/runtime"

func copyPtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// DeepCopyInto copies the object into out.
func (in *ClusterAutoscaler) DeepCopyInto(out *ClusterAutoscaler) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	in.Spec.DeepCopyInto(&out.Spec)
	out.Status = in.Status
}

// DeepCopy returns a deep copy.
func (in *ClusterAutoscaler) DeepCopy() *ClusterAutoscaler {
	if in == nil {
		return nil
	}
	out := new(ClusterAutoscaler)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *ClusterAutoscaler) DeepCopyObject() runtime.Object {
	if c := in.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopyInto copies the list into out.
func (in *ClusterAutoscalerList) DeepCopyInto(out *ClusterAutoscalerList) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]ClusterAutoscaler, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopy returns a deep copy.
func (in *ClusterAutoscalerList) DeepCopy() *ClusterAutoscalerList {
	if in == nil {
		return nil
	}
	out := new(ClusterAutoscalerList)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *ClusterAutoscalerList) DeepCopyObject() runtime.Object {
	if c := in.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopyInto copies the spec into out.
func (in *ClusterAutoscalerSpec) DeepCopyInto(out *ClusterAutoscalerSpec) {
	*out = *in
	if in.ResourceLimits != nil {
		rl := *in.ResourceLimits
		rl.MaxNodesTotal = copyPtr(in.ResourceLimits.MaxNodesTotal)
		rl.Cores = copyPtr(in.ResourceLimits.Cores)
		rl.Memory = copyPtr(in.ResourceLimits.Memory)
		rl.GPUS = append([]GPULimit(nil), in.ResourceLimits.GPUS...)
		out.ResourceLimits = &rl
	}
	if in.ScaleDown != nil {
		sd := *in.ScaleDown
		sd.DelayAfterAdd = copyPtr(in.ScaleDown.DelayAfterAdd)
		sd.DelayAfterDelete = copyPtr(in.ScaleDown.DelayAfterDelete)
		sd.DelayAfterFailure = copyPtr(in.ScaleDown.DelayAfterFailure)
		sd.UnneededTime = copyPtr(in.ScaleDown.UnneededTime)
		sd.UtilizationThreshold = copyPtr(in.ScaleDown.UtilizationThreshold)
		sd.CordonNodeBeforeTerminating = copyPtr(in.ScaleDown.CordonNodeBeforeTerminating)
		out.ScaleDown = &sd
	}
	if in.ScaleUp != nil {
		out.ScaleUp = &ScaleUpConfig{NewPodScaleUpDelay: copyPtr(in.ScaleUp.NewPodScaleUpDelay)}
	}
	out.MaxPodGracePeriod = copyPtr(in.MaxPodGracePeriod)
	out.PodPriorityThreshold = copyPtr(in.PodPriorityThreshold)
	out.BalanceSimilarNodeGroups = copyPtr(in.BalanceSimilarNodeGroups)
	out.BalancingIgnoredLabels = append([]string(nil), in.BalancingIgnoredLabels...)
	out.IgnoreDaemonsetsUtilization = copyPtr(in.IgnoreDaemonsetsUtilization)
	out.SkipNodesWithLocalStorage = copyPtr(in.SkipNodesWithLocalStorage)
	out.LogVerbosity = copyPtr(in.LogVerbosity)
	out.Expanders = append([]ExpanderString(nil), in.Expanders...)
	out.EnforceNodeGroupMinSize = copyPtr(in.EnforceNodeGroupMinSize)
	out.StartupTaints = append([]string(nil), in.StartupTaints...)
}
