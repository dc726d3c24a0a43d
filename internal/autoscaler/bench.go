package autoscaler

import (
	"fmt"
	"math"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/scheduler/algorithm"
	"github.com/capstan-dev/capstan/internal/scheduler/policy"
)

// BenchCluster is a cluster in memory for the autoscaler's benchmark:
// upstream's scalability target of 1,000 nodes with 30 pods each, all in
// one autoscaled MachineSet of 8-core, 32 GiB machines.
type BenchCluster struct {
	Sets     []*machinev1.MachineSet
	Machines []*machinev1.Machine
	Nodes    []*corev1.Node
	Pods     []*corev1.Pod

	// podInfos lasts from loop to loop, as the autoscaler's does: the first
	// loop computes every pod's requests, the next ones reuse them.
	podInfos *algorithm.PodInfos
}

// NewBenchCluster builds nodes nodes with podsPerNode pods each (200m and
// 512Mi: 30 of them use 75% of a node's cpu), except the first
// underutilized nodes, which carry 3, and pending unschedulable pods of
// mixed sizes.
func NewBenchCluster(nodes, podsPerNode, underutilized, pending int) (*BenchCluster, error) {
	ms := &machinev1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: machine.Namespace, UID: "bench-set",
			Annotations: map[string]string{MinSizeAnnotation: "0", MaxSizeAnnotation: fmt.Sprint(4 * nodes)}},
		Spec: machinev1.MachineSetSpec{Replicas: ptr.To(int32(nodes)),
			Template: machinev1.MachineTemplateSpec{Spec: machinev1.MachineSpec{
				ProviderSpec: machinev1.ProviderSpec{Value: machine.RawProviderSpec(machine.ProviderSpec{InstanceType: "capstan.xlarge"})}}}},
	}
	c := &BenchCluster{Sets: []*machinev1.MachineSet{ms}, podInfos: algorithm.NewPodInfos()}
	owner := func(kind, name string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: types.UID(name), Controller: ptr.To(true)}}
	}
	for i := range nodes {
		name := fmt.Sprintf("bench-%04d", i)
		n, err := machine.NodeTemplate(ms, name)
		if err != nil {
			return nil, err
		}
		n.UID = types.UID(name)
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		c.Nodes = append(c.Nodes, n)
		c.Machines = append(c.Machines, &machinev1.Machine{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: machine.Namespace, OwnerReferences: []metav1.OwnerReference{{Kind: "MachineSet", Name: "bench", UID: ms.UID, Controller: ptr.To(true)}}},
			Status:     machinev1.MachineStatus{NodeRef: &corev1.ObjectReference{Name: name}},
		})
		count, cpu := podsPerNode, "200m"
		if i < underutilized {
			count = 3
		}
		for j := range count {
			c.Pods = append(c.Pods, benchPod(fmt.Sprintf("run-%04d-%02d", i, j), cpu, "512Mi", name, owner("ReplicaSet", fmt.Sprintf("rs-%d", j%10))))
		}
	}
	sizes := []struct{ cpu, mem string }{{"500m", "1Gi"}, {"1", "2Gi"}, {"2", "4Gi"}, {"250m", "512Mi"}}
	for i := range pending {
		s := sizes[i%len(sizes)]
		p := benchPod(fmt.Sprintf("pending-%05d", i), s.cpu, s.mem, "", owner("ReplicaSet", fmt.Sprintf("pending-rs-%d", i%len(sizes))))
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
		c.Pods = append(c.Pods, p)
	}
	return c, nil
}

func benchPod(name, cpu, mem, node string, owners []metav1.OwnerReference) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "bench", UID: types.UID(name), OwnerReferences: owners,
			Labels: map[string]string{"app": owners[0].Name}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// BenchLoop is one timed decision.
type BenchLoop struct {
	// Duration covers putting the loop's state together (node groups,
	// snapshot) and deciding.
	Duration time.Duration
	// NodesAdded and LowerBound: the scale-up's new nodes, and the fewest
	// that could hold the pending pods' requests.
	NodesAdded, LowerBound int
	// Unneeded counts the nodes the scale-down found unneeded.
	Unneeded int
}

// RunScaleUpLoop decides the scale-up for the cluster's pending pods.
func (c *BenchCluster) RunScaleUpLoop(cfg *Config) (BenchLoop, error) {
	alg, err := algorithm.New(policy.Default(), 1)
	if err != nil {
		return BenchLoop{}, err
	}
	start := time.Now()
	st := c.state(cfg, time.Now())
	plan := PlanScaleUp(&ScaleUpInput{
		Config: cfg, Algorithm: alg, Snapshot: st.snapshot(alg, algorithm.Listers{}), Groups: st.groups, Usage: st.usage,
		Pending: st.pending, BackedOff: func(string) (bool, string) { return false, "" }, Expander: &Expander{Names: cfg.Expanders},
		PodInfos: st.podInfos,
	})
	res := BenchLoop{Duration: time.Since(start)}
	for _, inc := range plan.Increases {
		res.NodesAdded += inc.To - inc.From
	}
	// The lower bound: the cpu and memory of the pending pods that fit no
	// existing node, over a node's allocatable, whichever needs more nodes.
	var cpu, mem int64
	for _, v := range plan.Verdicts {
		if v.Verdict == VerdictTriggered {
			r := algorithm.NewPodInfo(v.Pod).Requests
			cpu, mem = cpu+r.MilliCPU, mem+r.Memory
		}
	}
	alloc := st.groups[0].Template.Status.Allocatable
	res.LowerBound = int(math.Max(math.Ceil(float64(cpu)/float64(alloc.Cpu().MilliValue())), math.Ceil(float64(mem)/float64(alloc.Memory().Value()))))
	return res, nil
}

// RunScaleDownLoop decides the scale-down of the cluster.
func (c *BenchCluster) RunScaleDownLoop(cfg *Config) (BenchLoop, error) {
	alg, err := algorithm.New(policy.Default(), 1)
	if err != nil {
		return BenchLoop{}, err
	}
	start := time.Now()
	now := time.Now()
	st := c.state(cfg, now)
	in := st.scaleDownInput(alg, algorithm.Listers{}, nil, now)
	in.ControllerExists = func(string, *metav1.OwnerReference) bool { return true }
	plan := PlanScaleDown(in)
	return BenchLoop{Duration: time.Since(start), Unneeded: plan.Unneeded()}, nil
}

// state reads the cluster at the start of a loop, as the autoscaler's
// readState does.
func (c *BenchCluster) state(cfg *Config, now time.Time) *clusterState {
	c.podInfos.NextRound()
	st := newClusterState(cfg, c.Nodes, c.Pods, c.Sets, c.Machines, nil, now)
	st.podInfos = c.podInfos
	return st
}
