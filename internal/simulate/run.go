package simulate

import (
	"context"
	"errors"
	"fmt"
	"github.com/capstan-dev/capstan/internal/simclock"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	mcfgclient "github.com/openshift/client-go/machineconfiguration/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/cvo"
	"github.com/capstan-dev/capstan/internal/drain"
	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/mco"
	"github.com/capstan-dev/capstan/internal/nodes"
	"github.com/capstan-dev/capstan/internal/sim"
	"github.com/capstan-dev/capstan/internal/updateservice/demo"
	"github.com/capstan-dev/capstan/internal/waitfor"
)

// Defaults of a simulation, in simulated time.
const (
	DefaultSpeed = 10
	// DefaultQuiet outlasts the longest wait of a cluster left alone: the
	// autoscaler's 10 minutes before an unneeded node goes.
	DefaultQuiet = 11 * time.Minute
	DefaultFor   = 2 * time.Hour
	// DefaultBootTime is how long a new instance takes to become a node,
	// as a cloud VM does.
	DefaultBootTime = 3 * time.Minute

	// leaseWrites is how many lease renewals a second the simulation asks
	// of the private API server at most: the kubelets of a large
	// snapshot renew less often than every 10 s, in real time.
	leaseWrites = 200
	// kubeletRenewal is how often a kubelet renews its lease (a quarter
	// of its 40 s lease), in the cluster simulated.
	kubeletRenewal = 10 * time.Second
	// maxSpeed is the fastest any simulation runs: the node lifecycle
	// controller takes at most one node of a zone off its taint queue
	// every 100 ms (real time), so its eviction rate of 0.1 nodes a
	// second keeps its pace up to 100x.
	maxSpeed = 100
)

// MaxSpeed is the fastest a simulation runs (see maxSpeed): the number
// of nodes does not bound it, as the node lifecycle controller's grace
// period stays in real seconds and the simulator declares lost only the
// nodes whose kubelet stopped (sim.Lost).
func MaxSpeed() float64 { return maxSpeed }

// nodeLeases are the private cluster's lease timings for n nodes, in
// real time: a kubelet's renewal interval of 10 s, or longer so that n
// kubelets renew at most leaseWrites leases a second, a lease four
// renewals long, and a node monitor grace period of two leases, which
// only a kubelet whose renewals stop altogether outlasts.
func nodeLeases(n int) (lease, grace time.Duration) {
	renewal := max(kubeletRenewal, time.Duration(float64(n)/leaseWrites*float64(time.Second)))
	return 4 * renewal, 8 * renewal
}

// monitorPassPerNode is the real time a simulation leaves between the node
// lifecycle controller's monitor passes for each node: a pass copies every
// node, and at 5,000 nodes passes 50 ms apart (5 s at 100x) took most of
// a core, with the garbage they leave.
const monitorPassPerNode = 100 * time.Microsecond

// monitorPassFloor is the shortest real time between the node lifecycle
// controller's monitor passes in a simulation.
const monitorPassFloor = 50 * time.Millisecond

// monitorPeriod is the node lifecycle controller's monitor period in a
// simulation of n nodes: short in real time, so that the controller sees
// a lost node the simulated kubelets declared (sim.Lost) and taints it
// soon after the cluster's instant, not up to a whole simulated period
// later (5 s, which a live cluster's controller does not lose: it
// declares and taints in one pass); but no shorter than
// monitorPassPerNode for each node. No pass of the controller declares a
// node lost itself: its grace stays in real seconds.
func monitorPeriod(cluster time.Duration, speed float64, n int) time.Duration {
	return max(min(scaled(cluster, speed), monitorPassFloor), time.Duration(n)*monitorPassPerNode)
}

// RunOptions configure a simulation.
type RunOptions struct {
	Snapshot *Snapshot
	// SnapshotName is the snapshot's file, for the report.
	SnapshotName string
	Changes      []Change
	// Speed is how much faster than real time the cluster runs.
	Speed float64
	// For bounds the simulated time after the first change; Quiet is how
	// long nothing must change for the cluster to count as settled.
	For, Quiet time.Duration
	// BootTime is how long a new instance takes to become a Ready node,
	// simulated (0: as the snapshot's machines took, else
	// DefaultBootTime); RebootTime how long a node is down when it
	// reboots into a new configuration.
	BootTime, RebootTime time.Duration
	// MaxNodeStartupTime is the cluster autoscaler's: how long a
	// registered node that is not Ready counts as starting, simulated (0:
	// upstream's 15 minutes, which OpenShift keeps).
	MaxNodeStartupTime time.Duration
	// DataDir holds the private cluster; empty is a temporary directory,
	// removed at the end.
	DataDir string
	// Scheduler is the default-scheduler to run (Schedulers; "" is
	// SchedulerAuto).
	Scheduler string
	// NoControl skips the control run (the snapshot without the
	// changes), which the report nets the changes' effect of.
	NoControl bool
	// Log receives progress lines.
	Log io.Writer
}

func (o *RunOptions) validate() error {
	var errs []error
	if o.Speed < 1 {
		errs = append(errs, fmt.Errorf("--speed %g: a simulation runs at least at real time (1)", o.Speed))
	}
	if o.For <= 0 || o.Quiet <= 0 || o.BootTime < 0 || o.RebootTime < 0 || o.MaxNodeStartupTime < 0 {
		errs = append(errs, fmt.Errorf("--for (%s) and --quiet (%s) must be positive, --boot-time (%s), --reboot-time (%s) and --max-node-startup-time (%s) not negative",
			o.For, o.Quiet, o.BootTime, o.RebootTime, o.MaxNodeStartupTime))
	}
	if len(o.Changes) == 0 {
		errs = append(errs, errors.New("no --change: say what to simulate"))
	}
	if err := CheckOrder(o.Changes); err != nil {
		errs = append(errs, err)
	}
	if o.Snapshot != nil {
		if err := checkAgainst(o.Snapshot, o.Changes); err != nil {
			errs = append(errs, err)
		}
		if _, err := chooseScheduler(o.Snapshot, o.Changes, o.Scheduler); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// checkAgainst refuses changes the snapshot cannot take: a MachineConfig
// change on a cluster without MachineConfigPools, or a MachineConfig no
// pool selects.
func checkAgainst(s *Snapshot, changes []Change) error {
	pools, err := snapshotPools(s)
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range changes {
		if c.Kind == ChangeUpdate {
			if err := checkUpdate(s, c); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if c.Kind != ChangeMachineConfig {
			continue
		}
		if len(pools) == 0 {
			errs = append(errs, fmt.Errorf("change %s: the snapshot has no MachineConfigPools (a cluster without the Machine Config Operator)", c))
			continue
		}
		added := map[string]*mcfgv1.MachineConfigPool{}
		for _, u := range c.Objects {
			if u.GetKind() == "MachineConfigPool" {
				p, err := typed[mcfgv1.MachineConfigPool](u)
				if err != nil {
					return err
				}
				added[p.Name] = p
			}
		}
		for _, u := range c.Objects {
			if u.GetKind() != "MachineConfig" {
				continue
			}
			if !selectedByAny(append(slices.Collect(maps.Values(added)), pools...), u.GetLabels()) {
				errs = append(errs, fmt.Errorf("change %s: MachineConfig %s (labels %v) is selected by no MachineConfigPool: it would change no node",
					c, u.GetName(), u.GetLabels()))
			}
		}
	}
	return errors.Join(errs...)
}

func selectedByAny(pools []*mcfgv1.MachineConfigPool, l map[string]string) bool {
	for _, p := range pools {
		if sel, err := metav1.LabelSelectorAsSelector(p.Spec.MachineConfigSelector); err == nil && !sel.Empty() && sel.Matches(labels.Set(l)) {
			return true
		}
	}
	return false
}

// clusterOptions are those of the private cluster: no boot nodes (the
// snapshot's are restored), no CVO, MCO or etcd operator, and every
// timing of the node lifecycle divided by the speed.
func clusterOptions(dir string, o *RunOptions) cluster.Options {
	opts := cluster.DefaultOptions()
	opts.ControlPlane.DataDir = dir
	opts.ControlPlane.Port = 0
	opts.ControlPlane.EtcdNoFsync = true
	opts.ControlPlane.RedirectStderr = true
	opts.ControlPlane.DisableAuditLog = true
	opts.ControlPlaneNodes, opts.Workers = 0, 0
	opts.BootFromMachines, opts.EtcdOperator = false, false
	opts.Releases, opts.ResourceMetrics = nil, nil
	// The snapshot's pools roll on the MCO of the simulation (set by
	// Run), if it has any.
	opts.MachineConfig = nil
	cp := &opts.ControlPlane
	s := o.Speed
	// The node lifecycle controller's grace stays in real seconds at any
	// speed, and the simulated kubelets declare a node lost when the
	// controller would have, in simulated time (sim.Lost).
	opts.Sim.Lost = sim.Lost{Grace: scaled(cp.NodeMonitorGracePeriod, s), MonitorPeriod: scaled(cp.NodeMonitorPeriod, s),
		Renewal: scaled(kubeletRenewal, s)}
	n := len(o.Snapshot.Objects["v1/nodes"])
	lease, grace := nodeLeases(n)
	opts.Sim.LeaseDuration = lease
	cp.NodeMonitorPeriod = monitorPeriod(cp.NodeMonitorPeriod, s, n)
	cp.NodeMonitorGracePeriod = max(cp.NodeMonitorGracePeriod, grace)
	cp.NodeStartupGracePeriod = max(cp.NodeStartupGracePeriod, grace)
	cp.NodeEvictionRate *= float32(s)
	cp.SecondaryNodeEvictionRate *= float32(s)
	cp.DefaultNotReadyTolerationSeconds = scaledSeconds(cp.DefaultNotReadyTolerationSeconds, s)
	cp.DefaultUnreachableTolerationSeconds = scaledSeconds(cp.DefaultUnreachableTolerationSeconds, s)
	// The kubelets' unchanged status is posted every 5 real minutes, as
	// their leases are renewed at a real pace: no one declares a node
	// lost from it (a change is posted at once).
	// The autoscaler keeps the cluster's durations (its scan interval,
	// back-off, the ClusterAutoscaler's delays) on a clock that runs them
	// at the speed.
	opts.Autoscaler.Clock = simclock.Scaled{Speed: s}
	opts.Autoscaler.MaxNodeStartupTime = o.MaxNodeStartupTime
	// capstan's scheduler backs a pod off for 1 to 10 seconds after
	// each failure, and retries a parked one every minute, in the
	// cluster's time: at 10x, a real 10 seconds would hold a pod 100
	// simulated seconds after its node came.
	if opts.Scheduler != nil {
		opts.Scheduler.Clock = simclock.Scaled{Speed: s}
	}
	if opts.MachineAPI != nil {
		opts.MachineAPI.Clock = simclock.Scaled{Speed: s}
	}
	if len(o.Changes) > 0 && o.Changes[0].Kind == ChangePolicy {
		opts.Scheduler.Policy = o.Changes[0].Policy
		opts.Autoscaler.Policy = o.Changes[0].Policy
	}
	return opts
}

// Run restores the snapshot on a private cluster, applies the changes in
// order, and reports what the cluster did until it settled or For
// passed.
func Run(ctx context.Context, o RunOptions) (*Report, error) {
	if o.Log == nil {
		o.Log = io.Discard
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if maxS := MaxSpeed(); o.Speed > maxS {
		fmt.Fprintf(o.Log, "Speed lowered from %gx to %gx: the node lifecycle controller taints at most one node of a zone every 100 ms\n",
			o.Speed, maxS)
		o.Speed = maxS
	}
	boot := resolveBootTime(&o)
	report, err := runOnce(ctx, o)
	if err != nil {
		return nil, err
	}
	report.BootTime, report.Boot = Duration(o.BootTime), boot
	if !o.NoControl {
		// The control: the same snapshot, restored the same way, left
		// alone for as long as the changes took to play out.
		co := o
		co.Changes = nil
		// As long as the changes' run watched the cluster: to its last
		// change and the quiet after it, or to --for.
		co.For = o.For
		if report.Settled {
			co.For = min(o.For, time.Duration(report.Duration)+o.Quiet)
		}
		if o.DataDir != "" {
			co.DataDir = o.DataDir + "-control"
		}
		fmt.Fprintf(o.Log, "The control run: the snapshot without the changes, for %s ...\n", Duration(co.For))
		control, err := runOnce(ctx, co)
		if err != nil {
			return nil, fmt.Errorf("the control run: %w", err)
		}
		// The simulated time it watched its cluster: to its last change
		// and the quiet after it, or to its end.
		watched := time.Duration(control.Duration)
		if control.Settled {
			watched = min(watched+o.Quiet, co.For)
		}
		control.Duration = Duration(watched)
		report.compare(control)
	}
	report.Verdict, report.Summary = report.verdict(), report.summary()
	return report, nil
}

// runOnce restores the snapshot on a private cluster, applies o's
// changes (none for a control run) and reports what the cluster did.
func runOnce(ctx context.Context, o RunOptions) (*Report, error) {
	nodeCount := len(o.Snapshot.Objects["v1/nodes"])
	dir, remove := o.DataDir, func() {}
	if dir == "" {
		d, err := os.MkdirTemp("", "capstan-simulate-")
		if err != nil {
			return nil, err
		}
		dir, remove = d, func() { _ = os.RemoveAll(d) }
	}
	defer remove()
	opts := clusterOptions(dir, &o)
	used, err := chooseScheduler(o.Snapshot, o.Changes, o.Scheduler)
	if err != nil {
		return nil, err
	}
	used.use(&opts)
	if opts.KubeScheduler != nil {
		// kube-scheduler's backoff of 1 to 10 seconds, in the cluster's
		// time as near as its whole seconds go (1 s at least: 10 s
		// simulated at 10x).
		opts.KubeScheduler.MaxBackoffSeconds = max(1, int64(math.Round(10/o.Speed)))
	}
	if err := opts.SetLeaseDuration(); err != nil {
		return nil, err
	}
	mcoOpts, err := mcoOptions(o.Snapshot, o.Speed, o.RebootTime)
	if err != nil {
		return nil, err
	}
	opts.MachineConfig = mcoOpts
	var plan *updatePlan
	hold := make(chan struct{})
	var holdOnce sync.Once
	release := func() { holdOnce.Do(func() { close(hold) }) }
	defer release()
	if c, ok := updateOf(o.Changes); ok {
		if plan, err = planUpdate(o.Snapshot, c.Version); err != nil {
			return nil, err
		}
		opts.Releases = releaseOptions(plan, o.Speed, hold)
	}
	fmt.Fprintf(o.Log, "Starting a private cluster in %s, scheduled by %s ...\n", dir, used)
	start := time.Now()
	cl, err := cluster.Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer cl.Stop()
	dyn, err := dynamic.NewForConfig(cl.ControlPlane.AdminConfig())
	if err != nil {
		return nil, err
	}
	r := &restorer{snap: o.Snapshot, kube: cl.Client, dyn: dyn, cloud: cl.Cloud, speed: o.Speed, update: plan}
	if mcoOpts != nil {
		r.osImage = mcoOpts.OSImageURL
		if plan != nil {
			// The MCO renders from the installed release's machine OS.
			cm := demo.OSImageURLConfigMap(mco.Namespace, plan.From)
			r.osImage, r.extensionsImage = cm.Data["baseOSContainerImage"], cm.Data["baseOSExtensionsContainerImage"]
		}
	}
	if opts.MachineConfig != nil {
		if r.mcfg, err = mcfgclient.NewForConfig(cl.RESTConfig()); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(o.Log, "Restoring %d nodes and %d pods of the snapshot at %gx ...\n", nodeCount, len(o.Snapshot.Objects["v1/pods"]), o.Speed)
	if err := r.restore(ctx); err != nil {
		return nil, err
	}
	rec, err := newRecorder(ctx, cl.Client, dyn, o.Speed, true)
	if err != nil {
		return nil, err
	}
	defer rec.stop()
	rec.evictionRate = float64(opts.ControlPlane.NodeEvictionRate) / o.Speed
	if err := r.waitRunning(ctx, rec); err != nil {
		return nil, err
	}
	a := &applier{kube: cl.Client, dyn: dyn, cloud: cl.Cloud, speed: o.Speed, rec: rec, plan: plan}
	if plan != nil {
		// The CVO applies the release the snapshot runs to the restored
		// cluster before anything changes.
		a.timeline = opts.Releases.CVO.Timeline
		release()
		fmt.Fprintf(o.Log, "Restored; the CVO applies %s ...\n", plan.From)
		if err := a.waitInstalled(ctx, plan.From); err != nil {
			return nil, fmt.Errorf("installing the snapshot's release %s: %w", plan.From, err)
		}
		if err := a.holdUpgradeable(ctx); err != nil {
			return nil, err
		}
	}
	// What the controllers still do to the restored cluster is not the
	// changes' doing: the run begins once nothing has changed for a
	// moment.
	if !rec.quietFor(ctx, 2*time.Second, 2*time.Minute) {
		fmt.Fprintln(o.Log, "The restored cluster was still changing after 2 minutes; the run begins anyway")
	}
	// The snapshot's nodes were up already; the instances launched from
	// now on boot as a cloud's do.
	cl.Cloud.SetBootDelay(scaled(o.BootTime, o.Speed))
	fmt.Fprintf(o.Log, "Restored; applying %d changes\n", len(o.Changes))
	calibration := rec.begin(r.restored)
	begun := time.Now()
	report := &Report{Snapshot: o.SnapshotName, TakenAt: o.Snapshot.TakenAt.Time, Speed: o.Speed, Nodes: nodeCount, Pods: r.boundPods,
		RestoreTime: Duration(begun.Sub(start)), Scheduler: used, Calibration: calibration}
	for _, c := range o.Changes {
		at := rec.now()
		err := a.apply(ctx, c)
		if c.Kind != ChangeWait {
			// When it took effect: applying a change takes real time,
			// which at speed is simulated seconds (a zone's kubelets
			// stop when the last one is told to).
			at = rec.now()
		}
		ac := AppliedChange{Change: c.String(), At: Duration(at)}
		if err != nil {
			ac.Error = err.Error()
			fmt.Fprintf(o.Log, "Change %s: %v\n", c, err)
		}
		report.Changes = append(report.Changes, ac)
	}
	report.Settled = rec.waitSettled(ctx, scaled(o.Quiet, o.Speed), scaled(o.For, o.Speed), a.updateBusy, o.Log)
	a.stopDrains()
	report.RunTime = Duration(time.Since(begun))
	if err := rec.fill(ctx, report, a); err != nil {
		return nil, err
	}
	report.Caveats = append(caveats(o.Snapshot), report.Caveats...)
	return report, nil
}

// waitRunning waits until the restored nodes whose kubelets run are
// Ready and as many pods Running as were restored bound to them.
func (r *restorer) waitRunning(ctx context.Context, rec *recorder) error {
	var names []string
	for n := range r.nodesByName {
		names = append(names, n)
	}
	if err := cluster.WaitNodesReady(ctx, r.kube, names, 5*time.Minute); err != nil {
		return fmt.Errorf("waiting for the restored nodes: %w", err)
	}
	return waitfor.Poll(ctx, 200*time.Millisecond, 10*time.Minute, waitfor.Simple(func(context.Context) (bool, string) {
		running := rec.runningPods()
		return running >= r.boundPods, fmt.Sprintf("%d of %d restored pods Running", running, r.boundPods)
	}))
}

// applier applies changes to the private cluster.
type applier struct {
	kube  kubernetes.Interface
	dyn   dynamic.Interface
	cloud *sim.APICloud
	speed float64
	rec   *recorder
	// plan and timeline are an update's: what it is, and the CVO's
	// record of its passes; updating is set once it was asked for.
	plan     *updatePlan
	timeline *cvo.Timeline
	updating atomic.Bool

	drainMu sync.Mutex
	drains  map[string]*drainRun // by node
	cancel  []context.CancelFunc
	wg      sync.WaitGroup
}

type drainRun struct {
	by   string
	done bool
	err  error
}

var (
	machinesGVR    = schema.GroupVersionResource{Group: "machine.openshift.io", Version: "v1beta1", Resource: "machines"}
	machineSetsGVR = schema.GroupVersionResource{Group: "machine.openshift.io", Version: "v1beta1", Resource: "machinesets"}
)

// targets are the nodes a change names: its nodes, each of which must
// exist, or every node of its zone, of which there must be one.
func (a *applier) targets(c Change) ([]*corev1.Node, error) {
	all := a.rec.nodeList()
	if c.Zone != "" {
		var out []*corev1.Node
		for _, n := range all {
			if nodeZone(n) == c.Zone {
				out = append(out, n)
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("no node is in zone %q (zones: %s)", c.Zone, strings.Join(zonesOf(all), ", "))
		}
		return out, nil
	}
	byName := map[string]*corev1.Node{}
	for _, n := range all {
		byName[n.Name] = n
	}
	var out []*corev1.Node
	for _, name := range c.Nodes {
		n := byName[name]
		if n == nil {
			return nil, fmt.Errorf("no node %q in the snapshot", name)
		}
		out = append(out, n)
	}
	return out, nil
}

func zonesOf(ns []*corev1.Node) []string {
	set := map[string]bool{}
	for _, n := range ns {
		if z := nodeZone(n); z != "" {
			set[z] = true
		}
	}
	var out []string
	for z := range set {
		out = append(out, z)
	}
	sort.Strings(out)
	return out
}

func (a *applier) apply(ctx context.Context, c Change) error {
	switch c.Kind {
	case ChangePolicy:
		return nil // the scheduler started with it
	case ChangeWait:
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(scaled(c.Wait, a.speed)):
			return nil
		}
	case ChangeCordon, ChangeDrain:
		targets, err := a.targets(c)
		if err != nil {
			return err
		}
		d := drain.New(ctx, a.kube, 0, klog.Background())
		if err := parallel(ctx, targets, func(_ context.Context, n *corev1.Node) error { return d.Cordon(n, true) }); err != nil {
			return err
		}
		if c.Kind == ChangeDrain {
			for _, n := range targets {
				a.startDrain(ctx, n.Name, c.String())
			}
		}
		return nil
	case ChangeDelete:
		targets, err := a.targets(c)
		if err != nil {
			return err
		}
		return parallel(ctx, targets, a.deleteNode)
	case ChangeZoneOutage:
		targets, err := a.targets(c)
		if err != nil {
			return err
		}
		zone := c.Zone
		a.cloud.InjectFailure(sim.FailureRule{
			Match: func(s sim.InstanceSpec) bool { return s.Zone == zone },
			Err: &sim.InstanceError{Reason: sim.ReasonInsufficientCapacity,
				Message: fmt.Sprintf("zone %s is out of service (simulated outage)", zone)},
		})
		// A zone goes at once: its kubelets stop together, not one
		// request after another.
		return parallel(ctx, targets, func(ctx context.Context, n *corev1.Node) error {
			return a.annotate(ctx, n.Name, sim.StoppedAnnotation, "true")
		})
	case ChangeScale:
		ns, name, _ := strings.Cut(c.MachineSet, "/")
		patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, c.Replicas)
		_, err := a.dyn.Resource(machineSetsGVR).Namespace(ns).Patch(ctx, name, "application/merge-patch+json", patch, metav1.PatchOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("no MachineSet %s in the snapshot", c.MachineSet)
		}
		return err
	case ChangeUpdate:
		return a.update(ctx, c)
	case ChangeApply, ChangeMachineConfig:
		for _, obj := range c.Objects {
			if err := a.applyObject(ctx, obj.DeepCopy()); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("unknown change %s", c)
}

func (a *applier) annotate(ctx context.Context, node, key, value string) error {
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, key, value)
	_, err := a.kube.CoreV1().Nodes().Patch(ctx, node, "application/merge-patch+json", patch, metav1.PatchOptions{})
	return err
}

// deleteNode deletes a node's Machine, as `oc delete machine` does (the
// Machine API drains the node and terminates its instance); a node
// without a Machine is deleted with its instance.
func (a *applier) deleteNode(ctx context.Context, n *corev1.Node) error {
	if ref := n.Annotations[machine.MachineAnnotation]; ref != "" {
		ns, name, _ := strings.Cut(ref, "/")
		err := a.dyn.Resource(machinesGVR).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{})
		if err == nil || !apierrors.IsNotFound(err) {
			return err
		}
	}
	if err := a.cloud.DeleteInstance(ctx, n.Name); err != nil && !errors.Is(err, sim.ErrInstanceNotFound) {
		return fmt.Errorf("terminating the instance of node %s: %w", n.Name, err)
	}
	err := a.kube.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// applyObject creates the object, or replaces the one of that name.
func (a *applier) applyObject(ctx context.Context, u *unstructured.Unstructured) error {
	if err := prepareApply(u, a.speed); err != nil {
		return err
	}
	var res Resource
	for _, r := range Resources {
		if r.Kind == u.GetKind() && r.GVR.GroupVersion().String() == u.GetAPIVersion() {
			res = r
		}
	}
	ri := dynamic.ResourceInterface(a.dyn.Resource(res.GVR))
	if res.Namespaced {
		if u.GetNamespace() == "" {
			u.SetNamespace("default")
		}
		ri = a.dyn.Resource(res.GVR).Namespace(u.GetNamespace())
	}
	_, err := ri.Create(ctx, u, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		old, gerr := ri.Get(ctx, u.GetName(), metav1.GetOptions{})
		if gerr != nil {
			return gerr
		}
		u.SetResourceVersion(old.GetResourceVersion())
		_, err = ri.Update(ctx, u, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", u.GetKind(), objectKey(u), err)
	}
	return nil
}

// startDrain evicts a cordoned node's pods in the background, retrying
// evictions a disruption budget refuses, until the simulation ends.
func (a *applier) startDrain(ctx context.Context, node, by string) {
	ctx, cancel := context.WithCancel(ctx)
	run := &drainRun{by: by}
	a.drainMu.Lock()
	if a.drains == nil {
		a.drains = map[string]*drainRun{}
	}
	a.drains[node] = run
	a.cancel = append(a.cancel, cancel)
	a.drainMu.Unlock()
	d := drain.New(ctx, a.kube, 0, klog.Background())
	a.wg.Go(func() {
		err := d.Evict(node)
		if err != nil && d.LastError() != "" {
			err = errors.New(d.LastError())
		}
		a.drainMu.Lock()
		run.done, run.err = err == nil, err
		a.drainMu.Unlock()
	})
}

func (a *applier) stopDrains() {
	a.drainMu.Lock()
	for _, c := range a.cancel {
		c()
	}
	a.drainMu.Unlock()
	a.wg.Wait()
}

// blockedDrains are the drain changes not finished, and the Machines
// being deleted whose drain the Machine API reports blocked.
func (a *applier) blockedDrains(pods []*corev1.Pod, machines []machinev1.Machine, events map[string]string) []BlockedDrain {
	left := map[string][]string{}
	for _, p := range pods {
		if p.Spec.NodeName != "" && !isDaemonSetPod(p) && p.DeletionTimestamp == nil {
			left[p.Spec.NodeName] = append(left[p.Spec.NodeName], objectKey(p))
		}
	}
	var out []BlockedDrain
	a.drainMu.Lock()
	for node, run := range a.drains {
		if run.done || len(left[node]) == 0 {
			continue
		}
		msg := "not finished"
		if run.err != nil {
			msg = run.err.Error()
		}
		out = append(out, BlockedDrain{Node: node, By: run.by, Pods: left[node], Message: msg})
	}
	a.drainMu.Unlock()
	for _, m := range machines {
		if m.DeletionTimestamp == nil {
			continue
		}
		node := m.Name
		if m.Status.NodeRef != nil {
			node = m.Status.NodeRef.Name
		}
		msg := events[m.Namespace+"/"+m.Name]
		if msg == "" {
			for _, h := range m.Spec.LifecycleHooks.PreDrain {
				msg = fmt.Sprintf("preDrain hook %s of %s is still there", h.Name, h.Owner)
			}
		}
		if msg == "" {
			for _, h := range m.Spec.LifecycleHooks.PreTerminate {
				msg = fmt.Sprintf("preTerminate hook %s of %s is still there", h.Name, h.Owner)
			}
		}
		if msg == "" && len(left[node]) == 0 {
			continue
		}
		out = append(out, BlockedDrain{Node: node, By: "Machine " + m.Namespace + "/" + m.Name + " deleted", Pods: left[node], Message: msg})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

func isDaemonSetPod(p *corev1.Pod) bool {
	ref := metav1.GetControllerOf(p)
	return ref != nil && ref.Kind == "DaemonSet"
}

// nodeReady is whether the node is Ready now.
func nodeReady(n *corev1.Node) bool { return nodes.Ready(n) }
