package bench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capstan-dev/capstan/internal/nodes"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/sim"
)

// UpOptions configure `capstan bench up`.
type UpOptions struct {
	Nodes       int
	Pods        int
	Parallelism int
	// DataDir is kept when set; a temporary one is removed afterwards.
	DataDir     string
	EtcdNoFsync bool
	Timeout     time.Duration
	// Bare runs none of capstan's controllers (as capstan up --bare): the
	// control plane, the simulated nodes and monitoring only, what any
	// cluster of that size costs before capstan's own work.
	Bare bool
}

// UpResult holds the figures of one run.
type UpResult struct {
	Nodes         int
	NodesReady    time.Duration
	Pods          int
	PodsRunning   time.Duration
	PodsPerSecond float64
	// CPUPerPod is the CPU every process used while the pods started,
	// per pod.
	CPUPerPod    time.Duration
	PeakRSSBytes int64
	// Processes are capstan's processes at the end (peak and current
	// resident sizes, CPU); HeapLive and HeapHeld the Go heap of this
	// process left by a collection at the end and held from the OS.
	Processes          []Process
	HeapLive, HeapHeld uint64
}

// Up starts a cluster with no nodes, launches Nodes instances and waits for
// their nodes to be Ready, then creates Pods pods bound round-robin to them
// and waits until all are Running.
func Up(ctx context.Context, o UpOptions, log io.Writer) (*UpResult, error) {
	if o.Nodes <= 0 || o.Pods < 0 || o.Parallelism <= 0 {
		return nil, fmt.Errorf("--nodes and --parallelism must be positive and --pods not negative")
	}
	if o.Pods > o.Nodes*250 {
		return nil, fmt.Errorf("%d pods do not fit on %d nodes of 250 pods", o.Pods, o.Nodes)
	}
	dir, removeDir, err := dataDir(o.DataDir, "capstan-bench-")
	if err != nil {
		return nil, err
	}
	defer removeDir()
	opts := clusterOptions(dir, o.EtcdNoFsync)
	// Nodes are launched directly; no Machine API to compete with.
	opts.WithoutMachineAPI()
	if o.Bare {
		opts.WithoutControllers()
	}
	cl, err := startCluster(ctx, opts, dir, log)
	if err != nil {
		return nil, err
	}
	defer cl.Stop()
	client := cl.Client
	res := &UpResult{Nodes: o.Nodes, Pods: o.Pods}

	var running atomic.Int64
	runningPods := sync.Map{}
	podDone := make(chan struct{})
	var podOnce sync.Once
	onPod := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Status.Phase != corev1.PodRunning {
			return
		}
		if _, loaded := runningPods.LoadOrStore(p.Name, true); !loaded && running.Add(1) == int64(o.Pods) {
			podOnce.Do(func() { close(podDone) })
		}
	}
	podInformer := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace("bench"),
		informers.WithTransform(func(obj any) (any, error) {
			// The bench only counts running pods; keep its own cache small so
			// that the peak RSS measures capstan, not the measurement.
			if p, ok := obj.(*corev1.Pod); ok {
				return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, ResourceVersion: p.ResourceVersion},
					Status: corev1.PodStatus{Phase: p.Status.Phase}}, nil
			}
			return obj, nil
		}))
	_, _ = podInformer.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onPod, UpdateFunc: func(_, p any) { onPod(p) },
	})
	infCtx, stopInformers := context.WithCancel(ctx)
	podInformer.Start(infCtx.Done())
	defer podInformer.Shutdown()
	defer stopInformers()

	if res.NodesReady, err = launchNodes(ctx, cl, o.Nodes, o.Parallelism, o.Timeout, log); err != nil {
		return nil, err
	}
	if o.Pods > 0 {
		if err := benchNamespace(ctx, client); err != nil {
			return nil, err
		}
		fmt.Fprintf(log, "Creating %d pods bound to the nodes ...\n", o.Pods)
		ps, err := Processes()
		if err != nil {
			return nil, err
		}
		_, _, cpuBefore := totals(ps)
		start := time.Now()
		err = parallel(ctx, o.Pods, o.Parallelism, func(i int) error {
			_, err := client.CoreV1().Pods("bench").Create(ctx, benchPod(i, fmt.Sprintf("bench-%04d", i%o.Nodes)), metav1.CreateOptions{})
			return err
		})
		if err != nil {
			return nil, err
		}
		if err := waitFor(ctx, podDone, o.Timeout, log, func() string {
			n := running.Load()
			return fmt.Sprintf("%d/%d pods Running, %.0f pods/s so far", n, o.Pods, float64(n)/time.Since(start).Seconds())
		}); err != nil {
			return nil, err
		}
		res.PodsRunning = time.Since(start)
		res.PodsPerSecond = float64(o.Pods) / res.PodsRunning.Seconds()
		if ps, err = Processes(); err != nil {
			return nil, err
		}
		_, _, cpuAfter := totals(ps)
		res.CPUPerPod = (cpuAfter - cpuBefore) / time.Duration(o.Pods)
		fmt.Fprintf(log, "%d pods Running in %.1fs\n", o.Pods, res.PodsRunning.Seconds())
	}
	if res.PeakRSSBytes, err = PeakRSS(); err != nil {
		return nil, err
	}
	if res.Processes, err = Processes(); err != nil {
		return nil, err
	}
	res.HeapLive, res.HeapHeld = heapAfterCollection()
	return res, nil
}

func benchNamespace(ctx context.Context, client kubernetes.Interface) error {
	_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	return cluster.WaitForServiceAccount(ctx, client, "bench", time.Minute)
}

func benchPod(i int, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%05d", i), Labels: map[string]string{"app": "bench"}},
		Spec: corev1.PodSpec{
			NodeName:                     node,
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{
				Name: "app", Image: "registry.example/bench:1",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi"),
				}},
			}},
		},
	}
}

// parallel runs f(0..n-1) on workers goroutines and returns the first error.
func parallel(ctx context.Context, n, workers int, f func(int) error) error {
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return firstErr
}

func waitFor(ctx context.Context, done <-chan struct{}, timeout time.Duration, log io.Writer, progress func() string) error {
	return waitWithProgress(ctx, done, timeout, upProgressEvery, log, progress)
}

// upProgressEvery is how often bench up says how far it is.
const upProgressEvery = 10 * time.Second

// waitWithProgress waits until done is closed, writing progress() to log
// every interval; an interruption or the timeout ends it with an error
// saying how far it got.
func waitWithProgress(ctx context.Context, done <-chan struct{}, timeout, every time.Duration, log io.Writer, progress func() string) error {
	began := time.Now()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("interrupted at %s", progress())
		case <-deadline.C:
			return fmt.Errorf("timed out after %s at %s", timeout, progress())
		case <-tick.C:
			select {
			case <-done: // a tick and the end at once: the end wins
				return nil
			default:
			}
			fmt.Fprintf(log, "[%6.0fs] %s\n", time.Since(began).Seconds(), progress())
		}
	}
}

// launchNodes launches n instances (bench-0000, bench-0001, ...) of 32
// CPUs and 128 GiB through the simulated cloud, workers at a time, and
// waits until all their nodes are Ready.
func launchNodes(ctx context.Context, cl *cluster.Cluster, n, workers int, timeout time.Duration, log io.Writer) (time.Duration, error) {
	factory := informers.NewSharedInformerFactory(cl.Client, 0)
	var ready atomic.Int64
	readyNodes := sync.Map{}
	done := make(chan struct{})
	var once sync.Once
	onNode := func(obj any) {
		node, ok := obj.(*corev1.Node)
		if !ok || !nodes.Ready(node) {
			return
		}
		if _, loaded := readyNodes.LoadOrStore(node.Name, true); !loaded && ready.Add(1) == int64(n) {
			once.Do(func() { close(done) })
		}
	}
	_, _ = factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onNode, UpdateFunc: func(_, node any) { onNode(node) },
	})
	infCtx, stop := context.WithCancel(ctx)
	factory.Start(infCtx.Done())
	defer factory.Shutdown() // after stop: Shutdown waits for the informers to end
	defer stop()

	fmt.Fprintf(log, "Launching %d instances ...\n", n)
	start := time.Now()
	err := parallel(ctx, n, workers, func(i int) error {
		_, err := cl.Cloud.CreateInstance(ctx, sim.InstanceSpec{
			Name: fmt.Sprintf("bench-%04d", i), Zone: sim.DefaultZones[i%len(sim.DefaultZones)],
			CPU: resource.MustParse("32"), Memory: resource.MustParse("128Gi"), Pods: 250,
		})
		return err
	})
	if err != nil {
		return 0, err
	}
	if err := waitFor(ctx, done, timeout, log, func() string { return fmt.Sprintf("%d/%d nodes Ready", ready.Load(), n) }); err != nil {
		return 0, err
	}
	took := time.Since(start)
	fmt.Fprintf(log, "%d nodes Ready in %.1fs\n", n, took.Seconds())
	return took, nil
}
