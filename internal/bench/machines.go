package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/capstan-dev/capstan/internal/waitfor"

	nodeutil "github.com/capstan-dev/capstan/internal/nodes"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/sim"
)

// MachinesOptions configure `capstan bench machines`.
type MachinesOptions struct {
	Replicas int
	// PodsPerNode is how many pods (of one Deployment) run per node while
	// the MachineSet is up; the scale-down drains them.
	PodsPerNode int
	EtcdNoFsync bool
	Timeout     time.Duration
}

// MachinesResult holds the figures of one run.
type MachinesResult struct {
	Replicas      int
	Up, Down      time.Duration
	UpPerSecond   float64
	DownPerSecond float64
	PodsEvicted   int
	PeakRSSBytes  int64
}

// Machines scales a MachineSet 0 -> Replicas -> 0 on a fresh cluster
// (instances boot at once): up is done when every machine is Running with
// a Ready node, down when every machine, instance and node is gone.
func Machines(ctx context.Context, o MachinesOptions, log io.Writer) (*MachinesResult, error) {
	if o.Replicas <= 0 || o.PodsPerNode < 0 {
		return nil, fmt.Errorf("--replicas must be positive and --pods-per-node not negative")
	}
	dir, err := os.MkdirTemp("", "capstan-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	opts := clusterOptions(dir, o.EtcdNoFsync)
	cl, err := startCluster(ctx, opts, dir, log)
	if err != nil {
		return nil, err
	}
	defer cl.Stop()
	mc, err := cl.MachineClient()
	if err != nil {
		return nil, err
	}
	sets := mc.MachineV1beta1().MachineSets(machine.Namespace)
	machines := mc.MachineV1beta1().Machines(machine.Namespace)
	lbl := map[string]string{machine.MachineSetLabel: "bench"}
	ms := &machinev1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: machine.Namespace},
		Spec: machinev1.MachineSetSpec{
			Replicas: ptr.To[int32](0),
			Selector: metav1.LabelSelector{MatchLabels: lbl},
			Template: machinev1.MachineTemplateSpec{
				ObjectMeta: machinev1.ObjectMeta{Labels: lbl},
				Spec: machinev1.MachineSpec{ProviderSpec: machinev1.ProviderSpec{Value: machine.RawProviderSpec(machine.ProviderSpec{
					InstanceType: "capstan.large", Region: sim.DefaultRegion, Zone: sim.DefaultZones[0]})}},
			},
		},
	}
	if _, err := sets.Create(ctx, ms, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	scale := func(n int) error {
		_, err := sets.Patch(ctx, "bench", types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n), metav1.PatchOptions{})
		return err
	}
	res := &MachinesResult{Replicas: o.Replicas}
	fmt.Fprintf(log, "Scaling machineset bench to %d ...\n", o.Replicas)
	start := time.Now()
	if err := scale(o.Replicas); err != nil {
		return nil, err
	}
	err = waitfor.Poll(ctx, 250*time.Millisecond, o.Timeout, waitfor.Simple(func(ctx context.Context) (bool, string) {
		list, err := machines.List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, err.Error()
		}
		nodes, err := cl.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, err.Error()
		}
		ready := map[string]bool{}
		for i := range nodes.Items {
			ready[nodes.Items[i].Name] = nodeutil.Ready(&nodes.Items[i])
		}
		running := 0
		for i := range list.Items {
			m := &list.Items[i]
			if ptr.Deref(m.Status.Phase, "") == machinev1.PhaseRunning && m.Status.NodeRef != nil && ready[m.Status.NodeRef.Name] {
				running++
			}
		}
		return running == o.Replicas, fmt.Sprintf("%d of %d machines Running with a Ready node", running, o.Replicas)
	}))
	if err != nil {
		return nil, fmt.Errorf("scaling up: %w", err)
	}
	res.Up = time.Since(start)
	res.UpPerSecond = float64(o.Replicas) / res.Up.Seconds()
	fmt.Fprintf(log, "%d machines Running in %.1f s\n", o.Replicas, res.Up.Seconds())

	if pods := o.Replicas * o.PodsPerNode; pods > 0 {
		if err := runBenchDeployment(ctx, cl, pods, o.Timeout); err != nil {
			return nil, err
		}
		res.PodsEvicted = pods
		fmt.Fprintf(log, "%d pods Running on the machines' nodes\n", pods)
	}
	fmt.Fprintf(log, "Scaling machineset bench to 0 ...\n")
	start = time.Now()
	if err := scale(0); err != nil {
		return nil, err
	}
	err = waitfor.Poll(ctx, 250*time.Millisecond, o.Timeout, waitfor.Simple(func(ctx context.Context) (bool, string) {
		list, err := machines.List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, err.Error()
		}
		return len(list.Items) == 0, fmt.Sprintf("%d machines left", len(list.Items))
	}))
	if err != nil {
		return nil, fmt.Errorf("scaling down: %w", err)
	}
	res.Down = time.Since(start)
	res.DownPerSecond = float64(o.Replicas) / res.Down.Seconds()
	insts, err := cl.Cloud.ListInstances(ctx)
	if err != nil {
		return nil, err
	}
	if len(insts) > 0 {
		return nil, fmt.Errorf("%d instances left after every machine was deleted", len(insts))
	}
	if res.PeakRSSBytes, err = PeakRSS(); err != nil {
		return nil, err
	}
	return res, nil
}

// runBenchDeployment runs pods spread over the nodes and waits until they
// are Running.
func runBenchDeployment(ctx context.Context, cl *cluster.Cluster, pods int, timeout time.Duration) error {
	if err := cluster.WaitForServiceAccount(ctx, cl.Client, "default", time.Minute); err != nil {
		return err
	}
	lbl := map[string]string{"app": "bench"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "bench"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(pods)),
			Selector: &metav1.LabelSelector{MatchLabels: lbl},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: lbl},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken:  ptr.To(false),
					TerminationGracePeriodSeconds: ptr.To[int64](0),
					Containers: []corev1.Container{{Name: "app", Image: "registry.example/bench:1",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")}}}},
				},
			},
		},
	}
	if _, err := cl.Client.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return err
	}
	return waitfor.Poll(ctx, 500*time.Millisecond, timeout, waitfor.Simple(func(ctx context.Context) (bool, string) {
		got, err := cl.Client.AppsV1().Deployments("default").Get(ctx, "bench", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return got.Status.ReadyReplicas == int32(pods), fmt.Sprintf("%d of %d pods ready", got.Status.ReadyReplicas, pods)
	}))
}
