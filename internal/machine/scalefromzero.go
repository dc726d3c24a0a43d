package machine

import (
	"context"
	"fmt"
	"strconv"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capstan-dev/capstan/internal/sim"
)

// The capacity of a MachineSet's machines, which OpenShift's Machine API
// providers stamp on each MachineSet from its instance type, so that the
// cluster autoscaler can scale a MachineSet up from zero.
const (
	CPUAnnotation     = "machine.openshift.io/vCPU"
	MemoryAnnotation  = "machine.openshift.io/memoryMb"
	GPUAnnotation     = "machine.openshift.io/GPU"
	MaxPodsAnnotation = "machine.openshift.io/maxPods"
)

// capacityAnnotations are the scale-from-zero annotations for machines of
// ms, or nil when its provider spec cannot be read (creating a machine
// reports that).
func capacityAnnotations(ms *machinev1.MachineSet) map[string]string {
	spec, err := instanceSpecOfTemplate(ms, ms.Name)
	if err != nil {
		return nil
	}
	return map[string]string{
		CPUAnnotation:     strconv.FormatInt(spec.CPU.Value(), 10),
		MemoryAnnotation:  strconv.FormatInt(spec.Memory.Value()/(1<<20), 10),
		GPUAnnotation:     strconv.FormatInt(spec.GPU, 10),
		MaxPodsAnnotation: strconv.FormatInt(spec.Pods, 10),
	}
}

// stampCapacity writes the scale-from-zero annotations on ms when they are
// missing or out of date.
func (r *machineSetReconciler) stampCapacity(ctx context.Context, ms *machinev1.MachineSet) error {
	want := capacityAnnotations(ms)
	stale := false
	for k, v := range want {
		if ms.Annotations[k] != v {
			stale = true
		}
	}
	if !stale {
		return nil
	}
	base := ms.DeepCopy()
	if ms.Annotations == nil {
		ms.Annotations = map[string]string{}
	}
	for k, v := range want {
		ms.Annotations[k] = v
	}
	if err := r.client.Patch(ctx, ms, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("writing the capacity annotations of machineset %s: %w", ms.Name, err)
	}
	return nil
}

// instanceSpecOfTemplate is the instance a new machine named name of ms
// would be.
func instanceSpecOfTemplate(ms *machinev1.MachineSet, name string) (sim.InstanceSpec, error) {
	ps, err := ParseProviderSpec(ms.Spec.Template.Spec.ProviderSpec)
	if err != nil {
		return sim.InstanceSpec{}, fmt.Errorf("machineset %s: %w", ms.Name, err)
	}
	m := &machinev1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ms.Namespace, Labels: ms.Spec.Template.Labels},
		Spec:       ms.Spec.Template.Spec,
	}
	return instanceSpec(m, ps).WithDefaults(), nil
}

// NodeTemplate is the Node a new machine named name of ms would register:
// its labels, taints and resources, as the simulated cloud will make it.
// The autoscaler simulates new nodes with it.
func NodeTemplate(ms *machinev1.MachineSet, name string) (*corev1.Node, error) {
	spec, err := instanceSpecOfTemplate(ms, name)
	if err != nil {
		return nil, err
	}
	return sim.NodeObject(spec), nil
}
