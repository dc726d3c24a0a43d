package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	mcfgclient "github.com/openshift/client-go/machineconfiguration/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/mco"
	"github.com/capstan-dev/capstan/internal/sim"
	"github.com/capstan-dev/capstan/internal/waitfor"
)

// MCOOptions configure the MCO benchmark.
type MCOOptions struct {
	Nodes          int
	MaxUnavailable string
	Daemon         mco.DaemonOptions
	Parallelism    int
	EtcdNoFsync    bool
	Timeout        time.Duration
}

// MCOResult is what rolling a new configuration over the worker pool
// took, against the ideal.
type MCOResult struct {
	Nodes, MaxUnavailable int
	// Rollout is from the MachineConfig's creation to the pool Updated;
	// PerNode the mean time of one node, from targeted to done; Ideal
	// the waves (nodes / maxUnavailable, rounded up) times PerNode.
	Rollout, PerNode, Ideal time.Duration
	// CPU is the process's CPU time during the rollout (controllers,
	// simulated kubelets, API server and etcd together).
	CPU time.Duration
}

// MCO rolls a MachineConfig over a worker pool of o.Nodes nodes.
func MCO(ctx context.Context, o MCOOptions, log io.Writer) (*MCOResult, error) {
	if o.Nodes <= 0 {
		return nil, fmt.Errorf("--nodes must be positive")
	}
	max := intstr.Parse(o.MaxUnavailable)
	if _, err := intstr.GetScaledValueFromIntOrPercent(&max, o.Nodes, false); err != nil {
		return nil, fmt.Errorf("--max-unavailable %q: want a number or a percentage: %w", o.MaxUnavailable, err)
	}
	dir, err := os.MkdirTemp("", "capstan-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	opts := clusterOptions(dir, o.EtcdNoFsync)
	opts.WithoutMachineAPI()
	opts.Releases, opts.ResourceMetrics = nil, nil
	opts.MachineConfig = &mco.Options{Daemon: o.Daemon}
	cl, err := startCluster(ctx, opts, dir, log)
	if err != nil {
		return nil, err
	}
	defer cl.Stop()
	mcfg, err := mcfgclient.NewForConfig(cl.RESTConfig())
	if err != nil {
		return nil, err
	}
	pools := mcfg.MachineconfigurationV1().MachineConfigPools()
	raw, _ := json.Marshal(map[string]any{"spec": map[string]any{"maxUnavailable": max}})
	if _, err := pools.Patch(ctx, "worker", types.MergePatchType, raw, metav1.PatchOptions{}); err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "Launching %d worker nodes ...\n", o.Nodes)
	if err := parallel(ctx, o.Nodes, o.Parallelism, func(i int) error {
		_, err := cl.Cloud.CreateInstance(ctx, sim.InstanceSpec{Name: fmt.Sprintf("worker-%04d", i), Zone: sim.DefaultZones[i%len(sim.DefaultZones)],
			CPU: resource.MustParse("8"), Memory: resource.MustParse("32Gi"), Pods: 110, Role: "worker"})
		return err
	}); err != nil {
		return nil, err
	}
	pool, err := waitPool(ctx, mcfg, o.Timeout, func(p *mcfgv1.MachineConfigPool) bool {
		return p.Status.MachineCount == int32(o.Nodes) && p.Status.UpdatedMachineCount == int32(o.Nodes)
	})
	if err != nil {
		return nil, fmt.Errorf("the pool never took its nodes: %w", err)
	}
	old := pool.Spec.Configuration.Name
	times, err := watchNodeUpdates(ctx, cl)
	if err != nil {
		return nil, err
	}
	defer times.stop()
	fmt.Fprintf(log, "Rolling a new MachineConfig over %d nodes, maxUnavailable %s ...\n", o.Nodes, o.MaxUnavailable)
	cpu0 := cpuTime()
	start := time.Now()
	mc := &mcfgv1.MachineConfig{ObjectMeta: metav1.ObjectMeta{Name: "50-bench", Labels: map[string]string{mco.RoleLabel: "worker"}},
		Spec: mcfgv1.MachineConfigSpec{Config: runtime.RawExtension{Raw: []byte(`{"ignition":{"version":"3.2.0"},"storage":{"files":[{"path":"/etc/bench","contents":{"source":"data:,1"}}]}}`)}}}
	if _, err := mcfg.MachineconfigurationV1().MachineConfigs().Create(ctx, mc, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if _, err := waitPool(ctx, mcfg, o.Timeout, func(p *mcfgv1.MachineConfigPool) bool {
		return p.Spec.Configuration.Name != old && p.Status.Configuration.Name == p.Spec.Configuration.Name && p.Status.UpdatedMachineCount == int32(o.Nodes)
	}); err != nil {
		return nil, fmt.Errorf("the rollout did not complete: %w", err)
	}
	res := &MCOResult{Nodes: o.Nodes, Rollout: time.Since(start), CPU: cpuTime() - cpu0}
	p, err := pools.Get(ctx, "worker", metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	res.MaxUnavailable = mco.MaxUnavailable(p, o.Nodes)
	res.PerNode = times.mean()
	res.Ideal = time.Duration(math.Ceil(float64(o.Nodes)/float64(res.MaxUnavailable))) * res.PerNode
	return res, nil
}

func waitPool(ctx context.Context, mcfg mcfgclient.Interface, timeout time.Duration, done func(*mcfgv1.MachineConfigPool) bool) (*mcfgv1.MachineConfigPool, error) {
	var p *mcfgv1.MachineConfigPool
	err := waitfor.Poll(ctx, 200*time.Millisecond, timeout, waitfor.Simple(func(ctx context.Context) (bool, string) {
		var err error
		p, err = mcfg.MachineconfigurationV1().MachineConfigPools().Get(ctx, "worker", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return done(p), fmt.Sprintf("worker pool: %d machines, %d updated, %d unavailable", p.Status.MachineCount, p.Status.UpdatedMachineCount, p.Status.UnavailableMachineCount)
	}))
	return p, err
}

// nodeTimes times each node from its targeting to its update's end.
type nodeTimes struct {
	mu       sync.Mutex
	targeted map[string]time.Time
	took     []time.Duration
	stop     context.CancelFunc
}

func watchNodeUpdates(ctx context.Context, cl *cluster.Cluster) (*nodeTimes, error) {
	ctx, cancel := context.WithCancel(ctx)
	w, err := cl.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		return nil, err
	}
	t := &nodeTimes{targeted: map[string]time.Time{}, stop: cancel}
	go func() {
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			a := n.Annotations
			t.mu.Lock()
			switch start, seen := t.targeted[n.Name]; {
			case !seen && a[mco.DesiredConfigAnnotation] != a[mco.CurrentConfigAnnotation]:
				t.targeted[n.Name] = time.Now()
			case seen && !start.IsZero() && a[mco.DesiredConfigAnnotation] == a[mco.CurrentConfigAnnotation] && a[mco.StateAnnotation] == mco.StateDone && !n.Spec.Unschedulable:
				t.took = append(t.took, time.Since(start))
				t.targeted[n.Name] = time.Time{}
			}
			t.mu.Unlock()
		}
	}()
	return t, nil
}

func (t *nodeTimes) mean() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.took) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range t.took {
		sum += d
	}
	return sum / time.Duration(len(t.took))
}
