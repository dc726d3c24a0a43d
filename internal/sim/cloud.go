// Package sim is capstan's simulated infrastructure: a cloud whose instances
// are kept as API objects, and kwok-style kubelets that turn running
// instances into Nodes, renew their Leases, report conditions and run pods.
// Everything is driven through the Kubernetes API, so it works against any
// cluster and survives restarts.
package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/capstan-dev/capstan/internal/nodes"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Namespace holds the simulated cloud's instances, one ConfigMap each.
const Namespace = "capstan-sim"

// Keys of the labels and annotations the simulator reads and writes.
const (
	// InstanceLabel marks a ConfigMap in Namespace as a cloud instance.
	InstanceLabel = "sim.capstan.dev/instance"
	// MachineLabel on an instance's ConfigMap names the Machine it backs.
	MachineLabel = "sim.capstan.dev/machine"
	// NodeInstanceAnnotation on a Node names the instance behind it; nodes
	// without it are not simulated by capstan and are left alone.
	NodeInstanceAnnotation = "sim.capstan.dev/instance"
	// StoppedAnnotation set to "true" on a Node stops its kubelet: no lease
	// renewals, no status updates, no pod updates.
	StoppedAnnotation = "sim.capstan.dev/stopped"
	// LostSinceAnnotation on a stopped node is when its node was declared
	// lost (RFC 3339), when that was before its kubelet stopped here: a
	// restored snapshot's node that was not ready. The simulator declares
	// it lost at once, as of then.
	LostSinceAnnotation = "sim.capstan.dev/lost-since"
	// ConditionAnnotationPrefix + condition type (e.g. MemoryPressure) on a
	// Node injects that condition's status ("True" or "False").
	ConditionAnnotationPrefix = "condition.sim.capstan.dev/"
	// ShutdownSecondsAnnotation on a Pod is how long its simulated
	// containers take to exit after SIGTERM; without it they use the whole
	// termination grace period, as a process that ignores SIGTERM does.
	ShutdownSecondsAnnotation = "sim.capstan.dev/shutdown-seconds"
	// RunSecondsAnnotation on a Pod that runs to completion (restartPolicy
	// Never or OnFailure, a Job's) is how long its simulated containers
	// work before they exit 0; without it they finish as soon as started.
	RunSecondsAnnotation = "sim.capstan.dev/run-seconds"
	// CreatedAnnotation on a Node is when the node it stands for was
	// created (RFC 3339), where that is earlier than its own
	// creationTimestamp: a simulation restoring a snapshot's nodes sets
	// it, so that a node lost just after the restore is an old node that
	// went away, not a new one still starting.
	CreatedAnnotation = "sim.capstan.dev/created"
	// ProviderIDPrefix starts the provider ID of every simulated instance.
	ProviderIDPrefix = "capstan://"
)

// Well-known label keys set on simulated nodes.
const (
	LabelInstanceType = "node.kubernetes.io/instance-type"
	LabelRegion       = "topology.kubernetes.io/region"
	LabelZone         = "topology.kubernetes.io/zone"
	LabelHostname     = "kubernetes.io/hostname"
	LabelOS           = "kubernetes.io/os"
	LabelArch         = "kubernetes.io/arch"
	LabelRoleMaster   = nodes.LabelRoleMaster
	LabelRoleCP       = nodes.LabelRoleControlPlane
	LabelRoleWorker   = nodes.LabelRoleWorker
	ResourceGPU       = corev1.ResourceName("nvidia.com/gpu")
)

// InstanceSpec is what a caller asks the cloud for.
type InstanceSpec struct {
	// Name of the instance and of its Node; generated when empty.
	Name         string            `json:"name,omitempty"`
	InstanceType string            `json:"instanceType,omitempty"`
	Region       string            `json:"region,omitempty"`
	Zone         string            `json:"zone,omitempty"`
	CPU          resource.Quantity `json:"cpu"`
	Memory       resource.Quantity `json:"memory"`
	Pods         int64             `json:"pods"`
	GPU          int64             `json:"gpu,omitempty"`
	// ExtendedResources are further node resources (example.com/foo: 4).
	ExtendedResources map[corev1.ResourceName]resource.Quantity `json:"extendedResources,omitempty"`
	// Role is "master" or "worker"; masters get the control-plane labels and
	// the node-role.kubernetes.io/master:NoSchedule taint.
	Role   string            `json:"role,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	Taints []corev1.Taint    `json:"taints,omitempty"`
	// Annotations are copied onto the Node when it registers.
	Annotations map[string]string `json:"annotations,omitempty"`
	// Machine names the Machine the instance backs (a tag, as cloud
	// actuators tag their instances). A create for a machine is not
	// idempotent by name, as a cloud's is not: with the ClientToken of
	// the instance already launched under that name, it answers that
	// instance (EC2's ClientToken); without one, it launches another,
	// under a host name of its own.
	Machine     string `json:"machine,omitempty"`
	ClientToken string `json:"clientToken,omitempty"`
}

// InstanceState is the lifecycle of an instance.
type InstanceState string

// Instance states, as clouds name them.
const (
	InstancePending      InstanceState = "pending"
	InstanceRunning      InstanceState = "running"
	InstanceShuttingDown InstanceState = "shutting-down"
)

// Instance is a simulated cloud machine.
type Instance struct {
	Spec InstanceSpec `json:"spec"`
	// ID is the cloud's own name for the instance (i-0123...), generated
	// at launch; the provider ID ends with it.
	ID         string `json:"id,omitempty"`
	ProviderID string `json:"providerID"`
	// Index is unique among live instances; it derives the instance's
	// addresses.
	Index      int       `json:"index"`
	InternalIP string    `json:"internalIP"`
	PodCIDR    string    `json:"podCIDR"`
	LaunchTime time.Time `json:"launchTime"`
	// BootedAt is when the instance is (or was) running and its kubelet
	// registers.
	BootedAt time.Time `json:"bootedAt"`
	// TerminateAt is set once deletion was requested: the instance is gone
	// at that time.
	TerminateAt *time.Time `json:"terminateAt,omitempty"`
}

// Name is the instance's (and its Node's) name.
func (i *Instance) Name() string { return i.Spec.Name }

// State derives the lifecycle state at time now.
func (i *Instance) State(now time.Time) InstanceState {
	switch {
	case i.TerminateAt != nil:
		return InstanceShuttingDown
	case now.Before(i.BootedAt):
		return InstancePending
	default:
		return InstanceRunning
	}
}

// Cloud is the interface of an infrastructure provider, as the Machine API
// actuator and the autoscaler see it. capstan's simulated cloud implements
// it; a real cloud could.
type Cloud interface {
	// CreateInstance launches an instance. It fails with an *InstanceError
	// when the cloud refuses the request.
	CreateInstance(ctx context.Context, spec InstanceSpec) (*Instance, error)
	// DeleteInstance starts terminating an instance; deleting one that does
	// not exist is not an error.
	DeleteInstance(ctx context.Context, name string) error
	// GetInstance returns the instance, or ErrInstanceNotFound once it is
	// gone.
	GetInstance(ctx context.Context, name string) (*Instance, error)
	// ListInstances returns every instance that exists, terminating ones
	// included.
	ListInstances(ctx context.Context) ([]*Instance, error)
}

// ErrInstanceNotFound is returned for instances that do not exist.
var ErrInstanceNotFound = errors.New("instance not found")

// InstanceError is a refusal by the cloud, with a machine-readable reason
// (the Machine API turns it into errorReason / errorMessage).
type InstanceError struct {
	Reason  string
	Message string
}

func (e *InstanceError) Error() string { return e.Reason + ": " + e.Message }

// Reasons of InstanceError.
const (
	ReasonInvalidConfiguration = "InvalidConfiguration"
	ReasonInsufficientCapacity = "InsufficientInstanceCapacity"
	ReasonAlreadyExists        = "InstanceAlreadyExists"
)

// Validate checks a spec the way a cloud API would before launching.
func (s *InstanceSpec) Validate() error {
	var errs []error
	if s.CPU.Sign() <= 0 {
		errs = append(errs, fmt.Errorf("cpu must be positive, got %s", s.CPU.String()))
	}
	if s.Memory.Sign() <= 0 {
		errs = append(errs, fmt.Errorf("memory must be positive, got %s", s.Memory.String()))
	}
	if s.Pods <= 0 {
		errs = append(errs, fmt.Errorf("pods must be positive, got %d", s.Pods))
	}
	if s.Pods > maxPodsPerNode {
		errs = append(errs, fmt.Errorf("pods %d exceeds the %d pod addresses of a simulated node", s.Pods, maxPodsPerNode))
	}
	if s.GPU < 0 {
		errs = append(errs, fmt.Errorf("gpu must not be negative, got %d", s.GPU))
	}
	if s.Role != "" && s.Role != "master" && s.Role != "worker" {
		errs = append(errs, fmt.Errorf("role must be master or worker, got %q", s.Role))
	}
	for i, t := range s.Taints {
		switch t.Effect {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			errs = append(errs, fmt.Errorf("taint %d (%s): effect %q is not NoSchedule, PreferNoSchedule or NoExecute", i, t.Key, t.Effect))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return &InstanceError{Reason: ReasonInvalidConfiguration, Message: err.Error()}
	}
	return nil
}

// NodeCreated is when a node was created: its CreatedAnnotation when that
// is set, valid and not later than its creationTimestamp, else its
// creationTimestamp. (The API keeps whole seconds: an annotation within
// the second after a creationTimestamp is not later than the creation.)
func NodeCreated(n *corev1.Node) time.Time {
	created := n.CreationTimestamp.Time
	if v := n.Annotations[CreatedAnnotation]; v != "" {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil && t.Before(created.Add(time.Second)) {
			return t
		}
	}
	return created
}
