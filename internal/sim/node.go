package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/capstan-dev/capstan/internal/nodes"
	taintutil "github.com/capstan-dev/capstan/internal/taints"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// KubeletVersion is what simulated kubelets report.
const KubeletVersion = "v1.36.3"

// InjectableConditions are the node conditions a fault can set.
var InjectableConditions = []corev1.NodeConditionType{
	corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure,
	corev1.NodePIDPressure, corev1.NodeNetworkUnavailable,
}

// conditionText holds the reason and message a kubelet (or, for
// NetworkUnavailable, the route controller) reports for each status.
var conditionText = map[corev1.NodeConditionType]map[corev1.ConditionStatus][2]string{
	corev1.NodeReady: {
		corev1.ConditionTrue:  {"KubeletReady", "kubelet is posting ready status"},
		corev1.ConditionFalse: {"KubeletNotReady", "container runtime is down (injected by capstan sim)"},
	},
	corev1.NodeMemoryPressure: {
		corev1.ConditionFalse: {"KubeletHasSufficientMemory", "kubelet has sufficient memory available"},
		corev1.ConditionTrue:  {"KubeletHasInsufficientMemory", "kubelet has insufficient memory available"},
	},
	corev1.NodeDiskPressure: {
		corev1.ConditionFalse: {"KubeletHasNoDiskPressure", "kubelet has no disk pressure"},
		corev1.ConditionTrue:  {"KubeletHasDiskPressure", "kubelet has disk pressure"},
	},
	corev1.NodePIDPressure: {
		corev1.ConditionFalse: {"KubeletHasSufficientPID", "kubelet has sufficient PID available"},
		corev1.ConditionTrue:  {"KubeletHasInsufficientPID", "kubelet has insufficient PID available"},
	},
	corev1.NodeNetworkUnavailable: {
		corev1.ConditionFalse: {"RouteCreated", "RouteController created a route"},
		corev1.ConditionTrue:  {"NoRouteCreated", "Node created without a route"},
	},
}

// healthyStatus is each condition's status on a healthy node.
var healthyStatus = map[corev1.NodeConditionType]corev1.ConditionStatus{
	corev1.NodeReady:              corev1.ConditionTrue,
	corev1.NodeMemoryPressure:     corev1.ConditionFalse,
	corev1.NodeDiskPressure:       corev1.ConditionFalse,
	corev1.NodePIDPressure:        corev1.ConditionFalse,
	corev1.NodeNetworkUnavailable: corev1.ConditionFalse,
}

// syncNode makes the Node of one instance match what its kubelet would
// report: registration, conditions, capacity, addresses.
func (s *Simulator) syncNode(ctx context.Context, name string) error {
	inst, cm := s.instance(name)
	if inst == nil {
		s.kubeletStopped(name)
		return nil
	}
	now := s.opts.Clock.Now()
	switch inst.State(now) {
	case InstancePending:
		s.nodeQueue.AddAfter(name, inst.BootedAt.Sub(now))
		return nil
	case InstanceShuttingDown:
		s.kubeletStopped(name)
		if !now.Before(*inst.TerminateAt) {
			return s.cloud.remove(ctx, cm, inst)
		}
		s.nodeQueue.AddAfter(name, inst.TerminateAt.Sub(now))
		return nil
	}
	node, err := s.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		return s.registerNode(ctx, inst)
	}
	if err != nil {
		return err
	}
	for _, bad := range InvalidFaults(node) {
		s.reportInvalid(node, node.Name, bad)
	}
	if node.Annotations[NodeInstanceAnnotation] != inst.Name() || Stopped(node) {
		s.kubeletStopped(name)
		return nil
	}
	desired := s.nodeStatus(inst, node, now)
	stale := heartbeatAge(node, now) >= s.opts.NodeStatusReportFrequency
	if !stale && statusEquivalent(&node.Status, desired) {
		s.nodeQueue.AddAfter(name, s.opts.NodeStatusReportFrequency-heartbeatAge(node, now))
		return nil
	}
	kctx, kube := s.kubelet(ctx, name)
	if err := postNodeStatus(kctx, kube, node, desired); err != nil {
		if apierrors.IsConflict(err) {
			// The node changed since the cache's copy: the status is
			// computed again from the change once the cache has it.
			s.nodeQueue.AddAfter(name, 100*time.Millisecond)
			return nil
		}
		return err
	}
	s.nodeQueue.AddAfter(name, s.opts.NodeStatusReportFrequency)
	return nil
}

// postNodeStatus writes the status computed from node, only if node is
// still the node's current version: a status computed from an older one
// (the node was rebooting, and the reboot ended meanwhile) would report
// what is no longer so, after what came later (found by the chaos
// campaign: a node reported NotReady for a reboot that had ended, after
// its daemon had reported it done, and the MCO took a third node out of
// a pool with maxUnavailable 2).
func postNodeStatus(ctx context.Context, client kubernetes.Interface, node *corev1.Node, desired *corev1.NodeStatus) error {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": node.UID, "resourceVersion": node.ResourceVersion},
		"status":   desired,
	})
	if err != nil {
		return err
	}
	if _, err := client.CoreV1().Nodes().Patch(ctx, node.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("posting status of node %s: %w", node.Name, err)
	}
	return nil
}

// registerNode creates the Node, as a kubelet registers on start.
func (s *Simulator) registerNode(ctx context.Context, inst *Instance) error {
	// The cache may still hold an instance that was just deleted together
	// with its node: ask the cloud itself before bringing a node back.
	live, err := s.cloud.GetInstance(ctx, inst.Name())
	if errors.Is(err, ErrInstanceNotFound) || (err == nil && live.State(s.opts.Clock.Now()) != InstanceRunning) {
		return nil
	}
	if err != nil {
		return err
	}
	node := NodeObject(inst.Spec)
	node.Spec.ProviderID = inst.ProviderID
	node.Spec.PodCIDR = inst.PodCIDR
	node.Spec.PodCIDRs = []string{inst.PodCIDR}
	node.Status = *s.nodeStatus(inst, node, s.opts.Clock.Now())
	created, err := s.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("registering node %s: %w", inst.Name(), err)
	}
	// The instance may have been terminated (and whoever terminated it
	// may have looked for its node) while this registration was on its
	// way: a kubelet whose machine is gone does not stay registered.
	if _, err := s.cloud.GetInstance(ctx, inst.Name()); errors.Is(err, ErrInstanceNotFound) {
		uid := created.UID
		err := s.client.CoreV1().Nodes().Delete(ctx, created.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("withdrawing node %s of a terminated instance: %w", created.Name, err)
		}
		return nil
	}
	s.leaseQueue.Add(inst.Name())
	return nil
}

// NodeObject is the Node the kubelet of an instance of spec registers,
// without what only a running instance has (provider ID, addresses,
// heartbeats): its labels, annotations, taints and resources. The
// autoscaler builds its template nodes with it, so that what it simulates
// is what will register.
func NodeObject(spec InstanceSpec) *corev1.Node {
	spec = spec.WithDefaults()
	lbls := map[string]string{
		LabelHostname:                      spec.Name,
		LabelOS:                            "linux",
		LabelArch:                          "amd64",
		"beta.kubernetes.io/os":            "linux",
		"beta.kubernetes.io/arch":          "amd64",
		LabelInstanceType:                  spec.InstanceType,
		"beta.kubernetes.io/instance-type": spec.InstanceType,
		LabelRegion:                        spec.Region,
		LabelZone:                          spec.Zone,
	}
	taints := append([]corev1.Taint(nil), spec.Taints...)
	if spec.Role == "master" {
		lbls[LabelRoleMaster] = ""
		lbls[LabelRoleCP] = ""
		if !taintutil.Has(taints, LabelRoleMaster, corev1.TaintEffectNoSchedule) {
			taints = append(taints, corev1.Taint{Key: LabelRoleMaster, Effect: corev1.TaintEffectNoSchedule})
		}
	} else {
		lbls[LabelRoleWorker] = ""
	}
	for k, v := range spec.Labels {
		lbls[k] = v
	}
	ann := map[string]string{
		NodeInstanceAnnotation: spec.Name,
		"volumes.kubernetes.io/controller-managed-attach-detach": "true",
	}
	for k, v := range spec.Annotations {
		ann[k] = v
	}
	capacity := Capacity(spec)
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Labels: lbls, Annotations: ann},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status:     corev1.NodeStatus{Capacity: capacity, Allocatable: capacity.DeepCopy()},
	}
}

// Capacity is what the kubelet of an instance of spec reports.
func Capacity(spec InstanceSpec) corev1.ResourceList {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:              spec.CPU,
		corev1.ResourceMemory:           spec.Memory,
		corev1.ResourcePods:             *resource.NewQuantity(spec.Pods, resource.DecimalSI),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}
	if spec.GPU > 0 {
		capacity[ResourceGPU] = *resource.NewQuantity(spec.GPU, resource.DecimalSI)
	}
	for k, v := range spec.ExtendedResources {
		capacity[k] = v
	}
	return capacity
}

// nodeStatus computes the status the kubelet of inst reports now, keeping
// transition times of conditions whose status did not change.
func (s *Simulator) nodeStatus(inst *Instance, node *corev1.Node, now time.Time) *corev1.NodeStatus {
	spec := inst.Spec
	capacity := Capacity(spec)
	injected := InjectedConditions(node)
	nowTime := metav1.NewTime(now.Truncate(time.Second))
	var conds []corev1.NodeCondition
	for _, t := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure,
		corev1.NodePIDPressure, corev1.NodeReady, corev1.NodeNetworkUnavailable} {
		status := healthyStatus[t]
		if v, ok := injected[t]; ok {
			status = v
		}
		text := conditionText[t][status]
		if t == corev1.NodeReady && Rebooting(node) {
			status, text = corev1.ConditionFalse, [2]string{"KubeletNotReady", "node is rebooting"}
		}
		c := corev1.NodeCondition{Type: t, Status: status, Reason: text[0], Message: text[1],
			LastHeartbeatTime: nowTime, LastTransitionTime: nowTime}
		if old := nodes.FindCondition(node.Status.Conditions, t); old != nil && old.Status == status {
			c.LastTransitionTime = old.LastTransitionTime
		}
		conds = append(conds, c)
	}
	return &corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity.DeepCopy(),
		Phase:       "",
		Conditions:  conds,
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: inst.InternalIP},
			{Type: corev1.NodeHostName, Address: spec.Name},
		},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
		Images:          s.nodeImages(node),
		NodeInfo: corev1.NodeSystemInfo{
			MachineID:               fmt.Sprintf("%032x", inst.Index+1),
			SystemUUID:              fmt.Sprintf("%032x", inst.Index+1),
			BootID:                  bootID(inst, node),
			KernelVersion:           "6.1.0-capstan",
			OSImage:                 "capstan simulated node",
			ContainerRuntimeVersion: "capstan-sim://1.0.0",
			KubeletVersion:          KubeletVersion,
			OperatingSystem:         "linux",
			Architecture:            "amd64",
		},
	}
}

func heartbeatAge(node *corev1.Node, now time.Time) time.Duration {
	if c := nodes.Condition(node, corev1.NodeReady); c != nil {
		return now.Sub(c.LastHeartbeatTime.Time)
	}
	return time.Duration(1 << 62)
}

// statusEquivalent compares what a kubelet reports, ignoring heartbeat
// times.
func statusEquivalent(have, want *corev1.NodeStatus) bool {
	if !conditionsSame(have.Conditions, want.Conditions) {
		return false
	}
	return equality.Semantic.DeepEqual(have.Capacity, want.Capacity) &&
		equality.Semantic.DeepEqual(have.Allocatable, want.Allocatable) &&
		equality.Semantic.DeepEqual(have.Addresses, want.Addresses) &&
		equality.Semantic.DeepEqual(have.Images, want.Images) &&
		have.NodeInfo == want.NodeInfo
}

func conditionsSame(a, b []corev1.NodeCondition) bool {
	key := func(cs []corev1.NodeCondition) []string {
		out := make([]string, 0, len(cs))
		for _, c := range cs {
			out = append(out, string(c.Type)+"="+string(c.Status)+"/"+c.Reason+"/"+c.Message)
		}
		sort.Strings(out)
		return out
	}
	ka, kb := key(a), key(b)
	if len(ka) != len(kb) {
		return false
	}
	for i := range ka {
		if ka[i] != kb[i] {
			return false
		}
	}
	return true
}

// bootID changes with every boot of the instance's machine.
func bootID(inst *Instance, node *corev1.Node) string {
	id := inst.LaunchTime.UTC().Format("20060102150405.000")
	if b := Boot(node); b > 0 {
		id += fmt.Sprintf("-%d", b)
	}
	return id
}
