package autoscaler

import (
	"fmt"
	"github.com/capstan-dev/capstan/internal/simclock"
	"k8s.io/utils/clock"
	"path"
	"sort"
	"strconv"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/nodes"
	"github.com/capstan-dev/capstan/internal/sim"
)

// Upstream's scale-from-zero annotations on a MachineSet, preferred over
// the Machine API's own (machine.CPUAnnotation and the others) when set.
const (
	capacityCPUAnnotation     = "capacity.cluster-autoscaler.kubernetes.io/cpu"
	capacityMemoryAnnotation  = "capacity.cluster-autoscaler.kubernetes.io/memory"
	capacityGPUAnnotation     = "capacity.cluster-autoscaler.kubernetes.io/gpu-count"
	capacityGPUTypeAnnotation = "capacity.cluster-autoscaler.kubernetes.io/gpu-type"
	capacityMaxPodsAnnotation = "capacity.cluster-autoscaler.kubernetes.io/maxPods"
)

// GPULabel on a node names its GPU type; the ClusterAutoscaler's GPU
// limits count GPUs by it.
const GPULabel = "cluster-api/accelerator"

// NodeGroup is a MachineSet the autoscaler may resize: one whose max-size
// annotation is above 0 and whose min-size is not above it.
type NodeGroup struct {
	// ID is "MachineSet/<namespace>/<name>", what the priority expander's
	// patterns match, as on OpenShift.
	ID       string
	Set      *machinev1.MachineSet
	Min, Max int
	// Target is the MachineSet's spec.replicas.
	Target int
	// Nodes are the registered nodes of its machines that have started:
	// ready, or not ready for longer than the startup time (MaxNodeStartupTime).
	Nodes []*corev1.Node
	// NotStarted are the registered nodes of its machines that are not
	// ready yet and younger than the startup time: they are still
	// upcoming, and a simulation puts the template in their place.
	NotStarted []*corev1.Node
	// Machines are its machines, deleted ones included.
	Machines []*machinev1.Machine
	// Template is the node a new machine registers as; nil when it cannot
	// be known, with TemplateErr saying why.
	Template    *corev1.Node
	TemplateErr error
	// UnneededTime and UnreadyTime, when set, replace the cluster's for
	// this group (the MachineSet's autoscaling-options annotations).
	UnneededTime, UnreadyTime *time.Duration
}

// The per-group options of the Cluster API provider: annotations of a
// MachineSet that replace the cluster-wide settings for its nodes.
const (
	UnneededTimeAnnotation = "machine.openshift.io/autoscaling-options-scaledownunneededtime"
	UnreadyTimeAnnotation  = "machine.openshift.io/autoscaling-options-scaledownunreadytime"
)

// groupDuration reads a per-group duration option (nil: unset).
func groupDuration(ms *machinev1.MachineSet, key string) (*time.Duration, error) {
	v, ok := ms.Annotations[key]
	if !ok {
		return nil, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return nil, fmt.Errorf("annotation %s=%q is not a duration such as 20m", key, v)
	}
	return &d, nil
}

// Upcoming is how many nodes the group is to have that have not started
// yet: its replicas less the started nodes of its machines. It is read
// from the MachineSet and its machines alone, so a decision made again
// (after a restart, on a stale cache) counts what is under way.
func (g *NodeGroup) Upcoming() int { return max(0, g.Target-len(g.Nodes)) }

// MaxNodeStartupTime is how long a registered node that is not ready is
// taken to be starting (upstream's constant of the same name).
const MaxNodeStartupTime = 15 * time.Minute

// NodeReady is the cluster autoscaler's readiness of a node: Ready, no
// disk pressure, network available, and none of the taints that say
// otherwise (the not-ready taint the TaintNodesByCondition admission
// plugin puts on every new node stays until the node lifecycle controller
// has seen it Ready).
func NodeReady(n *corev1.Node) bool {
	if nodes.ConditionStatus(n, corev1.NodeReady) != corev1.ConditionTrue ||
		nodes.ConditionStatus(n, corev1.NodeDiskPressure) == corev1.ConditionTrue ||
		nodes.ConditionStatus(n, corev1.NodeNetworkUnavailable) == corev1.ConditionTrue {
		return false
	}
	for _, t := range n.Spec.Taints {
		switch t.Key {
		case corev1.TaintNodeNotReady, corev1.TaintNodeDiskPressure, corev1.TaintNodeNetworkUnavailable:
			return false
		}
	}
	return true
}

func (g *NodeGroup) String() string {
	return fmt.Sprintf("%s (min: %d, max: %d, replicas: %d)", g.ID, g.Min, g.Max, g.Target)
}

// groupID names a MachineSet as a node group.
func groupID(ms *machinev1.MachineSet) string { return path.Join("MachineSet", ms.Namespace, ms.Name) }

// BadGroup is a MachineSet whose autoscaling annotations cannot be used.
type BadGroup struct {
	ID  string
	Err error
}

// NodeGroups finds the node groups among sets and ties their machines and
// nodes to them, as of now: a node not ready is starting while younger
// than maxStartup. MachineSets with unusable annotations are
// returned apart, with why.
func NodeGroups(sets []*machinev1.MachineSet, machines []*machinev1.Machine, all []*corev1.Node, c clock.PassiveClock, now time.Time, maxStartup time.Duration) ([]*NodeGroup, []BadGroup) {
	nodesByName := make(map[string]*corev1.Node, len(all))
	for _, n := range all {
		nodesByName[n.Name] = n
	}
	var groups []*NodeGroup
	var bad []BadGroup
	byUID := map[string]*NodeGroup{}
	for _, ms := range sets {
		maxS, hasMax := ms.Annotations[MaxSizeAnnotation]
		if !hasMax || !ms.DeletionTimestamp.IsZero() {
			continue
		}
		g := &NodeGroup{ID: groupID(ms), Set: ms, Target: int(ptr.Deref(ms.Spec.Replicas, 0))}
		minV, err1 := strconv.Atoi(ms.Annotations[MinSizeAnnotation])
		maxV, err2 := strconv.Atoi(maxS)
		switch {
		case err1 != nil || minV < 0:
			bad = append(bad, BadGroup{g.ID, fmt.Errorf("annotation %s=%q is not a number of replicas", MinSizeAnnotation, ms.Annotations[MinSizeAnnotation])})
			continue
		case err2 != nil || maxV < 0:
			bad = append(bad, BadGroup{g.ID, fmt.Errorf("annotation %s=%q is not a number of replicas", MaxSizeAnnotation, maxS)})
			continue
		case maxV < minV:
			bad = append(bad, BadGroup{g.ID, fmt.Errorf("max size %d is below min size %d", maxV, minV)})
			continue
		case maxV == 0:
			continue
		}
		g.Min, g.Max = minV, maxV
		var err error
		if g.UnneededTime, err = groupDuration(ms, UnneededTimeAnnotation); err != nil {
			bad = append(bad, BadGroup{g.ID, err})
			continue
		}
		if g.UnreadyTime, err = groupDuration(ms, UnreadyTimeAnnotation); err != nil {
			bad = append(bad, BadGroup{g.ID, err})
			continue
		}
		g.Template, g.TemplateErr = templateNode(ms)
		groups = append(groups, g)
		byUID[string(ms.UID)] = g
	}
	for _, m := range machines {
		owner := metav1.GetControllerOf(m)
		if owner == nil || owner.Kind != "MachineSet" {
			continue
		}
		g := byUID[string(owner.UID)]
		if g == nil {
			continue
		}
		g.Machines = append(g.Machines, m)
		if m.Status.NodeRef != nil && m.DeletionTimestamp.IsZero() {
			switch n := nodesByName[m.Status.NodeRef.Name]; {
			case n == nil:
			case !NodeReady(n) && simclock.Elapsed(c, sim.NodeCreated(n), now) < maxStartup:
				g.NotStarted = append(g.NotStarted, n)
			default:
				g.Nodes = append(g.Nodes, n)
			}
		}
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i].ID < groups[j].ID })
	return groups, bad
}

// templateNode is the node a new machine of ms registers as: the simulated
// cloud's node for its provider spec, with the capacity the scale-from-zero
// annotations state where they are set (they win, as upstream).
func templateNode(ms *machinev1.MachineSet) (*corev1.Node, error) {
	node, err := machine.NodeTemplate(ms, ms.Name+"-template")
	if err != nil {
		return nil, fmt.Errorf("cannot tell what a new node would be: %w", err)
	}
	ann := ms.Annotations
	set := func(name corev1.ResourceName, q resource.Quantity) {
		node.Status.Capacity[name] = q
		node.Status.Allocatable[name] = q
	}
	for _, a := range []struct {
		key      string
		resource corev1.ResourceName
		unit     int64
	}{
		{machine.CPUAnnotation, corev1.ResourceCPU, 0},
		{capacityCPUAnnotation, corev1.ResourceCPU, 0},
		{machine.MemoryAnnotation, corev1.ResourceMemory, 1 << 20},
		{capacityMemoryAnnotation, corev1.ResourceMemory, 0},
		{machine.MaxPodsAnnotation, corev1.ResourcePods, 0},
		{capacityMaxPodsAnnotation, corev1.ResourcePods, 0},
	} {
		v, ok := ann[a.key]
		if !ok {
			continue
		}
		if a.unit > 0 {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("annotation %s=%q is not a whole number", a.key, v)
			}
			set(a.resource, *resource.NewQuantity(n*a.unit, resource.BinarySI))
			continue
		}
		q, err := resource.ParseQuantity(v)
		if err != nil || q.Sign() < 0 {
			return nil, fmt.Errorf("annotation %s=%q is not a quantity", a.key, v)
		}
		set(a.resource, q)
	}
	gpus, gpuType := ann[machine.GPUAnnotation], "nvidia.com/gpu"
	if v, ok := ann[capacityGPUAnnotation]; ok {
		gpus = v
		if t := ann[capacityGPUTypeAnnotation]; t != "" {
			gpuType = t
		}
	}
	if gpus != "" {
		n, err := strconv.ParseInt(gpus, 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("GPU count %q is not a whole number", gpus)
		}
		if n > 0 {
			set(corev1.ResourceName(gpuType), *resource.NewQuantity(n, resource.DecimalSI))
		} else {
			delete(node.Status.Capacity, corev1.ResourceName(gpuType))
			delete(node.Status.Allocatable, corev1.ResourceName(gpuType))
		}
	}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	return node, nil
}
