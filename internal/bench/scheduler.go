package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/capstan-dev/capstan/internal/taints"
	"github.com/capstan-dev/capstan/internal/waitfor"

	"github.com/capstan-dev/capstan/internal/nodes"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/cluster"
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
	// QPS and Burst are the scheduler's client rate limit, the same for
	// both schedulers; QPS <= 0 is unlimited.
	QPS   float32
	Burst int
	// ProcessCommand is the command (argv) that runs a scheduler process
	// (RunSchedulerProcess); the scheduler flags are appended.
	ProcessCommand []string
	// CPUProfile and MemProfile, when set, are passed to the scheduler
	// process; ControlPlaneProfile profiles the rest of the run (this
	// process) over the measured window.
	CPUProfile, MemProfile, ControlPlaneProfile string
}

// SchedulerResult is the outcome of one run.
type SchedulerResult struct {
	Scheduler     string  `json:"scheduler"`
	Workload      string  `json:"workload"`
	Nodes         int     `json:"nodes"`
	Pods          int     `json:"pods"`
	Seconds       float64 `json:"seconds"`
	PodsPerSecond float64 `json:"podsPerSecond"`
	// CPUSeconds is the user and system CPU the scheduler process used
	// from its sync to the last pod bound (read from its rusage at exit,
	// less what it used until synced).
	CPUSeconds     float64 `json:"cpuSeconds"`
	CPUPer1000Pods float64 `json:"cpuPer1000Pods"`
	// ClientQPS and ClientBurst are the rate limit the scheduler's client
	// really had (0: none).
	ClientQPS   float32 `json:"clientQPS"`
	ClientBurst int     `json:"clientBurst"`
	// PeakRSSBytes is the scheduler process's peak resident memory.
	PeakRSSBytes int64 `json:"peakRSSBytes"`
	// ControlPlaneCPUSeconds is the CPU the rest of the run (apiserver,
	// etcd, simulated kubelets, pod creators) used over the same window;
	// MachineBusy is the share of every core the scheduler and it used.
	ControlPlaneCPUSeconds float64 `json:"controlPlaneCPUSeconds"`
	MachineBusy            float64 `json:"machineBusy"`
	Quality
	Outcome
}

// RunScheduler starts a fresh control plane with Nodes simulated nodes and
// no scheduler, starts the chosen scheduler in a process of its own, waits
// until it has synced, then creates the workload's pods and measures until
// every pod is bound: the time, and the CPU the scheduler process spent.
func RunScheduler(ctx context.Context, o SchedulerOptions, log io.Writer) (*SchedulerResult, error) {
	if o.Scheduler != SchedulerCapstan && o.Scheduler != SchedulerKube {
		return nil, fmt.Errorf("scheduler %q: want %s or %s", o.Scheduler, SchedulerCapstan, SchedulerKube)
	}
	if !slices.Contains(Workloads, o.Workload) {
		return nil, fmt.Errorf("workload %q: want one of %v", o.Workload, Workloads)
	}
	if len(o.ProcessCommand) == 0 {
		return nil, errors.New("no command to run the scheduler process")
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
	opts.WithoutMachineAPI()
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

	if o.Workload == "preemption" {
		for _, pc := range []*schedulingv1.PriorityClass{
			{ObjectMeta: metav1.ObjectMeta{Name: benchHighPriorityClass}, Value: benchHighPriority},
			{ObjectMeta: metav1.ObjectMeta{Name: benchNeverPriorityClass}, Value: benchHighPriority, PreemptionPolicy: ptr.To(corev1.PreemptNever)},
		} {
			if _, err := client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
				return nil, err
			}
		}
	}
	initPods := benchInitPods(o.Workload, o.Nodes)
	// The measured pods are done when every one is settled: bound, or
	// found unschedulable with no node nominated for it. A pod can leave
	// that state (nominated by a preemption), so each one's is kept.
	var mu sync.Mutex
	settledPods := map[string]bool{}
	nSettled, initBound := 0, map[string]bool{}
	done, initDone := make(chan struct{}), make(chan struct{})
	var once, initOnce sync.Once
	onPod := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if p.Labels["init"] == "true" {
			if p.Spec.NodeName != "" {
				initBound[p.Name] = true
				if len(initBound) == len(initPods) {
					initOnce.Do(func() { close(initDone) })
				}
			}
			return
		}
		now := settled(p)
		if now != settledPods[p.Name] {
			settledPods[p.Name] = now
			if now {
				nSettled++
			} else {
				nSettled--
			}
		}
		if nSettled == o.Pods {
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

	fmt.Fprintf(log, "[%s/%s] starting the scheduler process ...\n", o.Scheduler, o.Workload)
	proc, err := startSchedulerProcess(ctx, o, cl.ControlPlane.KubeconfigPath(), log)
	if err != nil {
		return nil, err
	}
	defer proc.kill()
	ready, err := proc.waitSynced(o.Timeout)
	if err != nil {
		return nil, err
	}
	baselineCPU := ready.StartupCPUSeconds
	if len(initPods) > 0 {
		// scheduler_perf's init pods, placed by the scheduler under test
		// before the measured ones; the CPU they took is not counted.
		fmt.Fprintf(log, "[%s/%s] creating %d init pods ...\n", o.Scheduler, o.Workload, len(initPods))
		err = parallel(ctx, len(initPods), o.Parallelism, func(i int) error {
			_, err := client.CoreV1().Pods("bench").Create(ctx, initPods[i], metav1.CreateOptions{})
			return err
		})
		if err != nil {
			return nil, err
		}
		select {
		case <-initDone:
		case err := <-proc.exited:
			return nil, fmt.Errorf("%s stopped: %v", o.Scheduler, err)
		case <-time.After(o.Timeout):
			return nil, fmt.Errorf("%s did not bind the %d init pods within %s", o.Scheduler, len(initPods), o.Timeout)
		}
		if baselineCPU, err = proc.cpuSeconds(o.Timeout); err != nil {
			return nil, err
		}
	}

	fmt.Fprintf(log, "[%s/%s] creating %d pods ...\n", o.Scheduler, o.Workload, o.Pods)
	// The rest of the machine's work (apiserver, etcd, simulated kubelets,
	// the pod creators) happens in this process: its CPU over the same
	// window says whether the machine, rather than the scheduler, set the
	// pace.
	stopProfile, err := StartCPUProfile(o.ControlPlaneProfile)
	if err != nil {
		return nil, err
	}
	defer stopProfile()
	controlPlaneStart := selfCPUSeconds()
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
	case err := <-proc.exited:
		return nil, fmt.Errorf("%s stopped: %v", o.Scheduler, err)
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(o.Timeout):
		mu.Lock()
		n := nSettled
		mu.Unlock()
		return nil, fmt.Errorf("%s settled %d/%d pods within %s", o.Scheduler, n, o.Pods, o.Timeout)
	}
	elapsed := time.Since(start)
	controlPlaneCPU := selfCPUSeconds() - controlPlaneStart
	stopProfile()
	usage, err := proc.stop()
	if err != nil {
		return nil, err
	}
	cpu := rusageCPUSeconds(usage) - baselineCPU
	res := &SchedulerResult{Scheduler: o.Scheduler, Workload: o.Workload, Nodes: o.Nodes, Pods: o.Pods,
		Seconds: elapsed.Seconds(), PodsPerSecond: float64(o.Pods) / elapsed.Seconds(),
		CPUSeconds: cpu, CPUPer1000Pods: cpu * 1000 / float64(o.Pods),
		ClientQPS: ready.ClientQPS, ClientBurst: ready.ClientBurst, PeakRSSBytes: usage.Maxrss * 1024,
		ControlPlaneCPUSeconds: controlPlaneCPU,
		MachineBusy:            (cpu + controlPlaneCPU) / (elapsed.Seconds() * float64(runtime.NumCPU()))}
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
	var measured []*corev1.Pod
	for _, p := range pods {
		if p.Labels["init"] != "true" {
			measured = append(measured, p)
		}
	}
	res.Quality = placementQuality(nodePtrs, measured)
	res.Outcome = outcomeOf(nodePtrs, pods, len(initPods))
	return res, nil
}

// schedulerProcess is a running scheduler process.
type schedulerProcess struct {
	cmd    *exec.Cmd
	synced chan syncReport
	cpu    chan float64
	exited chan error
}

func startSchedulerProcess(ctx context.Context, o SchedulerOptions, kubeconfig string, log io.Writer) (*schedulerProcess, error) {
	args := append(append([]string(nil), o.ProcessCommand[1:]...), "--scheduler", o.Scheduler, "--kubeconfig", kubeconfig,
		"--qps", strconv.FormatFloat(float64(o.QPS), 'g', -1, 32), "--burst", strconv.Itoa(o.Burst))
	if o.CPUProfile != "" {
		args = append(args, "--cpuprofile", o.CPUProfile)
	}
	if o.MemProfile != "" {
		args = append(args, "--memprofile", o.MemProfile)
	}
	cmd := exec.CommandContext(ctx, o.ProcessCommand[0], args...)
	cmd.Stderr = io.Discard
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the %s process: %w", o.Scheduler, err)
	}
	p := &schedulerProcess{cmd: cmd, synced: make(chan syncReport, 1), cpu: make(chan float64, 1), exited: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if raw, ok := strings.CutPrefix(sc.Text(), cpuPrefix); ok {
				if c, err := strconv.ParseFloat(raw, 64); err == nil {
					p.cpu <- c
				}
				continue
			}
			if raw, ok := strings.CutPrefix(sc.Text(), syncedPrefix); ok {
				var r syncReport
				if json.Unmarshal([]byte(raw), &r) == nil {
					p.synced <- r
				}
				continue
			}
			fmt.Fprintf(log, "[%s] %s\n", o.Scheduler, sc.Text())
		}
		p.exited <- cmd.Wait()
	}()
	return p, nil
}

func (p *schedulerProcess) waitSynced(timeout time.Duration) (syncReport, error) {
	select {
	case r := <-p.synced:
		return r, nil
	case err := <-p.exited:
		return syncReport{}, fmt.Errorf("scheduler process exited before it synced: %v", err)
	case <-time.After(timeout):
		return syncReport{}, fmt.Errorf("scheduler process not synced within %s", timeout)
	}
}

// cpuSeconds asks the process for the CPU it has used so far (SIGUSR1;
// it answers with a line of its own).
func (p *schedulerProcess) cpuSeconds(timeout time.Duration) (float64, error) {
	if err := p.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		return 0, fmt.Errorf("asking the scheduler process for its CPU: %w", err)
	}
	select {
	case c := <-p.cpu:
		return c, nil
	case err := <-p.exited:
		return 0, fmt.Errorf("scheduler process exited: %v", err)
	case <-time.After(timeout):
		return 0, fmt.Errorf("scheduler process did not say its CPU within %s", timeout)
	}
}

// stop ends the process with SIGTERM and returns its resource usage.
func (p *schedulerProcess) stop() (*syscall.Rusage, error) {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return nil, fmt.Errorf("stopping the scheduler process: %w", err)
	}
	select {
	case <-p.exited:
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	usage, ok := p.cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return nil, errors.New("no resource usage for the scheduler process")
	}
	return usage, nil
}

// kill ends the process at once (an error path; it may be gone already).
func (p *schedulerProcess) kill() { _ = p.cmd.Process.Kill() }

// rusageCPUSeconds is the user and system CPU of a finished process.
func rusageCPUSeconds(ru *syscall.Rusage) float64 {
	return float64(ru.Utime.Sec) + float64(ru.Utime.Usec)/1e6 + float64(ru.Stime.Sec) + float64(ru.Stime.Usec)/1e6
}

// waitNodesSchedulable waits until n nodes are Ready without the not-ready
// taint the node lifecycle controller lifts.
func waitNodesSchedulable(ctx context.Context, cl *cluster.Cluster, n int, timeout time.Duration) error {
	return waitfor.Poll(ctx, 500*time.Millisecond, timeout, waitfor.Simple(func(ctx context.Context) (bool, string) {
		list, err := cl.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, err.Error()
		}
		ok := 0
		for i := range list.Items {
			node := &list.Items[i]
			notReady := taints.Has(node.Spec.Taints, corev1.TaintNodeNotReady, corev1.TaintEffectNoSchedule) ||
				taints.Has(node.Spec.Taints, corev1.TaintNodeNotReady, corev1.TaintEffectNoExecute)
			if nodes.Ready(node) && !notReady {
				ok++
			}
		}
		return ok >= n, fmt.Sprintf("%d/%d nodes schedulable", ok, n)
	}))
}
