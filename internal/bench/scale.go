package bench

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/memlimit"
	"github.com/capstan-dev/capstan/internal/nodes"
	"github.com/capstan-dev/capstan/internal/seeded"
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
	// ControlPlaneNodes are the masters of the full cluster, each an etcd
	// member as under capstan up; the floor runs as many etcd members.
	ControlPlaneNodes int
	Parallelism       int
	// Timeout bounds each phase of a step (its nodes, its pods).
	Timeout time.Duration
	// Progress is how often a line of progress is printed.
	Progress time.Duration
	// DataDir, when set, holds each run's data dir, kept.
	DataDir     string
	EtcdNoFsync bool
	// ProfileDir, when set, receives a CPU profile of the cluster's
	// process over each step's pods and a heap profile at its end.
	ProfileDir string
	// Runs is how many times each cluster runs; Modes the clusters, in
	// the order each round runs them: ModeFloor or ModeFull, each run by
	// this binary, or by another when written MODE@PATH (a build to
	// compare with).
	Runs  int
	Modes []string
	// Baseline is the idle window before each step's pods over which
	// the cluster's CPU at rest is measured.
	Baseline time.Duration
	// Idle, when positive, holds the cluster idle this long after its
	// last step, watching its nodes and leases.
	Idle time.Duration
	// Seed seeds capstan's randomness in the cluster's process.
	Seed uint64
}

// ScaleRow is what one step of one run measured. A step that timed out
// has the figures it reached and says what timed out.
type ScaleRow struct {
	Mode string
	Run  int
	Step ScaleStep
	// NodesReady is the time from launching the step's new nodes to all
	// of them Ready; Ready counts the Ready nodes at its end.
	NodesReady time.Duration
	Ready      int
	// PodsRunning is the time from creating the step's new pods to all
	// of them Running; Running counts the Running pods at its end.
	PodsRunning time.Duration
	Running     int
	// PodsPerSecond is the step's new pods over PodsRunning.
	PodsPerSecond float64
	// IdleCores is the CPU the cluster's processes used at rest, with the
	// step's nodes Ready and before its pods, in cores.
	IdleCores float64
	// CPUPerPod is the CPU the cluster's processes used while the step's
	// pods started, less what they use at rest over as long, per new
	// pod; GrossCPUPerPod the same without the subtraction.
	CPUPerPod, GrossCPUPerPod time.Duration
	// Processes are the cluster's processes at the step's end (their
	// peak sizes over the run so far).
	Processes []Process
	// PSS is the proportional memory of every process at the step's
	// end; PeakPSS the most it was at a progress line.
	PSS, PeakPSS int64
	// HeapLive is the Go heap of the cluster's process left by a
	// collection at the step's end; HeapHeld what it held from the OS
	// then; HeapPerPod what the live heap grew by per new pod.
	HeapLive, HeapHeld uint64
	HeapPerPod         float64
	// LeaseAgeP99 is the 99th percentile of node lease ages at renewal
	// over the step; MaxLeaseAge the oldest lease seen at a progress line.
	LeaseAgeP99, MaxLeaseAge float64
	// NotReady counts the nodes that went from Ready to not Ready during
	// the step.
	NotReady int
	// GetPods is how long `capstan kubectl get pods -A` took at the
	// step's end, and Charts the slowest of the console's overview
	// charts (an hour of each, as the page asks for it).
	GetPods, Charts time.Duration
	TimedOut        string
	// Hold is what holding the cluster idle after its last step measured.
	Hold *IdleHold `json:",omitempty"`
}

// IdleHold is what the cluster did while held idle.
type IdleHold struct {
	For         time.Duration
	Cores       float64
	LeaseAgeP99 float64
	MaxLeaseAge float64
	NotReady    int
}

// ScaleSettings are what a table was measured with.
type ScaleSettings struct {
	Machine, Commit, GoVersion string
	GOGC                       int
	GOMEMLIMIT                 int64
	MemberGOMEMLIMIT           string
	EtcdMembers                map[string]int
	Seed                       string
	Fsync                      bool
}

// ScaleResult is every run's rows.
type ScaleResult struct {
	ControlPlaneNodes int
	Settings          ScaleSettings
	Rows              []ScaleRow
}

// Scale measures the full cluster beside the floor: for each of o.Runs
// rounds, one run of each of o.Modes in turn, each in a cluster process
// of its own that this process loads and watches. It returns every run's
// rows, up to the first error.
func Scale(ctx context.Context, o ScaleOptions, log io.Writer) (*ScaleResult, error) {
	if len(o.Steps) == 0 || o.Parallelism <= 0 || o.ControlPlaneNodes <= 0 || o.Timeout <= 0 || o.Progress <= 0 || o.Runs <= 0 || o.Baseline < 0 || o.Idle < 0 {
		return nil, fmt.Errorf("a scale run needs steps, a positive --parallelism, --control-plane-nodes, --timeout, --progress and --runs, and no negative --baseline or --idle")
	}
	if len(o.Modes) == 0 {
		return nil, fmt.Errorf("a scale run needs a mode: %s, %s or both", ModeFloor, ModeFull)
	}
	var clusters []scaleCluster
	for _, m := range o.Modes {
		c, err := ParseScaleCluster(m)
		if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(clusters, func(o scaleCluster) bool { return o.label == c.label }) {
			return nil, fmt.Errorf("mode %q is given twice", c.label)
		}
		clusters = append(clusters, c)
	}
	if o.ProfileDir != "" {
		if err := os.MkdirAll(o.ProfileDir, 0o755); err != nil {
			return nil, err
		}
	}
	res := &ScaleResult{ControlPlaneNodes: o.ControlPlaneNodes, Settings: ScaleSettings{
		Commit: commit(), GoVersion: runtime.Version(), Seed: strconv.FormatUint(o.Seed, 10), Fsync: !o.EtcdNoFsync,
		EtcdMembers: map[string]int{}}}
	for run := 1; run <= o.Runs; run++ {
		for _, c := range clusters {
			r := &scaleRun{o: o, mode: c.mode, label: c.label, binary: c.binary, run: run, log: log, start: time.Now(), notReady: map[string]bool{}}
			rows, served, err := r.measure(ctx)
			res.Rows = append(res.Rows, rows...)
			if served != nil {
				res.Settings.GOGC, res.Settings.GOMEMLIMIT, res.Settings.MemberGOMEMLIMIT = served.GOGC, served.GOMEMLIMIT, served.MemberGOMEMLIMIT
				res.Settings.EtcdMembers[c.label] = served.EtcdMembers
			}
			if err != nil {
				return res, fmt.Errorf("%s run %d: %w", c.label, run, err)
			}
		}
	}
	return res, nil
}

// scaleCluster is one cluster a scale run measures: its mode, the binary
// that runs it ("" for this one) and its name in the tables.
type scaleCluster struct{ mode, binary, label string }

// ParseScaleCluster reads MODE or MODE@PATH: a mode run by this binary or
// by the capstan binary at PATH, named MODE@BASENAME.
func ParseScaleCluster(spec string) (scaleCluster, error) {
	mode, binary, other := strings.Cut(strings.TrimSpace(spec), "@")
	if mode != ModeFloor && mode != ModeFull {
		return scaleCluster{}, fmt.Errorf("mode %q: want %s or %s, alone or as MODE@PATH of a capstan binary", spec, ModeFloor, ModeFull)
	}
	c := scaleCluster{mode: mode, label: mode}
	if other {
		st, err := os.Stat(binary)
		if err != nil {
			return scaleCluster{}, fmt.Errorf("mode %q: %w", spec, err)
		}
		if st.IsDir() || st.Mode()&0o111 == 0 {
			return scaleCluster{}, fmt.Errorf("mode %q: %s is not an executable file", spec, binary)
		}
		c.binary, c.label = binary, mode+"@"+filepath.Base(binary)
	}
	return c, nil
}

// commit is the commit capstan was built from: the build's, or the work
// tree's when the build does not say (go run), marked when it has
// changes.
func commit() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		var rev, dirty string
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = " with changes"
				}
			}
		}
		if rev != "" {
			return rev[:min(12, len(rev))] + dirty
		}
	}
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	rev := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		rev += " with changes"
	}
	return rev
}

// scaleRun is one run of one mode: the cluster's process, and the load
// and the watching this process does.
type scaleRun struct {
	o ScaleOptions
	// mode is what the cluster runs; label its name in the tables;
	// binary the capstan that runs it ("" for this one).
	mode, label, binary string
	run                 int
	log                 io.Writer
	start               time.Time

	served  *Served
	client  kubernetes.Interface
	cloud   *sim.APICloud
	control *http.Client
	// nodes and pods are how many the run has launched and created.
	nodes, pods int
	// ready and running count the bench's Ready nodes and Running pods,
	// as its informers see them.
	ready, running atomic.Int64
	mu             sync.Mutex
	// notReady are the nodes that went from Ready to not Ready.
	notReady map[string]bool
	// peakPSS and maxLease are the most seen at progress lines.
	peakPSS  int64
	maxLease float64
}

func (s *scaleRun) logf(format string, args ...any) {
	fmt.Fprintf(s.log, "[%s %d] "+format+"\n", append([]any{s.label, s.run}, args...)...)
}

// measure starts the cluster's process, grows it step by step, holds it
// idle if asked, and stops it.
func (s *scaleRun) measure(ctx context.Context) ([]ScaleRow, *Served, error) {
	dir := ""
	if s.o.DataDir != "" {
		dir = filepath.Join(s.o.DataDir, fmt.Sprintf("%s-%d", s.label, s.run))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, nil, err
		}
	}
	dir, removeDir, err := dataDir(dir, "capstan-bench-scale-"+s.label+"-")
	if err != nil {
		return nil, nil, err
	}
	defer removeDir()
	stop, err := s.serve(ctx, dir)
	if err != nil {
		return nil, nil, err
	}
	defer stop()
	stopInformers, err := s.watch(ctx)
	if err != nil {
		return nil, s.served, err
	}
	defer stopInformers()
	var rows []ScaleRow
	for _, step := range s.o.Steps {
		row, err := s.step(ctx, step)
		if row != nil {
			rows = append(rows, *row)
		}
		if err != nil {
			return rows, s.served, err
		}
		if row.TimedOut != "" {
			return rows, s.served, nil
		}
	}
	if s.o.Idle > 0 && len(rows) > 0 {
		hold, err := s.hold(ctx)
		if err != nil {
			return rows, s.served, err
		}
		rows[len(rows)-1].Hold = hold
	}
	return rows, s.served, nil
}

// serve starts `capstan bench serve` in dir and waits until it says it
// serves; stop ends it.
func (s *scaleRun) serve(ctx context.Context, dir string) (stop func(), err error) {
	self := s.binary
	if self == "" {
		if self, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	status := filepath.Join(dir, "served.json")
	logPath := filepath.Join(dir, "bench-serve.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	args := []string{"bench", "serve", "--mode", s.mode, "--control-plane-nodes", strconv.Itoa(s.o.ControlPlaneNodes),
		"--data-dir", filepath.Join(dir, "cluster"), "--status-file", status, "--timeout", s.o.Timeout.String()}
	if s.o.EtcdNoFsync {
		args = append(args, "--etcd-unsafe-no-fsync")
	}
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), seeded.Env+"="+strconv.FormatUint(s.o.Seed, 10))
	cmd.Stdout, cmd.Stderr = logf, logf
	// The cluster's process ends with this one's thread that started it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	runtime.LockOSThread()
	if err := cmd.Start(); err != nil {
		runtime.UnlockOSThread()
		logf.Close()
		return nil, fmt.Errorf("starting the cluster's process: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(2 * time.Minute):
			_ = cmd.Process.Kill()
			<-exited
		}
		runtime.UnlockOSThread()
		logf.Close()
	}
	s.logf("Starting a %s cluster in %s (its log: %s) ...", s.mode, dir, logPath)
	deadline := time.Now().Add(s.o.Timeout)
	for {
		raw, err := os.ReadFile(status)
		if err == nil {
			s.served = &Served{}
			if err := json.Unmarshal(raw, s.served); err != nil {
				stop()
				return nil, fmt.Errorf("the cluster's status %s: %w", status, err)
			}
			break
		}
		select {
		case err := <-exited:
			exited <- err
			stop()
			tail, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("the cluster's process ended (%v) before it served:\n%s", err, lastLines(string(tail), 20))
		case <-ctx.Done():
			stop()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("the cluster did not serve within %s (its log: %s)", s.o.Timeout, logPath)
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", s.served.Kubeconfig)
	if err != nil {
		stop()
		return nil, err
	}
	cfg.QPS, cfg.Burst = 2000, 4000
	if s.client, err = kubernetes.NewForConfig(cluster.ProtobufConfig(cfg)); err != nil {
		stop()
		return nil, err
	}
	s.cloud = sim.NewAPICloud(s.client, sim.CloudOptions{})
	s.control = &http.Client{Timeout: 5 * time.Minute}
	s.logf("Serving: %d etcd members, GOGC=%d, GOMEMLIMIT=%s", s.served.EtcdMembers, s.served.GOGC, memlimit.Bytes(s.served.GOMEMLIMIT))
	return stop, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// state asks the cluster's process for its heap (after a collection) and
// its lease ages.
func (s *scaleRun) state(ctx context.Context) (*ServedState, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.served.Control+"/state", nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.control.Do(req)
	if err != nil {
		return nil, fmt.Errorf("the cluster's state: %w", err)
	}
	defer resp.Body.Close()
	st := &ServedState{}
	if err := json.NewDecoder(resp.Body).Decode(st); err != nil {
		return nil, fmt.Errorf("the cluster's state: %w", err)
	}
	return st, nil
}

// post asks the cluster's process to act (start or stop a profile).
func (s *scaleRun) post(ctx context.Context, path, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.served.Control+path+"?"+url.Values{"path": {file}}.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := s.control.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: %s: %s", path, resp.Status, body)
	}
	return nil
}

// cpu is the CPU the cluster's processes have used so far.
func (s *scaleRun) cpu() (time.Duration, error) {
	ps, err := ProcessTree(s.served.PID)
	if err != nil {
		return 0, err
	}
	_, _, cpu := totals(ps)
	return cpu, nil
}

// watch counts the bench's Ready nodes and Running pods, and the nodes
// that went from Ready to not Ready. Its informers keep each object as a
// name and a bit.
func (s *scaleRun) watch(ctx context.Context) (func(), error) {
	var readyNodes, runningPods sync.Map
	count := func(set *sync.Map, counter *atomic.Int64, key string, in bool) (was bool) {
		if in {
			if _, loaded := set.LoadOrStore(key, true); !loaded {
				counter.Add(1)
			}
			return false
		}
		if _, was = set.LoadAndDelete(key); was {
			counter.Add(-1)
		}
		return was
	}
	nodeFactory := informers.NewSharedInformerFactoryWithOptions(s.client, 0, informers.WithTransform(func(obj any) (any, error) {
		if n, ok := obj.(*corev1.Node); ok {
			return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, ResourceVersion: n.ResourceVersion},
				Status: corev1.NodeStatus{Conditions: readyOnly(n)}}, nil
		}
		return obj, nil
	}))
	podFactory := informers.NewSharedInformerFactoryWithOptions(s.client, 0, informers.WithNamespace("bench"),
		informers.WithTransform(func(obj any) (any, error) {
			if p, ok := obj.(*corev1.Pod); ok {
				return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, ResourceVersion: p.ResourceVersion},
					Status: corev1.PodStatus{Phase: p.Status.Phase}}, nil
			}
			return obj, nil
		}))
	onNode := func(obj any) {
		if n, ok := obj.(*corev1.Node); ok && strings.HasPrefix(n.Name, "bench-") {
			if count(&readyNodes, &s.ready, n.Name, nodes.Ready(n)) {
				s.mu.Lock()
				s.notReady[n.Name] = true
				s.mu.Unlock()
				s.logf("node %s went NotReady", n.Name)
			}
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

func (s *scaleRun) notReadyCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.notReady)
}

// step grows the cluster to step and measures it.
func (s *scaleRun) step(ctx context.Context, step ScaleStep) (*ScaleRow, error) {
	row := &ScaleRow{Mode: s.label, Run: s.run, Step: step}
	before, err := s.state(ctx)
	if err != nil {
		return nil, err
	}
	notReadyBefore := s.notReadyCount()
	s.logf("Step %s: launching %d nodes ...", step, step.Nodes-s.nodes)
	began := time.Now()
	from := s.nodes
	err = parallel(ctx, step.Nodes-from, s.o.Parallelism, func(i int) error {
		_, err := s.cloud.CreateInstance(ctx, sim.InstanceSpec{
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
		return s.finish(ctx, row, step, before, notReadyBefore, timedOut)
	}
	s.logf("Step %s: %d nodes Ready in %.1fs", step, step.Nodes, row.NodesReady.Seconds())

	// The cluster at rest, its nodes renewing their leases: what it
	// costs then is not the pods'.
	heapBefore, err := s.state(ctx)
	if err != nil {
		return nil, err
	}
	if s.o.Baseline > 0 {
		idle, err := s.idleCores(ctx, s.o.Baseline)
		if err != nil {
			return nil, err
		}
		row.IdleCores = idle
		s.logf("Step %s: %.2f cores at rest over %s", step, idle, s.o.Baseline)
	}
	if step.Pods <= s.pods {
		return s.finish(ctx, row, step, before, notReadyBefore, nil)
	}
	if path := s.profile(step, "cpu"); path != "" {
		if err := s.post(ctx, "/cpuprofile/start", path); err != nil {
			return nil, err
		}
	}
	s.logf("Step %s: creating %d pods (%s) ...", step, step.Pods-s.pods, map[string]string{
		ModeFull: "for capstan's scheduler", ModeFloor: "bound to their nodes"}[s.mode])
	cpuBefore, err := s.cpu()
	if err != nil {
		return nil, err
	}
	began = time.Now()
	from = s.pods
	created := make(chan error, 1)
	cctx, stopCreating := context.WithCancel(ctx)
	defer stopCreating()
	go func() {
		created <- parallel(cctx, step.Pods-from, s.o.Parallelism, func(i int) error {
			node := ""
			if s.mode == ModeFloor {
				node = fmt.Sprintf("bench-%04d", (from+i)%step.Nodes)
			}
			_, err := s.client.CoreV1().Pods("bench").Create(cctx, benchPod(from+i, node), metav1.CreateOptions{})
			return err
		})
	}()
	timedOut, err = s.wait(ctx, step, "pods Running", created, func() bool { return s.running.Load() >= int64(step.Pods) })
	if err != nil {
		return nil, fmt.Errorf("step %s: creating pods: %w", step, err)
	}
	row.PodsRunning, row.Running = time.Since(began), int(s.running.Load())
	s.pods = step.Pods
	cpuAfter, err := s.cpu()
	if err != nil {
		return nil, err
	}
	if s.o.ProfileDir != "" {
		if err := s.post(ctx, "/cpuprofile/stop", ""); err != nil {
			return nil, err
		}
	}
	if n := row.Running - from; n > 0 {
		gross := cpuAfter - cpuBefore
		net := gross - time.Duration(row.IdleCores*float64(row.PodsRunning))
		row.PodsPerSecond = float64(n) / row.PodsRunning.Seconds()
		row.GrossCPUPerPod, row.CPUPerPod = gross/time.Duration(n), max(0, net)/time.Duration(n)
	}
	out, err := s.finish(ctx, row, step, before, notReadyBefore, timedOut)
	if out != nil && row.Running > from {
		out.HeapPerPod = (float64(out.HeapLive) - float64(heapBefore.HeapLive)) / float64(row.Running-from)
	}
	return out, err
}

// idleCores is the CPU the cluster's processes use over d, in cores.
func (s *scaleRun) idleCores(ctx context.Context, d time.Duration) (float64, error) {
	before, err := s.cpu()
	if err != nil {
		return 0, err
	}
	began := time.Now()
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(d):
	}
	after, err := s.cpu()
	if err != nil {
		return 0, err
	}
	return (after - before).Seconds() / time.Since(began).Seconds(), nil
}

// hold keeps the cluster idle for o.Idle and says what it did.
func (s *scaleRun) hold(ctx context.Context) (*IdleHold, error) {
	before, err := s.state(ctx)
	if err != nil {
		return nil, err
	}
	notReadyBefore := s.notReadyCount()
	s.mu.Lock()
	s.maxLease = 0
	s.mu.Unlock()
	s.logf("Holding the cluster idle for %s ...", s.o.Idle)
	cpuBefore, err := s.cpu()
	if err != nil {
		return nil, err
	}
	began := time.Now()
	tick := time.NewTicker(s.o.Progress)
	defer tick.Stop()
	for time.Since(began) < s.o.Idle {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
			s.progress(ctx, fmt.Sprintf("idle for %.0fs", time.Since(began).Seconds()))
		case <-time.After(s.o.Idle - time.Since(began)):
		}
	}
	cpuAfter, err := s.cpu()
	if err != nil {
		return nil, err
	}
	after, err := s.state(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	maxLease := s.maxLease
	s.mu.Unlock()
	took := time.Since(began)
	return &IdleHold{For: took, Cores: (cpuAfter - cpuBefore).Seconds() / took.Seconds(),
		LeaseAgeP99: quantile(0.99, before.LeaseAges, after.LeaseAges), MaxLeaseAge: maxLease,
		NotReady: s.notReadyCount() - notReadyBefore}, nil
}

// finish completes a step's row with the cluster's processes, heap,
// leases and the user-facing timings.
func (s *scaleRun) finish(ctx context.Context, row *ScaleRow, step ScaleStep, before *ServedState, notReadyBefore int, timedOut error) (*ScaleRow, error) {
	if timedOut != nil {
		row.TimedOut = timedOut.Error()
		s.logf("Step %s: %v", step, timedOut)
	}
	ps, err := ProcessTree(s.served.PID)
	if err != nil {
		return nil, err
	}
	row.Processes = ps
	row.PSS = totalPSS(ps)
	s.mu.Lock()
	row.PeakPSS, row.MaxLeaseAge = max(s.peakPSS, row.PSS), s.maxLease
	s.peakPSS, s.maxLease = 0, 0
	s.mu.Unlock()
	row.NotReady = s.notReadyCount() - notReadyBefore
	if row.GetPods, err = s.timeGetPods(); err != nil {
		return nil, err
	}
	if row.Charts, err = s.timeCharts(); err != nil {
		return nil, err
	}
	s.logf("Step %s: kubectl get pods -A answered in %.2f s, the console's slowest chart in %.2f s",
		step, row.GetPods.Seconds(), row.Charts.Seconds())
	after, err := s.state(ctx)
	if err != nil {
		return nil, err
	}
	row.HeapLive, row.HeapHeld = after.HeapLive, after.HeapHeld
	row.LeaseAgeP99 = quantile(0.99, before.LeaseAges, after.LeaseAges)
	if path := s.profile(step, "heap"); path != "" {
		if err := s.post(ctx, "/heapprofile", path); err != nil {
			return nil, err
		}
	}
	return row, nil
}

// quantile is the q-quantile of the observations a cumulative histogram
// gained from before to after, interpolated within its bucket as
// Prometheus' histogram_quantile does; 0 with none.
func quantile(q float64, before, after []Bucket) float64 {
	if len(after) == 0 {
		return 0
	}
	counts := make([]float64, len(after))
	for i, b := range after {
		counts[i] = float64(b.Count)
		if i < len(before) {
			counts[i] -= float64(before[i].Count)
		}
	}
	total := counts[len(counts)-1]
	if total <= 0 {
		return 0
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for i, b := range after {
		if counts[i] >= rank {
			if b.UpperBound < 0 {
				// Past the last finite bound: that bound is what is known.
				return lower
			}
			if counts[i] == below {
				return b.UpperBound
			}
			return lower + (b.UpperBound-lower)*(rank-below)/(counts[i]-below)
		}
		lower, below = b.UpperBound, counts[i]
	}
	return lower
}

// timeGetPods runs `capstan kubectl get pods -A` as a user would, in a
// process of its own, and returns how long it took to print every pod.
func (s *scaleRun) timeGetPods() (time.Duration, error) {
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	cmd := exec.Command(self, "kubectl", "--kubeconfig", s.served.Kubeconfig, "get", "pods", "-A")
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
		resp, err := http.Get(s.served.PrometheusURL + "/api/v1/query_range?" + qs.Encode())
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
	return filepath.Join(s.o.ProfileDir, fmt.Sprintf("%s-%s-%d-%dn-%dp.pprof", kind, s.label, s.run, step.Nodes, step.Pods))
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
			s.progress(ctx, fmt.Sprintf("step %s: %s, %.0f pods/s", step, s.reached(step), rate))
		}
	}
	return nil, nil
}

// progress prints a line of progress with the cluster's memory and its
// oldest lease, and keeps the most of each.
func (s *scaleRun) progress(ctx context.Context, line string) {
	line = fmt.Sprintf("[%6.0fs] %s", time.Since(s.start).Seconds(), line)
	if ps, err := ProcessTree(s.served.PID); err == nil {
		pss := totalPSS(ps)
		s.mu.Lock()
		s.peakPSS = max(s.peakPSS, pss)
		s.mu.Unlock()
		line += ", PSS " + GiB(pss)
	}
	if st, err := s.leaseAge(ctx); err == nil {
		s.mu.Lock()
		s.maxLease = max(s.maxLease, st)
		s.mu.Unlock()
		line += fmt.Sprintf(", oldest lease %.1fs", st)
	}
	if n := s.notReadyCount(); n > 0 {
		line += fmt.Sprintf(", %d nodes went NotReady", n)
	}
	s.logf("%s", line)
}

// leaseAge is the age of the oldest lease, read without a collection.
func (s *scaleRun) leaseAge(ctx context.Context) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.served.Control+"/leases", nil)
	if err != nil {
		return 0, err
	}
	resp, err := s.control.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var st ServedState
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return 0, err
	}
	return st.OldestLease, nil
}

func (s *scaleRun) reached(step ScaleStep) string {
	return fmt.Sprintf("%d/%d nodes Ready, %d/%d pods Running", s.ready.Load(), step.Nodes, s.running.Load(), step.Pods)
}

// PrintScale writes the result's tables and each run's processes.
func PrintScale(w io.Writer, res *ScaleResult) {
	fmt.Fprintf(w, "\nbench scale: %s\n\n%s", stepsOf(res), ScaleTable(res))
	for _, r := range res.Rows {
		fmt.Fprintf(w, "\n%s run %d at %s (peak RSS, RSS, PSS at the end, CPU so far):\n", r.Mode, r.Run, r.Step)
		PrintProcesses(w, r.Processes, r.HeapLive, r.HeapHeld)
	}
}

// PrintProcesses writes each process's peak and current resident size,
// its proportional size and CPU, and capstan's Go heap.
func PrintProcesses(w io.Writer, ps []Process, heapLive, heapHeld uint64) {
	for _, p := range ps {
		fmt.Fprintf(w, "  %-32s %9s %9s %9s %8.0fs\n", p.Name, MiB(p.PeakRSS), MiB(p.RSS), MiB(p.PSS), p.CPU.Seconds())
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
	seen := map[ScaleStep]bool{}
	for _, r := range res.Rows {
		if !seen[r.Step] {
			seen[r.Step] = true
			s = append(s, r.Step.String())
		}
	}
	return "steps " + strings.Join(s, ", ")
}

// spread is a figure over runs: its median and range.
type spread struct{ median, lo, hi float64 }

func spreadOf(vs []float64) spread {
	if len(vs) == 0 {
		return spread{}
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return spread{m, s[0], s[len(s)-1]}
}

// format writes a spread with f, its range after it when runs differ.
func (s spread) format(f func(float64) string) string {
	if s.lo == s.hi {
		return f(s.median)
	}
	return fmt.Sprintf("%s (%s–%s)", f(s.median), f(s.lo), f(s.hi))
}

// group is the rows of one mode at one step, a row per run.
type group struct {
	mode string
	step ScaleStep
	rows []ScaleRow
}

func (g group) of(f func(ScaleRow) float64) spread {
	var vs []float64
	for _, r := range g.rows {
		vs = append(vs, f(r))
	}
	return spreadOf(vs)
}

// groups are the rows by step, then mode (floor first).
func groups(res *ScaleResult) []group {
	var out []group
	for _, r := range res.Rows {
		i := slices.IndexFunc(out, func(g group) bool { return g.mode == r.Mode && g.step == r.Step })
		if i < 0 {
			out = append(out, group{mode: r.Mode, step: r.Step})
			i = len(out) - 1
		}
		out[i].rows = append(out[i].rows, r)
	}
	slices.SortStableFunc(out, func(a, b group) int {
		if c := cmp.Compare(a.step.Nodes, b.step.Nodes); c != 0 {
			return c
		}
		if c := cmp.Compare(a.step.Pods, b.step.Pods); c != 0 {
			return c
		}
		return cmp.Compare(modeOrder(a.mode), modeOrder(b.mode))
	})
	return out
}

// modeOrder puts the floor first, then the rest as they came.
func modeOrder(label string) int {
	if label == ModeFloor {
		return 0
	}
	return 1
}

// isFloor says whether a cluster's label names a floor.
func isFloor(label string) bool { return label == ModeFloor || strings.HasPrefix(label, ModeFloor+"@") }

func secs(v float64) string  { return fmt.Sprintf("%.1f s", v) }
func ms(v float64) string    { return fmt.Sprintf("%.1f ms", v) }
func whole(v float64) string { return fmt.Sprintf("%.0f", v) }
func gib(v float64) string   { return fmt.Sprintf("%.2f GiB", v/(1<<30)) }
func kib(v float64) string   { return fmt.Sprintf("%.1f KiB", v/(1<<10)) }
func cores(v float64) string { return fmt.Sprintf("%.2f", v) }

// ScaleTable is the result as Markdown tables: each step's figures per
// mode, the median of the runs with their range, then the full cluster's
// cost as a multiple of the floor's, and the idle hold if there was one.
func ScaleTable(res *ScaleResult) string {
	var b strings.Builder
	b.WriteString("| nodes | pods | cluster | runs | nodes Ready | pods Running | pods/s | CPU per pod, over the idle cost | cores at rest | PSS at the end, all processes | live heap | live heap per pod | lease age p99 | nodes gone NotReady | get pods -A | console charts | outcome |\n")
	b.WriteString("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	gs := groups(res)
	for _, g := range gs {
		done := 0
		var failures []string
		for _, r := range g.rows {
			if r.TimedOut == "" {
				done++
			} else {
				failures = append(failures, r.TimedOut)
			}
		}
		outcome := fmt.Sprintf("%d of %d done", done, len(g.rows))
		if len(failures) > 0 {
			outcome += "; " + strings.Join(failures, "; ")
		}
		fmt.Fprintf(&b, "| %d | %d | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			g.step.Nodes, g.step.Pods, g.mode, len(g.rows),
			g.of(func(r ScaleRow) float64 { return r.NodesReady.Seconds() }).format(secs),
			g.of(func(r ScaleRow) float64 { return r.PodsRunning.Seconds() }).format(secs),
			g.of(func(r ScaleRow) float64 { return r.PodsPerSecond }).format(whole),
			g.of(func(r ScaleRow) float64 { return float64(r.CPUPerPod.Microseconds()) / 1000 }).format(ms),
			g.of(func(r ScaleRow) float64 { return r.IdleCores }).format(cores),
			g.of(func(r ScaleRow) float64 { return float64(r.PSS) }).format(gib),
			g.of(func(r ScaleRow) float64 { return float64(r.HeapLive) }).format(gib),
			g.of(func(r ScaleRow) float64 { return r.HeapPerPod }).format(kib),
			g.of(func(r ScaleRow) float64 { return r.LeaseAgeP99 }).format(secs),
			g.of(func(r ScaleRow) float64 { return float64(r.NotReady) }).format(whole),
			g.of(func(r ScaleRow) float64 { return r.GetPods.Seconds() }).format(secs),
			g.of(func(r ScaleRow) float64 { return r.Charts.Seconds() }).format(secs),
			outcome)
	}
	var ratios []string
	for _, g := range gs {
		i := slices.IndexFunc(gs, func(f group) bool { return f.mode == ModeFloor && f.step == g.step })
		if isFloor(g.mode) || i < 0 {
			continue
		}
		floor := gs[i]
		ratio := func(f func(ScaleRow) float64) string {
			full, base := g.of(f).median, floor.of(f).median
			if base <= 0 {
				return "–"
			}
			return fmt.Sprintf("%.2f", full/base)
		}
		ratios = append(ratios, fmt.Sprintf("| %d | %d | %s | %s | %s | %s |", g.step.Nodes, g.step.Pods, g.mode,
			ratio(func(r ScaleRow) float64 { return float64(r.CPUPerPod) }),
			ratio(func(r ScaleRow) float64 { return r.HeapPerPod }),
			ratio(func(r ScaleRow) float64 { return r.PodsPerSecond })))
	}
	if len(ratios) > 0 {
		b.WriteString("\nThe full cluster against the floor, medians over medians:\n\n")
		b.WriteString("| nodes | pods | cluster | CPU per pod | live heap per pod | pods/s |\n|---:|---:|---|---:|---:|---:|\n")
		b.WriteString(strings.Join(ratios, "\n") + "\n")
	}
	var holds []string
	for _, g := range gs {
		var hs []ScaleRow
		for _, r := range g.rows {
			if r.Hold != nil {
				hs = append(hs, r)
			}
		}
		if len(hs) == 0 {
			continue
		}
		h := group{mode: g.mode, step: g.step, rows: hs}
		holds = append(holds, fmt.Sprintf("| %d | %s | %d | %s | %s | %s | %s | %s |", g.step.Nodes, g.mode, len(hs),
			h.of(func(r ScaleRow) float64 { return r.Hold.For.Seconds() }).format(secs),
			h.of(func(r ScaleRow) float64 { return r.Hold.Cores }).format(cores),
			h.of(func(r ScaleRow) float64 { return r.Hold.LeaseAgeP99 }).format(secs),
			h.of(func(r ScaleRow) float64 { return r.Hold.MaxLeaseAge }).format(secs),
			h.of(func(r ScaleRow) float64 { return float64(r.Hold.NotReady) }).format(whole)))
	}
	if len(holds) > 0 {
		b.WriteString("\nHeld idle after the last step:\n\n")
		b.WriteString("| nodes | cluster | runs | held | cores | lease age p99 | oldest lease seen | nodes gone NotReady |\n|---:|---|---:|---:|---:|---:|---:|---:|\n")
		b.WriteString(strings.Join(holds, "\n") + "\n")
	}
	return b.String()
}

// SettingsLine says what a table was measured with.
func (s ScaleSettings) String() string {
	members := []string{}
	for _, m := range slices.Sorted(maps.Keys(s.EtcdMembers)) {
		members = append(members, fmt.Sprintf("%s %d", m, s.EtcdMembers[m]))
	}
	fsync := "on"
	if !s.Fsync {
		fsync = "off"
	}
	memberLimit := s.MemberGOMEMLIMIT
	if memberLimit == "" {
		memberLimit = "from the environment"
	}
	return fmt.Sprintf("Measured on %s; commit %s, %s; GOGC=%d, GOMEMLIMIT=%s for the cluster's process and %s for each etcd member; etcd members: %s; etcd fsync %s; CAPSTAN_RANDOM_SEED=%s.",
		s.Machine, s.Commit, s.GoVersion, s.GOGC, memlimit.Bytes(s.GOMEMLIMIT), memberLimit, strings.Join(members, ", "), fsync, s.Seed)
}

// Markers bound the part of a document that `bench scale --doc`
// rewrites.
const (
	ScaleDocBegin = "<!-- capstan bench scale: begin -->"
	ScaleDocEnd   = "<!-- capstan bench scale: end -->"
)

// WriteScaleDoc puts the result's tables, with what they were measured
// with, between the markers of the Markdown file doc, and its plot (an SVG
// of memory and pods/s against size) beside it as NAME.svg.
func WriteScaleDoc(doc string, res *ScaleResult) error {
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
	section := fmt.Sprintf("%s\n\n%s\n\n%s\n![Memory and pods/s against the cluster's size, floor and full](%s)\n\n%s",
		ScaleDocBegin, res.Settings, ScaleTable(res), filepath.Base(svg), ScaleDocEnd)
	return os.WriteFile(doc, []byte(text[:begin]+section+text[end+len(ScaleDocEnd):]), 0o644)
}

// ScalePlot draws PSS (GiB, left axis) and pods/s (right axis), the
// medians of each mode's runs, against each step's pods, as an SVG.
func ScalePlot(res *ScaleResult) string {
	const w, h, left, right, top, bottom = 640, 360, 70, 70, 30, 50
	var maxPods, maxGiB, maxRate float64 = 1, 1, 1
	gs := groups(res)
	for _, g := range gs {
		maxPods = max(maxPods, float64(g.step.Pods))
		maxGiB = max(maxGiB, g.of(func(r ScaleRow) float64 { return float64(r.PSS) }).median/(1<<30))
		maxRate = max(maxRate, g.of(func(r ScaleRow) float64 { return r.PodsPerSecond }).median)
	}
	maxGiB, maxRate = niceCeil(maxGiB), niceCeil(maxRate)
	x := func(p float64) float64 { return left + p/maxPods*(w-left-right) }
	y := func(v, top2 float64) float64 { return h - bottom - v/top2*(h-top-bottom) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="14">capstan bench scale: memory (PSS) and pods/s; solid full, dashed floor</text>`+"\n", left)
	fmt.Fprintf(&b, `<path d="M%d %d V%d H%d V%d" fill="none" stroke="black"/>`+"\n", left, top, h-bottom, w-right, top)
	for i := 0; i <= 4; i++ {
		f := float64(i) / 4
		fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle">%.0f</text>`+"\n", x(f*maxPods), h-bottom+16, f*maxPods)
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" text-anchor="end" fill="#1f5fa8">%.1f</text>`+"\n", left-6, y(f*maxGiB, maxGiB)+4, f*maxGiB)
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" fill="#b5531c">%.0f</text>`+"\n", w-right+6, y(f*maxRate, maxRate)+4, f*maxRate)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">pods</text>`+"\n", (left+w-right)/2, h-12)
	fmt.Fprintf(&b, `<text x="16" y="%d" fill="#1f5fa8" transform="rotate(-90 16 %d)" text-anchor="middle">PSS at the step's end, GiB</text>`+"\n", h/2, h/2)
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#b5531c" transform="rotate(90 %d %d)" text-anchor="middle">pods/s</text>`+"\n", w-16, h/2, w-16, h/2)
	series := func(label, color string, v func(ScaleRow) float64, top2 float64) {
		var pts []string
		for _, g := range gs {
			if g.mode == label {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(float64(g.step.Pods)), y(g.of(v).median, top2)))
			}
		}
		if len(pts) == 0 {
			return
		}
		dash := ""
		switch {
		case isFloor(label):
			dash = ` stroke-dasharray="6 4"`
		case label != ModeFull:
			dash = ` stroke-dasharray="2 3"`
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.Join(pts, " "), color, dash)
		for _, p := range pts {
			xy := strings.Split(p, ",")
			fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="4" fill="%s"/>`+"\n", xy[0], xy[1], color)
		}
	}
	var labels []string
	for _, g := range gs {
		if !slices.Contains(labels, g.mode) {
			labels = append(labels, g.mode)
		}
	}
	for _, label := range labels {
		series(label, "#1f5fa8", func(r ScaleRow) float64 { return float64(r.PSS) / (1 << 30) }, maxGiB)
		series(label, "#b5531c", func(r ScaleRow) float64 { return r.PodsPerSecond }, maxRate)
	}
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
