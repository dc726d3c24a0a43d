package algorithm

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/utils/ptr"
)

func cpuMem(cpu, mem string) corev1.ResourceRequirements {
	rl := corev1.ResourceList{}
	if cpu != "" {
		rl[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		rl[corev1.ResourceMemory] = resource.MustParse(mem)
	}
	return corev1.ResourceRequirements{Requests: rl}
}

func ctr(name, cpu, mem string) corev1.Container {
	return corev1.Container{Name: name, Resources: cpuMem(cpu, mem)}
}

func sidecar(name, cpu, mem string) corev1.Container {
	c := ctr(name, cpu, mem)
	c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	return c
}

// The requests the scheduler accounts are upstream's: each case says what
// kube-scheduler counts (milli-CPU, and the non-zero CPU and memory of the
// scoring functions), and the helper upstream uses must agree. The sidecar
// started after an init container and the pod-level cases are those the
// earlier hand-written count got wrong.
func TestPodRequestsMatchUpstream(t *testing.T) {
	const mi = 1 << 20
	cases := []struct {
		name            string
		spec            corev1.PodSpec
		cpu, nonZeroCPU int64
		nonZeroMem      int64
	}{
		{name: "containers add up", spec: corev1.PodSpec{Containers: []corev1.Container{ctr("a", "1", "1Gi"), ctr("b", "500m", "")}},
			cpu: 1500, nonZeroCPU: 1500, nonZeroMem: 1024*mi + DefaultMemoryRequest},
		{name: "a plain init container larger than the containers", spec: corev1.PodSpec{
			InitContainers: []corev1.Container{ctr("init", "3", "")}, Containers: []corev1.Container{ctr("a", "1", "")}},
			cpu: 3000, nonZeroCPU: 3000, nonZeroMem: DefaultMemoryRequest},
		{name: "a sidecar runs beside the init containers after it", spec: corev1.PodSpec{
			InitContainers: []corev1.Container{sidecar("proxy", "500m", ""), ctr("init", "2", "")}, Containers: []corev1.Container{ctr("a", "1", "")}},
			cpu: 2500, nonZeroCPU: 2500, nonZeroMem: 2 * DefaultMemoryRequest},
		{name: "a sidecar started after an init container does not add to it", spec: corev1.PodSpec{
			InitContainers: []corev1.Container{ctr("init", "2", ""), sidecar("proxy", "500m", "")}, Containers: []corev1.Container{ctr("a", "1", "")}},
			cpu: 2000, nonZeroCPU: 2000, nonZeroMem: 2 * DefaultMemoryRequest},
		{name: "pod-level requests win over the containers'", spec: corev1.PodSpec{
			Resources:  &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("2Gi")}},
			Containers: []corev1.Container{ctr("a", "1", "512Mi")}},
			cpu: 4000, nonZeroCPU: 4000, nonZeroMem: 2048 * mi},
		{name: "pod-level memory only: CPU defaults for scoring", spec: corev1.PodSpec{
			Resources:  &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}},
			Containers: []corev1.Container{ctr("a", "", "")}},
			cpu: 0, nonZeroCPU: DefaultMilliCPURequest, nonZeroMem: 1024 * mi},
		{name: "overhead is added", spec: corev1.PodSpec{Overhead: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")},
			Containers: []corev1.Container{ctr("a", "1", "")}},
			cpu: 1250, nonZeroCPU: 1250, nonZeroMem: DefaultMemoryRequest},
		{name: "best effort gets the scoring defaults", spec: corev1.PodSpec{Containers: []corev1.Container{ctr("a", "", ""), ctr("b", "", "")}},
			cpu: 0, nonZeroCPU: 2 * DefaultMilliCPURequest, nonZeroMem: 2 * DefaultMemoryRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: tc.spec}
			req, nzCPU, nzMem := podRequests(pod)
			if req.MilliCPU != tc.cpu || nzCPU != tc.nonZeroCPU || nzMem != tc.nonZeroMem {
				t.Errorf("requests %dm (non-zero %dm, %d bytes), want %dm (non-zero %dm, %d bytes)", req.MilliCPU, nzCPU, nzMem, tc.cpu, tc.nonZeroCPU, tc.nonZeroMem)
			}
			up := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{UseStatusResources: true})
			if up.Cpu().MilliValue() != req.MilliCPU || up.Memory().Value() != req.Memory {
				t.Errorf("upstream counts %s CPU %s memory, capstan %dm %d", up.Cpu(), up.Memory(), req.MilliCPU, req.Memory)
			}
		})
	}
}
