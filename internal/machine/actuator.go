package machine

import (
	"context"
	"errors"
	"fmt"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/failpoint"
	"github.com/capstan-dev/capstan/internal/planted"
	"github.com/capstan-dev/capstan/internal/sim"
)

// Actuator is what the machine controller needs of an infrastructure
// provider; capstan's runs on the simulated cloud, a real cloud could
// implement it.
type Actuator interface {
	// Create launches the machine's instance. A *MachineError with reason
	// InvalidConfiguration or InsufficientResources is a refusal the
	// machine cannot recover from: it goes Failed.
	Create(ctx context.Context, m *machinev1.Machine) error
	// Exists reports whether the instance exists (a terminating one does).
	Exists(ctx context.Context, m *machinev1.Machine) (bool, error)
	// Update fills what the cloud knows into m: spec.providerID,
	// status.addresses, the instance-state annotation, and the
	// instance-type, region and zone labels. It writes nothing.
	Update(ctx context.Context, m *machinev1.Machine) error
	// Delete starts terminating the instance; a missing one is not an
	// error.
	Delete(ctx context.Context, m *machinev1.Machine) error
}

// MachineError is a refusal with a machine status error reason.
type MachineError struct {
	Reason  machinev1.MachineStatusError
	Message string
}

func (e *MachineError) Error() string { return e.Message }

// SimActuator backs machines with instances of the simulated cloud, named
// after their machines.
type SimActuator struct {
	Cloud sim.Cloud
}

var _ Actuator = (*SimActuator)(nil)

// Create implements Actuator.
func (a *SimActuator) Create(ctx context.Context, m *machinev1.Machine) error {
	ps, err := ParseProviderSpec(m.Spec.ProviderSpec)
	if err != nil {
		return &MachineError{Reason: machinev1.InvalidConfigurationMachineError, Message: err.Error()}
	}
	spec := instanceSpec(m, ps)
	// The machine's UID makes a retry of the same create (its answer
	// lost) return the instance it launched, as a cloud actuator's
	// client token does.
	spec.Machine, spec.ClientToken = m.Name, string(m.UID)
	if planted.On(planted.CreateNotIdempotent) {
		spec.ClientToken = ""
	}
	_, err = a.Cloud.CreateInstance(ctx, spec)
	var ie *sim.InstanceError
	if errors.As(err, &ie) {
		switch ie.Reason {
		case sim.ReasonAlreadyExists:
			return nil // created before a restart: Create is idempotent
		case sim.ReasonInvalidConfiguration:
			return &MachineError{Reason: machinev1.InvalidConfigurationMachineError, Message: ie.Message}
		case sim.ReasonInsufficientCapacity:
			return &MachineError{Reason: machinev1.InsufficientResourcesMachineError, Message: ie.Error()}
		}
		return &MachineError{Reason: machinev1.CreateMachineError, Message: ie.Error()}
	}
	return err
}

// describe reads the instance of a machine from the cloud's API, which
// may lag behind its launches (failpoint.CloudDescribeLags): before the
// machine records its instance, the describe that decides whether to
// launch may not see the one a create whose answer was lost launched.
func (a *SimActuator) describe(ctx context.Context, m *machinev1.Machine) (*sim.Instance, error) {
	inst, err := a.Cloud.GetInstance(ctx, m.Name)
	if err == nil && m.Spec.ProviderID == nil && timeNow().Sub(inst.LaunchTime) < failpoint.DescribeLag &&
		failpoint.Fail(failpoint.CloudDescribeLags) != nil {
		return nil, sim.ErrInstanceNotFound
	}
	return inst, err
}

// Exists implements Actuator.
func (a *SimActuator) Exists(ctx context.Context, m *machinev1.Machine) (bool, error) {
	_, err := a.describe(ctx, m)
	if errors.Is(err, sim.ErrInstanceNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Update implements Actuator.
func (a *SimActuator) Update(ctx context.Context, m *machinev1.Machine) error {
	inst, err := a.describe(ctx, m)
	if err != nil {
		return fmt.Errorf("reading instance %s: %w", m.Name, err)
	}
	m.Spec.ProviderID = ptr.To(inst.ProviderID)
	m.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: inst.InternalIP},
		{Type: corev1.NodeInternalDNS, Address: inst.Name()},
		{Type: corev1.NodeHostName, Address: inst.Name()},
	}
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[InstanceStateAnnotation] = string(inst.State(timeNow()))
	if m.Labels == nil {
		m.Labels = map[string]string{}
	}
	m.Labels[InstanceTypeLabel] = inst.Spec.InstanceType
	m.Labels[RegionLabel] = inst.Spec.Region
	m.Labels[ZoneLabel] = inst.Spec.Zone
	return nil
}

// Delete implements Actuator.
func (a *SimActuator) Delete(ctx context.Context, m *machinev1.Machine) error {
	return a.Cloud.DeleteInstance(ctx, m.Name)
}
