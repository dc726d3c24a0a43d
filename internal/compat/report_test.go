package compat

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestSetFields(t *testing.T) {
	obj := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"logVerbosity": int64(4),
		"scaleDown":    map[string]any{"enabled": true, "cordonNodeBeforeTerminating": ""},
	}}}
	got, err := SetFields("ClusterAutoscaler", obj)
	if err != nil || len(got) != 1 || got[0].Path != "spec.logVerbosity" {
		t.Errorf("set fields %+v (%v), want spec.logVerbosity alone (an empty string is unset)", got, err)
	}
	cpms := map[string]any{"spec": map[string]any{"template": map[string]any{"machines_v1beta1_machine_openshift_io": map[string]any{
		"failureDomains": map[string]any{"platform": "AWS", "aws": []any{
			map[string]any{"placement": map[string]any{"availabilityZone": "a"}},
			map[string]any{"placement": map[string]any{"availabilityZone": "b"}, "subnet": map[string]any{"type": "ID", "id": "subnet-1"}},
		}}}}}}
	got, err = SetFields("ControlPlaneMachineSet", cpms)
	if err != nil || len(got) != 1 || got[0].Path != "spec.template.machines_v1beta1_machine_openshift_io.failureDomains.aws[].subnet" {
		t.Errorf("set fields %+v (%v), want the AWS subnet (set on one item of the list)", got, err)
	}
}
