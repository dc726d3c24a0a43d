package autoscaler

// Event reasons, with upstream's names.
const (
	// On pods.
	ReasonTriggeredScaleUp  = "TriggeredScaleUp"
	ReasonNotTriggerScaleUp = "NotTriggerScaleUp"
	// On the status ConfigMap.
	ReasonScaledUpGroup         = "ScaledUpGroup"
	ReasonFailedToScaleUpGroup  = "FailedToScaleUpGroup"
	ReasonScaleUpTimedOut       = "ScaleUpTimedOut"
	ReasonScaleUpFailed         = "ScaleUpFailed"
	ReasonMaxNodesTotalReached  = "MaxNodesTotalReached"
	ReasonScaleDown             = "ScaleDown"
	ReasonScaleDownEmpty        = "ScaleDownEmpty"
	ReasonScaleDownFailed       = "ScaleDownFailed"
	ReasonClusterAutoscalerInit = "ClusterAutoscalerCleanup"
	// On a MachineSet whose annotations cannot be used (capstan's).
	ReasonInvalidNodeGroup = "InvalidNodeGroup"
	// On the ClusterAutoscaler whose spec cannot be used (capstan's).
	ReasonInvalidConfiguration = "InvalidConfiguration"
)
