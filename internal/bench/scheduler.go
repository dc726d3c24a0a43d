package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capstan-dev/capstan/internal/nodes"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	kubescheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubescheduleroptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"

	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/scheduler"
)

// Schedulers the benchmark compares.
const (
	SchedulerCapstan = "capstan"
	SchedulerKube    = "kube-scheduler"
)

// SchedulerOptions configure one scheduler benchmark run.
type SchedulerOptions struct {
	Scheduler   string
	Workload    string
	Nodes, Pods int
	Parallelism int
	Timeout     time.Duration
	// KubeSchedulerQPS, when positive, overrides kube-scheduler's default
	// client rate limit (50 QPS, burst 100), for a comparison at equal QPS.
	KubeSchedulerQPS int
}

// SchedulerResult is the outcome of one run.
type SchedulerResult struct {
	Scheduler     string  `json:"scheduler"`
	Workload      string  `json:"workload"`
	Nodes         int     `json:"nodes"`
	Pods          int     `json:"pods"`
	Seconds       float64 `json:"seconds"`
	PodsPerSecond float64 `json:"podsPerSecond"`
	Quality
}

// RunScheduler starts a fresh control plane with Nodes simulated nodes and
// no scheduler, starts the chosen scheduler, creates the workload's pods
// and measures from the first creation until every pod is bound.
func RunScheduler(ctx context.Context, o SchedulerOptions, log io.Writer) (*SchedulerResult, error) {
	if o.Scheduler != SchedulerCapstan && o.Scheduler != SchedulerKube {
		return nil, fmt.Errorf("scheduler %q: want %s or %s", o.Scheduler, SchedulerCapstan, SchedulerKube)
	}
	known := false
	for _, w := range Workloads {
		known = known || w == o.Workload
	}
	if !known {
		return nil, fmt.Errorf("workload %q: want one of %v", o.Workload, Workloads)
	}
	dir, err := os.MkdirTemp("", "capstan-bench-sched-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	// The schedulers are measured, not the disk.
	opts := clusterOptions(dir, true)
	// Nodes stay healthy without a lease write every 10s from each of
	// thousands of kubelets competing with the schedulers.
	opts.ControlPlane.NodeMonitorGracePeriod = 30 * time.Minute
	opts.Sim.LeaseDuration = 10 * time.Minute
	// Nodes are launched directly; no Machine API to compete with.
	opts.MachineAPI = nil
	opts.Scheduler = nil
	fmt.Fprintf(log, "[%s/%s] starting a control plane with %d nodes ...\n", o.Scheduler, o.Workload, o.Nodes)
	cl, err := cluster.Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer cl.Stop()
	client := cl.Client
	err = parallel(ctx, o.Nodes, o.Parallelism, func(i int) error {
		_, err := cl.Cloud.CreateInstance(ctx, benchNodeSpec(o.Workload, i))
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := waitNodesSchedulable(ctx, cl, o.Nodes, o.Timeout); err != nil {
		return nil, err
	}
	if err := benchNamespace(ctx, client); err != nil {
		return nil, err
	}

	schedCtx, stopScheduler := context.WithCancel(ctx)
	var schedWG sync.WaitGroup
	defer func() { stopScheduler(); schedWG.Wait() }()
	schedErr := make(chan error, 1)
	schedWG.Add(1)
	go func() {
		defer schedWG.Done()
		schedErr <- runBenchScheduler(schedCtx, o, cl)
	}()

	var bound atomic.Int64
	boundSet := sync.Map{}
	done := make(chan struct{})
	var once sync.Once
	onPod := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Spec.NodeName == "" {
			return
		}
		if _, loaded := boundSet.LoadOrStore(p.Name, true); !loaded && bound.Add(1) == int64(o.Pods) {
			once.Do(func() { close(done) })
		}
	}
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace("bench"))
	podInformer := f.Core().V1().Pods().Informer()
	_, _ = podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onPod, UpdateFunc: func(_, p any) { onPod(p) }})
	infCtx, stopInformers := context.WithCancel(ctx)
	f.Start(infCtx.Done())
	defer func() { stopInformers(); f.Shutdown() }()
	f.WaitForCacheSync(infCtx.Done())

	fmt.Fprintf(log, "[%s/%s] creating %d pods ...\n", o.Scheduler, o.Workload, o.Pods)
	start := time.Now()
	err = parallel(ctx, o.Pods, o.Parallelism, func(i int) error {
		_, err := client.CoreV1().Pods("bench").Create(ctx, benchWorkloadPod(o.Workload, i), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return nil, err
	}
	select {
	case <-done:
	case err := <-schedErr:
		return nil, fmt.Errorf("%s stopped: %v", o.Scheduler, err)
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(o.Timeout):
		return nil, fmt.Errorf("%s bound %d/%d pods within %s", o.Scheduler, bound.Load(), o.Pods, o.Timeout)
	}
	elapsed := time.Since(start)
	res := &SchedulerResult{Scheduler: o.Scheduler, Workload: o.Workload, Nodes: o.Nodes, Pods: o.Pods,
		Seconds: elapsed.Seconds(), PodsPerSecond: float64(o.Pods) / elapsed.Seconds()}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	pods, err := f.Core().V1().Pods().Lister().List(labels.Everything())
	if err != nil {
		return nil, err
	}
	nodePtrs := make([]*corev1.Node, len(nodes.Items))
	for i := range nodes.Items {
		nodePtrs[i] = &nodes.Items[i]
	}
	res.Quality = placementQuality(nodePtrs, pods)
	return res, nil
}

// waitNodesSchedulable waits until n nodes are Ready without the not-ready
// taint the node lifecycle controller lifts.
func waitNodesSchedulable(ctx context.Context, cl *cluster.Cluster, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		list, err := cl.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err == nil {
			ok := 0
			for i := range list.Items {
				node := &list.Items[i]
				tainted := false
				for _, t := range node.Spec.Taints {
					tainted = tainted || t.Key == corev1.TaintNodeNotReady
				}
				if nodes.Ready(node) && !tainted {
					ok++
				}
			}
			if ok >= n {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%d/%d nodes schedulable after %s", ok, n, timeout)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func runBenchScheduler(ctx context.Context, o SchedulerOptions, cl *cluster.Cluster) error {
	if o.Scheduler == SchedulerCapstan {
		s, err := scheduler.New(cluster.ProtobufClient(cl), scheduler.Config{Name: scheduler.DefaultSchedulerName, Seed: 1})
		if err != nil {
			return err
		}
		return s.Run(ctx)
	}
	// Upstream kube-scheduler in its default configuration, built from its
	// own options as its command does.
	opts := kubescheduleroptions.NewOptions()
	fs := pflag.NewFlagSet("kube-scheduler", pflag.ContinueOnError)
	for _, f := range opts.Flags.FlagSets {
		fs.AddFlagSet(f)
	}
	args := []string{"--kubeconfig=" + cl.ControlPlane.KubeconfigPath(), "--leader-elect=false", "--secure-port=0"}
	if o.KubeSchedulerQPS > 0 {
		args = append(args, fmt.Sprintf("--kube-api-qps=%d", o.KubeSchedulerQPS), fmt.Sprintf("--kube-api-burst=%d", 2*o.KubeSchedulerQPS))
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := opts.ComponentGlobalsRegistry.Set(); err != nil {
		return err
	}
	cc, sched, err := kubescheduler.Setup(ctx, opts)
	if err != nil {
		return fmt.Errorf("kube-scheduler setup: %w", err)
	}
	return kubescheduler.Run(ctx, cc, sched)
}
