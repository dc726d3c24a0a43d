package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/nodes"
	"github.com/capstan-dev/capstan/internal/sim"
)

// ScaleStep is one size a scale run grows the cluster to.
type ScaleStep struct{ Nodes, Pods int }

func (s ScaleStep) String() string { return fmt.Sprintf("%d/%d", s.Nodes, s.Pods) }

// ParseScaleSteps reads steps written NODES/PODS,NODES/PODS,... each
// larger than the one before in both.
func ParseScaleSteps(s string) ([]ScaleStep, error) {
	var steps []ScaleStep
	for _, part := range strings.Split(s, ",") {
		n, p, ok := strings.Cut(strings.TrimSpace(part), "/")
		nodes, err1 := strconv.Atoi(n)
		pods, err2 := strconv.Atoi(p)
		if !ok || err1 != nil || err2 != nil || nodes <= 0 || pods < 0 {
			return nil, fmt.Errorf("step %q is not NODES/PODS (a positive node count, a pod count)", part)
		}
		step := ScaleStep{nodes, pods}
		if pods > nodes*250 {
			return nil, fmt.Errorf("step %s: %d pods do not fit on %d nodes of 250 pods", step, pods, nodes)
		}
		if len(steps) > 0 {
			if last := steps[len(steps)-1]; nodes < last.Nodes || pods < last.Pods {
				return nil, fmt.Errorf("step %s is smaller than the step %s before it: a scale run only grows", step, last)
			}
		}
		steps = append(steps, step)
	}
	return steps, nil
}

// ScaleOptions configure `capstan bench scale`.
type ScaleOptions struct {
	Steps []ScaleStep
	// ControlPlaneNodes are the masters the cluster boots with, each an
	// etcd member as under capstan up.
	ControlPlaneNodes int
	Parallelism       int
	// Timeout bounds each phase of a step (its nodes, its pods).
	Timeout time.Duration
	// Progress is how often a line of progress is printed.
	Progress    time.Duration
	DataDir     string
	EtcdNoFsync bool
	// ProfileDir, when set, receives a CPU profile of capstan's process
	// over each step and a heap profile at its end.
	ProfileDir string
}

// ScaleRow is what one step measured. A step that timed out has the
// figures it reached and says what timed out.
type ScaleRow struct {
	Step ScaleStep
	// NodesReady is the time from launching the step's new nodes to all
	// of them Ready; Ready counts the Ready nodes at its end.
	NodesReady time.Duration
	Ready      int
	// PodsRunning is the time from creating the step's new pods to all
	// of them Running; Running counts the Running pods at its end.
	PodsRunning time.Duration
	Running     int
	// PodsPerSecond is the step's new pods over PodsRunning;
	// CPUPerPod the CPU every process of capstan's used meanwhile, per
	// new pod.
	PodsPerSecond float64
	CPUPerPod     time.Duration
	// Processes are capstan's processes at the step's end (their peak
	// sizes are over the whole run so far).
	Processes []Process
	PeakRSS   int64
	// RSS is every process's resident memory at the step's end, when all
	// its pods run: the steady state, where PeakRSS includes the
	// garbage of creating them.
	RSS int64
	// HeapLive is the Go heap of capstan's own process left by a
	// collection at the step's end; HeapHeld what its heap holds of the
	// OS then (live objects, garbage and free spans not yet returned).
	HeapLive, HeapHeld uint64
	// GetPods is how long `capstan kubectl get pods -A` took at the
	// step's end, and Charts the slowest of the console's overview
	// charts (an hour of each, as the page asks for it); 0 when not
	// measured (a step that timed out is measured too).
	GetPods, Charts time.Duration
	TimedOut        string
}

// ScaleResult is every step's row.
type ScaleResult struct {
	ControlPlaneNodes int
	Rows              []ScaleRow
}

// Scale starts a cluster as capstan up runs it (its masters, the
// scheduler, the Machine API, the autoscaler, the MCO, monitoring and the
// console) and grows it step by step: each step launches the nodes it
// adds and waits for them Ready, then creates the pods it adds, unbound,
// for capstan's scheduler to place, and waits for them Running. It prints
// its progress every o.Progress and returns what each step measured, up
// to and including one that timed out.
func Scale(ctx context.Context, o ScaleOptions, log io.Writer) (*ScaleResult, error) {
	if len(o.Steps) == 0 || o.Parallelism <= 0 || o.ControlPlaneNodes <= 0 || o.Timeout <= 0 || o.Progress <= 0 {
		return nil, fmt.Errorf("a scale run needs steps, and a positive --parallelism, --control-plane-nodes, --timeout and --progress")
	}
	dir, removeDir, err := dataDir(o.DataDir, "capstan-bench-scale-")
	if err != nil {
		return nil, err
	}
	defer removeDir()
	if o.ProfileDir != "" {
		if err := os.MkdirAll(o.ProfileDir, 0o755); err != nil {
			return nil, err
		}
	}
	opts := clusterOptions(dir, o.EtcdNoFsync)
	// As capstan up: masters booted from Machines, every component, and
	// monitoring and the console on ports of their own.
	opts.ControlPlaneNodes = o.ControlPlaneNodes
	opts.BootFromMachines = true
	opts.MetricsAddress = "127.0.0.1:0"
	opts.ConsoleAddress = "127.0.0.1:0"
	opts.Releases.Address = "127.0.0.1:0"
	opts.Monitoring = cluster.MonitoringOptions{Retention: 24 * time.Hour, ScrapeInterval: 15 * time.Second,
		EvaluationInterval: 15 * time.Second, ThanosAddress: "127.0.0.1:0"}
	cl, err := startCluster(ctx, opts, dir, log)
	if err != nil {
		return nil, err
	}
	defer cl.Stop()
	// As capstan up: the masters booted from their Machines, and etcd a
	// member on each.
	if err := cl.EnsureNodes(ctx); err != nil {
		return nil, err
	}
	if err := cl.WaitBootNodesReady(ctx, o.Timeout); err != nil {
		return nil, err
	}
	etcd, err := cl.WaitEtcdFaultTolerant(ctx, o.Timeout, func(waiting string) {
		fmt.Fprintf(log, "Waiting for etcd to tolerate the loss of a master: %s\n", waiting)
	})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "%d masters Ready; etcd: %d of %d voting members healthy\n", o.ControlPlaneNodes, etcd.Healthy, etcd.Desired)
	if err := benchNamespace(ctx, cl.Client); err != nil {
		return nil, err
	}

	s := &scaleRun{o: o, cl: cl, log: log, start: time.Now()}
	stopInformers, err := s.watch(ctx)
	if err != nil {
		return nil, err
	}
	defer stopInformers()

	res := &ScaleResult{ControlPlaneNodes: o.ControlPlaneNodes}
	for _, step := range o.Steps {
		row, err := s.step(ctx, step)
		if row != nil {
			res.Rows = append(res.Rows, *row)
		}
		if err != nil {
			return res, err
		}
		if row.TimedOut != "" {
			break
		}
	}
	return res, nil
}

type scaleRun struct {
	o     ScaleOptions
	cl    *cluster.Cluster
	log   io.Writer
	start time.Time
	// nodes and pods are how many the run has launched and created.
	nodes, pods int
	// ready and running count the bench's Ready nodes and Running pods,
	// as its informers see them.
	ready, running atomic.Int64
}

// watch counts the bench's Ready nodes and Running pods. Its informers
// keep each object as a name and a bit, so that the memory measured is
// capstan's, not the measurement's.
func (s *scaleRun) watch(ctx context.Context) (func(), error) {
	var readyNodes, runningPods sync.Map
	count := func(set *sync.Map, counter *atomic.Int64, key string, in bool) {
		if in {
			if _, loaded := set.LoadOrStore(key, true); !loaded {
				counter.Add(1)
			}
		} else if _, was := set.LoadAndDelete(key); was {
			counter.Add(-1)
		}
	}
	nodeFactory := informers.NewSharedInformerFactoryWithOptions(s.cl.Client, 0, informers.WithTransform(func(obj any) (any, error) {
		if n, ok := obj.(*corev1.Node); ok {
			return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, ResourceVersion: n.ResourceVersion},
				Status: corev1.NodeStatus{Conditions: readyOnly(n)}}, nil
		}
		return obj, nil
	}))
	podFactory := informers.NewSharedInformerFactoryWithOptions(s.cl.Client, 0, informers.WithNamespace("bench"),
		informers.WithTransform(func(obj any) (any, error) {
			if p, ok := obj.(*corev1.Pod); ok {
				return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, ResourceVersion: p.ResourceVersion},
					Status: corev1.PodStatus{Phase: p.Status.Phase}}, nil
			}
			return obj, nil
		}))
	onNode := func(obj any) {
		if n, ok := obj.(*corev1.Node); ok && strings.HasPrefix(n.Name, "bench-") {
			count(&readyNodes, &s.ready, n.Name, nodes.Ready(n))
		}
	}
	onPod := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			count(&runningPods, &s.running, p.Name, p.Status.Phase == corev1.PodRunning)
		}
	}
	if _, err := nodeFactory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onNode, UpdateFunc: func(_, n any) { onNode(n) },
	}); err != nil {
		return nil, err
	}
	if _, err := podFactory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onPod, UpdateFunc: func(_, p any) { onPod(p) },
	}); err != nil {
		return nil, err
	}
	infCtx, cancel := context.WithCancel(ctx)
	nodeFactory.Start(infCtx.Done())
	podFactory.Start(infCtx.Done())
	return func() {
		cancel()
		nodeFactory.Shutdown()
		podFactory.Shutdown()
	}, nil
}

// readyOnly is a node's Ready condition alone.
func readyOnly(n *corev1.Node) []corev1.NodeCondition {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return []corev1.NodeCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	return nil
}

// step grows the cluster to step and measures it.
func (s *scaleRun) step(ctx context.Context, step ScaleStep) (*ScaleRow, error) {
	row := &ScaleRow{Step: step}
	stopProfile, err := StartCPUProfile(s.profile(step, "cpu"))
	if err != nil {
		return nil, err
	}
	defer stopProfile()
	fmt.Fprintf(s.log, "Step %s: launching %d nodes ...\n", step, step.Nodes-s.nodes)
	began := time.Now()
	from := s.nodes
	err = parallel(ctx, step.Nodes-from, s.o.Parallelism, func(i int) error {
		_, err := s.cl.Cloud.CreateInstance(ctx, sim.InstanceSpec{
			Name: fmt.Sprintf("bench-%04d", from+i), Zone: sim.DefaultZones[(from+i)%len(sim.DefaultZones)],
			CPU: resource.MustParse("32"), Memory: resource.MustParse("128Gi"), Pods: 250,
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("step %s: launching nodes: %w", step, err)
	}
	s.nodes = step.Nodes
	timedOut, err := s.wait(ctx, step, "nodes Ready", nil, func() bool { return s.ready.Load() >= int64(step.Nodes) })
	if err != nil {
		return nil, err
	}
	row.NodesReady, row.Ready = time.Since(began), int(s.ready.Load())
	if timedOut != nil {
		return s.finish(row, step, timedOut)
	}
	fmt.Fprintf(s.log, "Step %s: %d nodes Ready in %.1fs; creating %d pods for the scheduler ...\n", step, step.Nodes, row.NodesReady.Seconds(), step.Pods-s.pods)

	ps, err := Processes()
	if err != nil {
		return nil, err
	}
	_, _, cpuBefore := totals(ps)
	began = time.Now()
	from = s.pods
	created := make(chan error, 1)
	cctx, stopCreating := context.WithCancel(ctx)
	defer stopCreating()
	go func() {
		created <- parallel(cctx, step.Pods-from, s.o.Parallelism, func(i int) error {
			_, err := s.cl.Client.CoreV1().Pods("bench").Create(cctx, benchPod(from+i, ""), metav1.CreateOptions{})
			return err
		})
	}()
	timedOut, err = s.wait(ctx, step, "pods Running", created, func() bool { return s.running.Load() >= int64(step.Pods) })
	if err != nil {
		return nil, fmt.Errorf("step %s: creating pods: %w", step, err)
	}
	row.PodsRunning, row.Running = time.Since(began), int(s.running.Load())
	s.pods = step.Pods
	if ps, err = Processes(); err != nil {
		return nil, err
	}
	_, _, cpuAfter := totals(ps)
	if n := row.Running - from; n > 0 {
		row.PodsPerSecond = float64(n) / row.PodsRunning.Seconds()
		row.CPUPerPod = (cpuAfter - cpuBefore) / time.Duration(n)
	}
	return s.finish(row, step, timedOut)
}

// finish completes a step's row with its processes and profiles.
func (s *scaleRun) finish(row *ScaleRow, step ScaleStep, timedOut error) (*ScaleRow, error) {
	if timedOut != nil {
		row.TimedOut = timedOut.Error()
		fmt.Fprintf(s.log, "Step %s: %v\n", step, timedOut)
	}
	ps, err := Processes()
	if err != nil {
		return nil, err
	}
	row.Processes = ps
	row.PeakRSS, row.RSS, _ = totals(ps)
	if row.GetPods, err = s.timeGetPods(); err != nil {
		return nil, err
	}
	if row.Charts, err = s.timeCharts(); err != nil {
		return nil, err
	}
	fmt.Fprintf(s.log, "Step %s: kubectl get pods -A answered in %.2f s, the console's slowest chart in %.2f s\n",
		step, row.GetPods.Seconds(), row.Charts.Seconds())
	row.HeapLive, row.HeapHeld = heapAfterCollection()
	if path := s.profile(step, "heap"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
			return nil, err
		}
	}
	return row, nil
}

// timeGetPods runs `capstan kubectl get pods -A` as a user would, in a
// process of its own, and returns how long it took to print every pod.
func (s *scaleRun) timeGetPods() (time.Duration, error) {
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	cmd := exec.Command(self, "kubectl", "--kubeconfig", s.cl.ControlPlane.KubeconfigPath(), "get", "pods", "-A")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	began := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("kubectl get pods -A: %w: %s", err, stderr.String())
	}
	return time.Since(began), nil
}

// ConsoleCharts are the queries of the console overview's charts, each
// asked for the last hour at a 15 s step.
var ConsoleCharts = []string{
	`sum(kube_pod_status_phase{phase="Pending"})`,
	`count(kube_node_info)`,
	`sum(rate(scheduler_schedule_attempts_total{result="scheduled"}[5m]))`,
}

// timeCharts asks the Prometheus API for each of ConsoleCharts as the
// console does, and returns the longest answer.
func (s *scaleRun) timeCharts() (time.Duration, error) {
	var slowest time.Duration
	end := time.Now()
	for _, q := range ConsoleCharts {
		qs := url.Values{"query": {q}, "start": {fmt.Sprint(end.Add(-time.Hour).Unix())}, "end": {fmt.Sprint(end.Unix())}, "step": {"15"}}
		began := time.Now()
		resp, err := http.Get(s.cl.PrometheusURL + "/api/v1/query_range?" + qs.Encode())
		if err != nil {
			return 0, fmt.Errorf("the console's chart %s: %w", q, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return 0, fmt.Errorf("the console's chart %s: %w", q, err)
		}
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("the console's chart %s: %s: %s", q, resp.Status, body)
		}
		slowest = max(slowest, time.Since(began))
	}
	return slowest, nil
}

// profile is where a step's profile of kind goes, "" when none is asked.
func (s *scaleRun) profile(step ScaleStep, kind string) string {
	if s.o.ProfileDir == "" {
		return ""
	}
	return filepath.Join(s.o.ProfileDir, fmt.Sprintf("%s-%dn-%dp.pprof", kind, step.Nodes, step.Pods))
}

// wait waits until done holds, printing progress every s.o.Progress. It
// returns timedOut naming what was reached when the step's timeout
// passes first, and err when failed (if not nil) gives an error first.
func (s *scaleRun) wait(ctx context.Context, step ScaleStep, what string, failed <-chan error, done func() bool) (timedOut, err error) {
	deadline := time.Now().Add(s.o.Timeout)
	tick := time.NewTicker(s.o.Progress)
	defer tick.Stop()
	check := time.NewTicker(100 * time.Millisecond)
	defer check.Stop()
	lastRunning, lastAt := s.running.Load(), time.Now()
	for !done() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("interrupted waiting for %s at %s", what, s.reached(step)), nil
		case err := <-failed:
			if err != nil {
				return nil, err
			}
			failed = nil
		case <-check.C:
			if time.Now().After(deadline) {
				return fmt.Errorf("timed out after %s waiting for %s at %s", s.o.Timeout, what, s.reached(step)), nil
			}
		case now := <-tick.C:
			running := s.running.Load()
			rate := float64(running-lastRunning) / now.Sub(lastAt).Seconds()
			lastRunning, lastAt = running, now
			line := fmt.Sprintf("[%6.0fs] step %s: %s, %.0f pods/s", now.Sub(s.start).Seconds(), step, s.reached(step), rate)
			if ps, err := Processes(); err == nil {
				_, rss, _ := totals(ps)
				line += ", RSS " + GiB(rss)
			}
			fmt.Fprintln(s.log, line)
		}
	}
	return nil, nil
}

func (s *scaleRun) reached(step ScaleStep) string {
	return fmt.Sprintf("%d/%d nodes Ready, %d/%d pods Running", s.ready.Load(), step.Nodes, s.running.Load(), step.Pods)
}

// PrintScale writes the result's table and each step's processes.
func PrintScale(w io.Writer, res *ScaleResult) {
	fmt.Fprintf(w, "\nbench scale: masters %d, steps %s\n", res.ControlPlaneNodes, stepsOf(res))
	fmt.Fprint(w, ScaleTable(res))
	for _, r := range res.Rows {
		fmt.Fprintf(w, "\nprocesses at %s (peak RSS, RSS at the end, CPU so far):\n", r.Step)
		PrintProcesses(w, r.Processes, r.HeapLive, r.HeapHeld)
	}
}

// PrintProcesses writes each process's peak and current resident size and
// CPU, and capstan's Go heap.
func PrintProcesses(w io.Writer, ps []Process, heapLive, heapHeld uint64) {
	for _, p := range ps {
		fmt.Fprintf(w, "  %-32s %9s %9s %8.0fs\n", p.Name, MiB(p.PeakRSS), MiB(p.RSS), p.CPU.Seconds())
	}
	fmt.Fprintf(w, "  capstan's Go heap at the end: %s held from the OS, %s live after a collection\n",
		MiB(int64(heapHeld)), MiB(int64(heapLive)))
}

// heapAfterCollection is this process's Go heap left by a collection now,
// and what the heap held from the OS before it.
func heapAfterCollection() (live, held uint64) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	runtime.GC()
	runtime.ReadMemStats(&after)
	return after.HeapAlloc, before.HeapSys - before.HeapReleased
}

func stepsOf(res *ScaleResult) string {
	var s []string
	for _, r := range res.Rows {
		s = append(s, r.Step.String())
	}
	return strings.Join(s, ", ")
}

// ScaleTable is the result as a Markdown table.
func ScaleTable(res *ScaleResult) string {
	var b strings.Builder
	b.WriteString("| nodes | pods | nodes Ready | pods Running | pods/s | CPU per pod | RSS at the end, all processes | peak RSS, all processes | largest process | get pods -A | console charts | outcome |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|\n")
	for _, r := range res.Rows {
		largest := Process{}
		for _, p := range r.Processes {
			if p.PeakRSS > largest.PeakRSS {
				largest = p
			}
		}
		outcome := "done"
		if r.TimedOut != "" {
			outcome = r.TimedOut
		}
		fmt.Fprintf(&b, "| %d | %d | %d in %.1f s | %d in %.1f s | %.0f | %.1f ms | %s | %s | %s, %s | %.2f s | %.2f s | %s |\n",
			r.Step.Nodes, r.Step.Pods, r.Ready, r.NodesReady.Seconds(), r.Running, r.PodsRunning.Seconds(),
			r.PodsPerSecond, float64(r.CPUPerPod.Microseconds())/1000, GiB(r.RSS), GiB(r.PeakRSS), largest.Name, GiB(largest.PeakRSS),
			r.GetPods.Seconds(), r.Charts.Seconds(), outcome)
	}
	return b.String()
}

// Markers bound the part of a document that `bench scale --doc`
// rewrites.
const (
	ScaleDocBegin = "<!-- capstan bench scale: begin -->"
	ScaleDocEnd   = "<!-- capstan bench scale: end -->"
)

// WriteScaleDoc puts the result's table, with the machine it ran on,
// between the markers of the Markdown file doc, and its plot (an SVG of
// memory and pods/s against size) beside it as NAME.svg.
func WriteScaleDoc(doc string, res *ScaleResult, machine string) error {
	raw, err := os.ReadFile(doc)
	if err != nil {
		return err
	}
	text := string(raw)
	begin, end := strings.Index(text, ScaleDocBegin), strings.Index(text, ScaleDocEnd)
	if begin < 0 || end < begin {
		return fmt.Errorf("%s has no %s ... %s section to write the table into", doc, ScaleDocBegin, ScaleDocEnd)
	}
	svg := strings.TrimSuffix(doc, filepath.Ext(doc)) + ".svg"
	if err := os.WriteFile(svg, []byte(ScalePlot(res)), 0o644); err != nil {
		return err
	}
	section := fmt.Sprintf("%s\n\nMeasured on %s, with %d masters.\n\n%s\n![Peak memory and pods/s against the cluster's size](%s)\n\n%s",
		ScaleDocBegin, machine, res.ControlPlaneNodes, ScaleTable(res), filepath.Base(svg), ScaleDocEnd)
	return os.WriteFile(doc, []byte(text[:begin]+section+text[end+len(ScaleDocEnd):]), 0o644)
}

// ScalePlot draws peak memory (GiB, left axis) and pods/s (right axis)
// against the pods Running at each step's end (a step that timed out sits
// where it got to), one point per step, as an SVG.
func ScalePlot(res *ScaleResult) string {
	const w, h, left, right, top, bottom = 640, 360, 70, 70, 30, 50
	var maxPods, maxGiB, maxRate float64 = 1, 1, 1
	for _, r := range res.Rows {
		maxPods = max(maxPods, float64(r.Running))
		maxGiB = max(maxGiB, float64(r.PeakRSS)/(1<<30))
		maxRate = max(maxRate, r.PodsPerSecond)
	}
	maxGiB, maxRate = niceCeil(maxGiB), niceCeil(maxRate)
	x := func(p float64) float64 { return left + p/maxPods*(w-left-right) }
	y := func(v, top2 float64) float64 { return h - bottom - v/top2*(h-top-bottom) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="14">capstan bench scale: peak memory and pods/s against pods</text>`+"\n", left)
	// Axes, with five ticks each.
	fmt.Fprintf(&b, `<path d="M%d %d V%d H%d V%d" fill="none" stroke="black"/>`+"\n", left, top, h-bottom, w-right, top)
	for i := 0; i <= 4; i++ {
		f := float64(i) / 4
		fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle">%.0f</text>`+"\n", x(f*maxPods), h-bottom+16, f*maxPods)
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" text-anchor="end" fill="#1f5fa8">%.1f</text>`+"\n", left-6, y(f*maxGiB, maxGiB)+4, f*maxGiB)
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" fill="#b5531c">%.0f</text>`+"\n", w-right+6, y(f*maxRate, maxRate)+4, f*maxRate)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">pods Running</text>`+"\n", (left+w-right)/2, h-12)
	fmt.Fprintf(&b, `<text x="16" y="%d" fill="#1f5fa8" transform="rotate(-90 16 %d)" text-anchor="middle">peak RSS, GiB</text>`+"\n", h/2, h/2)
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#b5531c" transform="rotate(90 %d %d)" text-anchor="middle">pods/s</text>`+"\n", w-16, h/2, w-16, h/2)
	series := func(color string, v func(ScaleRow) float64, top2 float64) {
		var pts []string
		for _, r := range res.Rows {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(float64(r.Running)), y(v(r), top2)))
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), color)
		for _, p := range pts {
			xy := strings.Split(p, ",")
			fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="4" fill="%s"/>`+"\n", xy[0], xy[1], color)
		}
	}
	series("#1f5fa8", func(r ScaleRow) float64 { return float64(r.PeakRSS) / (1 << 30) }, maxGiB)
	series("#b5531c", func(r ScaleRow) float64 { return r.PodsPerSecond }, maxRate)
	b.WriteString("</svg>\n")
	return b.String()
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	p := 1.0
	for p*10 <= v {
		p *= 10
	}
	for p > v && p > 1e-9 {
		p /= 10
	}
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}
