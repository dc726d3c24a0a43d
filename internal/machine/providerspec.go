package machine

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/capstan-dev/capstan/internal/strictyaml"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/capstan-dev/capstan/internal/sim"
)

// The providerSpec.value of a capstan Machine.
const (
	ProviderSpecAPIVersion = "machine.capstan.dev/v1beta1"
	ProviderSpecKind       = "CapstanMachineProviderSpec"
)

// ProviderSpec is what a Machine asks the simulated cloud for, the way
// AWSMachineProviderConfig is on AWS: an instance type (or explicit cpu and
// memory, which override the type's), and where to put it.
type ProviderSpec struct {
	metav1.TypeMeta `json:",inline"`
	InstanceType    string             `json:"instanceType,omitempty"`
	Region          string             `json:"region,omitempty"`
	Zone            string             `json:"zone,omitempty"`
	CPU             *resource.Quantity `json:"cpu,omitempty"`
	Memory          *resource.Quantity `json:"memory,omitempty"`
	Pods            int64              `json:"pods,omitempty"`
	GPU             int64              `json:"gpu,omitempty"`
	// ExtendedResources are further node resources (example.com/foo: 4).
	ExtendedResources map[corev1.ResourceName]resource.Quantity `json:"extendedResources,omitempty"`
}

// InstanceType is a size of simulated instance.
type InstanceType struct {
	CPU    resource.Quantity
	Memory resource.Quantity
	GPU    int64
}

// InstanceTypes are the simulated cloud's instance types.
var InstanceTypes = map[string]InstanceType{
	"capstan.medium":     {CPU: resource.MustParse("2"), Memory: resource.MustParse("8Gi")},
	"capstan.large":      {CPU: resource.MustParse("4"), Memory: resource.MustParse("16Gi")},
	"capstan.xlarge":     {CPU: resource.MustParse("8"), Memory: resource.MustParse("32Gi")},
	"capstan.2xlarge":    {CPU: resource.MustParse("16"), Memory: resource.MustParse("64Gi")},
	"capstan.gpu.xlarge": {CPU: resource.MustParse("8"), Memory: resource.MustParse("64Gi"), GPU: 1},
}

func instanceTypeNames() []string {
	names := make([]string, 0, len(InstanceTypes))
	for n := range InstanceTypes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// InstanceTypeOf names the catalogue's instance type of exactly this size.
func InstanceTypeOf(cpu, memory resource.Quantity, gpu int64) (string, bool) {
	for _, n := range instanceTypeNames() {
		if t := InstanceTypes[n]; t.CPU.Cmp(cpu) == 0 && t.Memory.Cmp(memory) == 0 && t.GPU == gpu {
			return n, true
		}
	}
	return "", false
}

// RawProviderSpec encodes a provider spec for a Machine.
func RawProviderSpec(ps ProviderSpec) *runtime.RawExtension {
	ps.APIVersion, ps.Kind = ProviderSpecAPIVersion, ProviderSpecKind
	raw, _ := json.Marshal(ps)
	return &runtime.RawExtension{Raw: raw}
}

// ParseProviderSpec decodes and checks a Machine's providerSpec.value.
// Errors describe the field at fault.
func ParseProviderSpec(ps machinev1.ProviderSpec) (*ProviderSpec, error) {
	if ps.Value == nil || len(ps.Value.Raw) == 0 {
		return nil, errors.New("spec.providerSpec.value must be set")
	}
	out := &ProviderSpec{}
	if err := strictyaml.Decode(ps.Value.Raw, out); err != nil {
		return nil, fmt.Errorf("spec.providerSpec.value: %w", err)
	}
	if out.Kind != ProviderSpecKind || out.APIVersion != ProviderSpecAPIVersion {
		return nil, fmt.Errorf("spec.providerSpec.value: kind %q apiVersion %q, want kind %s apiVersion %s",
			out.Kind, out.APIVersion, ProviderSpecKind, ProviderSpecAPIVersion)
	}
	if out.InstanceType == "" && (out.CPU == nil || out.Memory == nil) {
		return nil, errors.New("spec.providerSpec.value: instanceType, or both cpu and memory, must be set")
	}
	if _, known := InstanceTypes[out.InstanceType]; out.InstanceType != "" && !known && (out.CPU == nil || out.Memory == nil) {
		return nil, fmt.Errorf("spec.providerSpec.value.instanceType: unknown instance type %q (known: %s; or set cpu and memory)",
			out.InstanceType, strings.Join(instanceTypeNames(), ", "))
	}
	return out, nil
}

// instanceSpec is what the cloud is asked for to back machine m.
func instanceSpec(m *machinev1.Machine, ps *ProviderSpec) sim.InstanceSpec {
	spec := sim.InstanceSpec{
		Name: m.Name, InstanceType: ps.InstanceType, Region: ps.Region, Zone: ps.Zone,
		Pods: ps.Pods, GPU: ps.GPU, ExtendedResources: ps.ExtendedResources,
		Role: "worker",
	}
	if t, ok := InstanceTypes[ps.InstanceType]; ok {
		spec.CPU, spec.Memory, spec.GPU = t.CPU, t.Memory, max(spec.GPU, t.GPU)
	}
	if ps.CPU != nil {
		spec.CPU = *ps.CPU
	}
	if ps.Memory != nil {
		spec.Memory = *ps.Memory
	}
	if m.Labels[MachineRoleLabel] == "master" {
		spec.Role = "master"
	}
	// The kubelet registers with the machine's labels and taints, as
	// --node-labels and --register-with-taints do; nodelink keeps them.
	if len(m.Spec.Labels) > 0 {
		spec.Labels = map[string]string{}
		for k, v := range m.Spec.Labels {
			spec.Labels[k] = v
		}
	}
	spec.Taints = append([]corev1.Taint(nil), m.Spec.Taints...)
	spec.Annotations = map[string]string{MachineAnnotation: machineAnnotationValue(m)}
	return spec
}
