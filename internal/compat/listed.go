package compat

import (
	"fmt"
	"strings"
)

// NotHonoured is a spec field capstan serves and does not act on, with
// what happens instead; a field listed covers those beneath it.
type NotHonoured struct {
	Kind, Path, Instead string
	// Report: capstan says so, in a Warning event on the object, when a
	// user sets the field (fields capstan itself or the API sets, such as
	// an owner reference's blockOwnerDeletion, are not reported).
	Report bool
}

const (
	notSimulated = "not applicable to the simulated cloud: "
	notBuilt     = "not built: "
)

// Fields are the spec fields capstan does not honour (docs/compatibility.md
// is made from them).
var Fields = []NotHonoured{
	{"ClusterAutoscaler", "spec.enforceNodeGroupMinSize", notBuilt + "a MachineSet below its MachineAutoscaler's minimum is not scaled up to it unless pods need the nodes", true},
	{"ClusterAutoscaler", "spec.logVerbosity", "capstan's autoscaler logs at capstan's own verbosity (-v)", true},
	{"ControlPlaneMachineSet", "spec.template.machines_v1beta1_machine_openshift_io.failureDomains.aws[].subnet", notSimulated + "machines are placed by zone only", true},
	{"ControlPlaneMachineSet", "spec.template.machines_v1beta1_machine_openshift_io.failureDomains.azure[].subnet", notSimulated + "machines are placed by zone only", true},
	{"ControlPlaneMachineSet", "spec.template.machines_v1beta1_machine_openshift_io.failureDomains.nutanix", notSimulated + "refused with an InvalidFailureDomains event; the machines are not changed", false},
	{"ControlPlaneMachineSet", "spec.template.machines_v1beta1_machine_openshift_io.failureDomains.openstack", notSimulated + "refused with an InvalidFailureDomains event; the machines are not changed", false},
	{"ControlPlaneMachineSet", "spec.template.machines_v1beta1_machine_openshift_io.failureDomains.vsphere", notSimulated + "refused with an InvalidFailureDomains event; the machines are not changed", false},
	{"ControlPlaneMachineSet", "spec.template.machines_v1beta1_machine_openshift_io.spec.metadata.ownerReferences[].blockOwnerDeletion", "garbage collection's, as in Kubernetes: nothing of the Machine API reads it", false},
	{"Machine", "spec.metadata.ownerReferences[].blockOwnerDeletion", "garbage collection's, as in Kubernetes: nothing of the Machine API reads it", false},
	{"MachineSet", "spec.template.metadata.ownerReferences[].blockOwnerDeletion", "garbage collection's, as in Kubernetes: nothing of the Machine API reads it", false},
	{"MachineSet", "spec.template.spec.metadata.ownerReferences[].blockOwnerDeletion", "garbage collection's, as in Kubernetes: nothing of the Machine API reads it", false},
	{"MachineHealthCheck", "spec.remediationTemplate.fieldPath", "not part of a template reference: the template is found by apiVersion, kind, namespace and name, as the Machine API finds it", false},
	{"MachineConfigPool", "spec.configuration.fieldPath", "written by the controller with the rendered configuration; nothing reads it, as in OpenShift", false},
	{"MachineConfigPool", "spec.configuration.source[].fieldPath", "written by the controller with the rendered configuration; nothing reads it, as in OpenShift", false},
	{"MachineConfigPool", "spec.osImageStream", notBuilt + "the pool's OS image comes from the release (machine-config-osimageurl) or a MachineConfig's osImageURL", true},
	{"MachineConfigPool", "spec.pinnedImageSets", notSimulated + "the simulated nodes pull no images; pinned image sets are not prefetched", true},
	{"MachineConfiguration", "spec.bootImageSkewEnforcement", notSimulated + "machines boot the instance type's simulated image", true},
	{"MachineConfiguration", "spec.managedBootImages", notSimulated + "MachineSets' boot images are not updated", true},
	{"MachineConfiguration", "spec.managementState", notBuilt + "the MCO runs Managed; Unmanaged and Removed change nothing", true},
	{"MachineConfiguration", "spec.failedRevisionLimit", "static-pod operator settings: the MCO runs no static pods", false},
	{"MachineConfiguration", "spec.succeededRevisionLimit", "static-pod operator settings: the MCO runs no static pods", false},
	{"MachineConfiguration", "spec.forceRedeploymentReason", "static-pod operator settings: the MCO runs no static pods", false},
	{"MachineConfiguration", "spec.observedConfig", "written by operators, not users", false},
	{"MachineConfiguration", "spec.operatorLogLevel", "the MCO logs at capstan's own verbosity (-v)", true},
	{"MachineConfiguration", "spec.unsupportedConfigOverrides", "unsupported in OpenShift; ignored", true},
	{"Node", "spec.configSource", "removed from Kubernetes (dynamic kubelet configuration); the simulated kubelet ignores it, as kubelets do", false},
	{"Node", "spec.externalID", "deprecated and unused in Kubernetes", false},
	{"Pod", "spec.automountServiceAccountToken", notSimulated + "the simulated kubelet mounts nothing", false},
	{"Pod", "spec.dnsConfig", notSimulated + "simulated pods have no network", false},
	{"Pod", "spec.dnsPolicy", notSimulated + "simulated pods have no network", false},
	{"Pod", "spec.enableServiceLinks", notSimulated + "simulated pods have no environment", false},
	{"Pod", "spec.hostAliases", notSimulated + "simulated pods have no network", false},
	{"Pod", "spec.hostIPC", notSimulated + "simulated containers share nothing with the host; scheduling does not depend on it", false},
	{"Pod", "spec.hostPID", notSimulated + "simulated containers share nothing with the host; scheduling does not depend on it", false},
	{"Pod", "spec.hostUsers", notSimulated + "simulated containers have no user namespaces; scheduling does not depend on it", false},
	{"Pod", "spec.hostnameOverride", notSimulated + "simulated pods have no hostname", false},
	{"Pod", "spec.imagePullSecrets", notSimulated + "the simulated kubelet pulls no images", false},
	{"Pod", "spec.readinessGates", notBuilt + "a simulated pod is Ready when its containers are; gates are not waited for", false},
	{"Pod", "spec.runtimeClassName", notBuilt + "RuntimeClass scheduling (its node selector, tolerations and overhead) is not applied; the API server's RuntimeClass admission still adds the overhead", false},
	{"Pod", "spec.schedulingGroup", notBuilt + "gang scheduling (alpha in Kubernetes 1.36) is not simulated: each pod is scheduled alone", false},
	{"Pod", "spec.securityContext", notSimulated + "simulated containers run no processes; scheduling does not depend on it", false},
	{"Pod", "spec.setHostnameAsFQDN", notSimulated + "simulated pods have no hostname", false},
	{"Pod", "spec.shareProcessNamespace", notSimulated + "simulated containers run no processes", false},
	{"PodDisruptionBudget", "spec.minAvailable", "read by Kubernetes' disruption controller, whose status.disruptionsAllowed capstan's drains and autoscaler decide on", false},
	{"PodDisruptionBudget", "spec.unhealthyPodEvictionPolicy", "applied by the API server's eviction, which capstan's drains go through", false},
	{"Scheduler", "spec.mastersSchedulable", notBuilt + "control-plane nodes keep their NoSchedule taint and take no workloads", false},
	{"Scheduler", "spec.policy", "capstan's scheduler takes its Policy file from capstan up --scheduler-policy, not from this ConfigMap (deprecated in OpenShift 4)", false},
	{"Scheduler", "spec.profile", notBuilt + "the default-scheduler runs its Policy; the LowNodeUtilization, HighNodeUtilization and NoScoring profiles are not mapped to one", false},
}

// Listed maps "Kind spec.path" to what happens instead.
func Listed() (map[string]string, error) {
	out := map[string]string{}
	for _, f := range Fields {
		key := f.Kind + " " + f.Path
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("%s is listed twice", key)
		}
		if strings.TrimSpace(f.Instead) == "" {
			return nil, fmt.Errorf("%s is listed without what happens instead", key)
		}
		out[key] = f.Instead
	}
	return out, nil
}

// Document is docs/compatibility.md.
func Document() string {
	var b strings.Builder
	b.WriteString(`# Compatibility: the fields capstan does not honour

capstan serves OpenShift's and Kubernetes' schemas whole, so that what
runs against OpenShift runs against capstan. Every spec field of the kinds
its controllers own or act on is read by them, except those below, each
with what happens instead. A test (` + "`go test ./internal/compat`" + `) lists every
spec field from the served schemas and fails on one no code reads that
this page does not name. Where a row says so, capstan records a Warning
event, ` + "`FieldNotHonoured`" + `, on an object that sets the field, once per change of
its spec.

This page is generated from internal/compat/listed.go
(` + "`CAPSTAN_UPDATE_DOCS=1 go test ./internal/compat`" + `).

<!-- example: illustrative -->
| Kind | Field | What happens instead |
|---|---|---|
`)
	for _, f := range Fields {
		fmt.Fprintf(&b, "| %s | `%s` | %s%s |\n", f.Kind, f.Path, f.Instead, map[bool]string{true: " (reported)", false: ""}[f.Report])
	}
	return b.String()
}
