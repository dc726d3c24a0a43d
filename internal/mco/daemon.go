package mco

import (
	"context"
	"errors"
	"fmt"
	"github.com/capstan-dev/capstan/internal/simclock"
	"k8s.io/utils/clock"
	"sort"
	"strings"
	"sync"
	"time"

	opv1 "github.com/openshift/api/operator/v1"
	mcfglisters "github.com/openshift/client-go/machineconfiguration/listers/machineconfiguration/v1"
	operatorclient "github.com/openshift/client-go/operator/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/capstan-dev/capstan/internal/compat"
	"github.com/capstan-dev/capstan/internal/drain"
	"github.com/capstan-dev/capstan/internal/failpoint"
	"github.com/capstan-dev/capstan/internal/planted"
	"github.com/capstan-dev/capstan/internal/sim"
)

// FailAnnotation on a node makes its simulated daemon fail the update
// with the annotation's value as the reason (state Degraded) until it is
// removed.
const FailAnnotation = "sim.capstan.dev/mcd-fail"

// FailAtAnnotation on a node makes its simulated daemon fail a step of
// the update, again at every retry, until it is removed: the node is
// Degraded meanwhile, and the failure counted in the daemon's metrics
// (mcc_drain_err, mcd_pivot_errors_total, mcd_reboots_failed_total).
// Removed, the update goes on from that step.
const FailAtAnnotation = "sim.capstan.dev/mcd-fail-at"

// The steps FailAtAnnotation names.
const (
	FailAtDrain  = "drain"
	FailAtPivot  = "pivot"
	FailAtReboot = "reboot"
)

// FailAtSteps are the values FailAtAnnotation takes.
var FailAtSteps = []string{FailAtDrain, FailAtPivot, FailAtReboot}

// DaemonOptions time the simulated machine-config-daemon.
type DaemonOptions struct {
	// DrainTimeout bounds one drain attempt; DrainRetry is the wait
	// before the next.
	DrainTimeout, DrainRetry time.Duration
	// ApplyDuration is how long writing the configuration takes.
	ApplyDuration time.Duration
	// RebootDuration is how long the node is down in its reboot.
	RebootDuration time.Duration
	// Clock runs the durations above: nil is the real clock, a
	// simulation's runs them at its speed (simclock.Scaled).
	Clock clock.PassiveClock
}

// DefaultDaemonOptions are seconds where the real daemon takes minutes.
func DefaultDaemonOptions() DaemonOptions {
	return DaemonOptions{DrainTimeout: 90 * time.Second, DrainRetry: 10 * time.Second, ApplyDuration: time.Second, RebootDuration: 5 * time.Second}
}

// daemon runs the simulated machine-config-daemon of every node: one
// update at a time per node.
type daemon struct {
	ctx      context.Context
	kube     kubernetes.Interface
	nodes    corelisters.NodeLister
	opts     DaemonOptions
	recorder record.EventRecorder

	metrics *daemonMetrics
	// configs are the rendered configurations an update goes between;
	// operator reads the node disruption policy (nil: the defaults).
	configs  mcfglisters.MachineConfigLister
	operator operatorclient.Interface
	// unhonoured reports the MachineConfiguration's fields capstan does
	// not act on.
	unhonoured compat.Reporter

	mu      sync.Mutex
	running map[string]bool
	wg      sync.WaitGroup
}

func newDaemon(ctx context.Context, kube kubernetes.Interface, nodes corelisters.NodeLister, opts DaemonOptions, recorder record.EventRecorder, metrics *daemonMetrics) *daemon {
	def := DefaultDaemonOptions()
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = def.DrainTimeout
	}
	if opts.DrainRetry <= 0 {
		opts.DrainRetry = def.DrainRetry
	}
	if opts.RebootDuration <= 0 {
		opts.RebootDuration = def.RebootDuration
	}
	for _, d := range []*time.Duration{&opts.DrainTimeout, &opts.DrainRetry, &opts.ApplyDuration, &opts.RebootDuration} {
		*d = simclock.Real(opts.Clock, *d)
	}
	if metrics == nil {
		metrics = newDaemonMetrics()
	}
	return &daemon{ctx: ctx, kube: kube, nodes: nodes, opts: opts, recorder: recorder, metrics: metrics, running: map[string]bool{}}
}

// needsUpdate: the node is told to run another configuration, and is not
// held by an injected failure.
func needsUpdate(n *corev1.Node) bool {
	a := n.Annotations
	if a[DesiredConfigAnnotation] == "" || a[CurrentConfigAnnotation] == "" {
		return false
	}
	if nodeDegraded(n) && a[FailAnnotation] != "" {
		return false
	}
	return a[DesiredConfigAnnotation] != a[CurrentConfigAnnotation] || a[StateAnnotation] != StateDone
}

// observe starts the node's daemon when it has something to do.
func (d *daemon) observe(n *corev1.Node) {
	if !needsUpdate(n) {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.running[n.Name] || d.ctx.Err() != nil {
		return
	}
	d.running[n.Name] = true
	d.wg.Add(1)
	go d.loop(n.Name)
}

func (d *daemon) wait() { d.wg.Wait() }

func (d *daemon) loop(name string) {
	defer d.wg.Done()
	log := klog.FromContext(d.ctx).WithValues("node", name)
	for d.ctx.Err() == nil {
		n, err := d.kube.CoreV1().Nodes().Get(d.ctx, name, metav1.GetOptions{})
		if err != nil || !needsUpdate(n) {
			break
		}
		if err := d.update(n); err != nil && d.ctx.Err() == nil {
			log.Info("Updating the node's configuration failed", "err", err)
			break
		}
	}
	d.mu.Lock()
	delete(d.running, name)
	d.mu.Unlock()
	// Something may have changed while it finished.
	if n, err := d.nodes.Get(name); err == nil {
		d.observe(n)
	}
}

// update takes a node to its desired configuration, as the daemon does:
// Working, cordon and drain, write, reboot, Done, uncordon.
func (d *daemon) update(n *corev1.Node) error {
	ctx, name := d.ctx, n.Name
	want, from := n.Annotations[DesiredConfigAnnotation], n.Annotations[CurrentConfigAnnotation]
	log := klog.FromContext(ctx).WithValues("node", name)
	rebooting := n.Annotations[PostConfigActionAnnotation] == "Rebooting"
	drained := true
	if !rebooting {
		if err := d.annotate(ctx, name, map[string]any{StateAnnotation: StateWorking, ReasonAnnotation: nil}); err != nil {
			return err
		}
		if reason := n.Annotations[FailAnnotation]; reason != "" {
			return d.annotate(ctx, name, map[string]any{StateAnnotation: StateDegraded, ReasonAnnotation: reason})
		}
		actions, diff, err := d.plan(ctx, from, want)
		if err != nil {
			return err
		}
		reboot := actions[0].Type == opv1.RebootStatusAction
		drained = reboot || DrainRequired(actions, diff)
		log.Info("Starting update", "from", from, "to", want, "actions", actionNames(actions), "drain", drained)
		if drained {
			if err := d.annotate(ctx, name, map[string]any{DesiredDrainAnnotation: "drain-" + want}); err != nil {
				return err
			}
			if err := d.drain(ctx, n); err != nil {
				return err
			}
			if err := d.annotate(ctx, name, map[string]any{LastAppliedDrainAnnotation: "drain-" + want, ReasonAnnotation: nil}); err != nil {
				return err
			}
		}
		failpoint.Hit(failpoint.MCDMidApply)
		if err := sleep(ctx, d.opts.ApplyDuration); err != nil {
			return err
		}
		if err := d.failAt(ctx, name, FailAtPivot); err != nil {
			return err
		}
		if !reboot {
			d.postConfigActions(n, actions, want)
		} else {
			if err := d.failAt(ctx, name, FailAtReboot); err != nil {
				return err
			}
			log.Info("Initiating reboot: Node will reboot into config " + want)
			// The post-config action and the machine going down are one
			// write: a daemon killed on either side of it neither skips the
			// reboot nor reboots the node twice.
			if planted.On(planted.RebootInTwoWrites) {
				// The planted window bug: the post-config action first,
				// the machine going down in a write of its own.
				if err := d.annotate(ctx, name, map[string]any{PostConfigActionAnnotation: "Rebooting"}); err != nil {
					return err
				}
				failpoint.Hit(failpoint.MCDMidReboot)
			}
			if err := d.annotate(ctx, name, map[string]any{PostConfigActionAnnotation: "Rebooting", sim.RebootingAnnotation: "true"}); err != nil {
				return err
			}
			d.recorder.Eventf(&corev1.ObjectReference{Kind: "Node", Name: name, UID: n.UID}, corev1.EventTypeNormal, "Reboot", "Node will reboot into config %s", want)
			rebooting = true
		}
	} else {
		// A daemon that was stopped in the reboot picks it up where the
		// node is: still down, or already up in its next boot.
		rebooting = sim.Rebooting(n)
	}
	if rebooting {
		// The machine is down (its kubelet NotReady) for a moment, then
		// boots again and restarts the pods left on the node.
		failpoint.Hit(failpoint.MCDMidReboot)
		if err := sleep(ctx, d.opts.RebootDuration); err != nil {
			return err
		}
		if err := sim.FinishReboot(ctx, d.kube, name); err != nil {
			return err
		}
		failpoint.Hit(failpoint.MCDRebooted)
	}
	if err := d.waitReady(ctx, name); err != nil {
		return err
	}
	if !drained {
		log.Info("Update completed for config " + want + " without a reboot or a drain")
		d.metrics.updated(name)
		return d.annotate(ctx, name, map[string]any{CurrentConfigAnnotation: want, StateAnnotation: StateDone, ReasonAnnotation: nil, PostConfigActionAnnotation: nil})
	}
	// Back up: uncordon first, then say Done, as the daemon completes an
	// update (a node is not done while it is cordoned).
	if err := d.annotate(ctx, name, map[string]any{DesiredDrainAnnotation: "uncordon-" + want}); err != nil {
		return err
	}
	node, err := d.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if err := drain.New(ctx, d.kube, d.opts.DrainTimeout, log).Cordon(node, false); err != nil {
		return err
	}
	if err := d.annotate(ctx, name, map[string]any{LastAppliedDrainAnnotation: "uncordon-" + want}); err != nil {
		return err
	}
	log.Info("Update completed for config " + want + " and node has been successfully uncordoned")
	d.metrics.updated(name)
	return d.annotate(ctx, name, map[string]any{CurrentConfigAnnotation: want, StateAnnotation: StateDone, ReasonAnnotation: nil, PostConfigActionAnnotation: nil})
}

// plan works out what taking the node from one rendered configuration to
// another needs: the node disruption policy's actions for what changed,
// a reboot when either configuration cannot be read.
func (d *daemon) plan(ctx context.Context, from, want string) ([]opv1.NodeDisruptionPolicyStatusAction, *ConfigDiff, error) {
	reboot := []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.RebootStatusAction}}
	if d.configs == nil {
		return reboot, &ConfigDiff{}, nil
	}
	old, err1 := d.configs.Get(from)
	next, err2 := d.configs.Get(want)
	if err1 != nil || err2 != nil {
		return reboot, &ConfigDiff{}, nil
	}
	diff, err := DiffConfigs(old, next)
	if err != nil {
		return reboot, &ConfigDiff{}, nil
	}
	policies, err := d.disruptionPolicies(ctx)
	if err != nil {
		return nil, nil, err
	}
	return DisruptionActions(diff, policies), diff, nil
}

// postConfigActions runs the actions of an update that needs no reboot,
// with the daemon's events.
func (d *daemon) postConfigActions(n *corev1.Node, actions []opv1.NodeDisruptionPolicyStatusAction, want string) {
	ref := &corev1.ObjectReference{Kind: "Node", Name: n.Name, UID: n.UID}
	for _, a := range actions {
		switch a.Type {
		case opv1.NoneStatusAction:
			d.recorder.Event(ref, corev1.EventTypeNormal, "SkipReboot", "Config changes do not require reboot.")
		case opv1.ReloadStatusAction:
			d.recorder.Eventf(ref, corev1.EventTypeNormal, "ServiceReload", "Config changes do not require reboot. Service %s was reloaded.", a.Reload.ServiceName)
		case opv1.SpecialStatusAction:
			d.recorder.Event(ref, corev1.EventTypeNormal, "ServiceReload", "Config changes do not require reboot. Service crio.service was reloaded.")
		case opv1.DaemonReloadStatusAction:
			d.recorder.Event(ref, corev1.EventTypeNormal, "ServiceReload", "Config changes do not require reboot. Service daemon-reload was reloaded.")
		case opv1.RestartStatusAction:
			d.recorder.Eventf(ref, corev1.EventTypeNormal, "ServiceRestart", "Config changes do not require reboot. Service %s was restarted.", a.Restart.ServiceName)
		}
	}
	klog.FromContext(d.ctx).Info("Node has Desired Config "+want+", skipping reboot", "node", n.Name)
}

func actionNames(actions []opv1.NodeDisruptionPolicyStatusAction) []string {
	out := make([]string, len(actions))
	for i, a := range actions {
		out[i] = string(a.Type)
		switch {
		case a.Reload != nil:
			out[i] += " " + string(a.Reload.ServiceName)
		case a.Restart != nil:
			out[i] += " " + string(a.Restart.ServiceName)
		}
	}
	return out
}

// drain cordons the node and evicts its pods, retrying until it is done;
// while a budget holds it back, the node's reason says which pod and
// which budget.
func (d *daemon) drain(ctx context.Context, n *corev1.Node) error {
	log := klog.FromContext(ctx).WithValues("node", n.Name)
	dr := drain.New(ctx, d.kube, d.opts.DrainTimeout, log)
	if err := dr.Cordon(n, true); err != nil {
		return err
	}
	for {
		err := d.injected(ctx, n.Name, FailAtDrain)
		if err == nil {
			err = dr.Evict(n.Name)
		}
		if err == nil {
			d.metrics.drained(n.Name)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		d.metrics.drainFailed(n.Name)
		reason := "failed to drain node: " + n.Name + ": " + err.Error()
		if b := d.blockers(ctx, n.Name); b != "" {
			reason = "drain is blocked: " + b
		}
		if err := d.annotate(ctx, n.Name, map[string]any{ReasonAnnotation: reason}); err != nil {
			return err
		}
		if err := sleep(ctx, d.opts.DrainRetry); err != nil {
			return err
		}
	}
}

// injected is the error FailAtAnnotation injects at step, if it does.
func (d *daemon) injected(ctx context.Context, node, step string) error {
	n, err := d.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if n.Annotations[FailAtAnnotation] != step {
		return nil
	}
	switch step {
	case FailAtDrain:
		return errors.New("error when evicting pods: injected by " + FailAtAnnotation)
	case FailAtPivot:
		return errors.New("failed to update OS to the configuration's image: injected by " + FailAtAnnotation)
	}
	return errors.New("reboot command failed, something is seriously wrong: injected by " + FailAtAnnotation)
}

// failAt holds the update at step while FailAtAnnotation names it: the
// node Degraded with the failure as its reason, counted, tried again
// every DrainRetry. Cleared, the node is Working again.
func (d *daemon) failAt(ctx context.Context, node, step string) error {
	failed := false
	for {
		err := d.injected(ctx, node, step)
		if err == nil {
			if failed {
				return d.annotate(ctx, node, map[string]any{StateAnnotation: StateWorking, ReasonAnnotation: nil})
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		failed = true
		d.metrics.stepFailed(node, step)
		if err := d.annotate(ctx, node, map[string]any{StateAnnotation: StateDegraded, ReasonAnnotation: err.Error()}); err != nil {
			return err
		}
		if err := sleep(ctx, d.opts.DrainRetry); err != nil {
			return err
		}
	}
}

// blockers names the pods left on a node that a PodDisruptionBudget
// keeps there.
func (d *daemon) blockers(ctx context.Context, node string) string {
	pods, err := d.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return ""
	}
	pdbs, err := d.kube.PolicyV1().PodDisruptionBudgets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return ""
	}
	var out []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, b := range pdbs.Items {
			if !drain.BudgetCovers(&b, &p) || b.Status.DisruptionsAllowed > 0 {
				continue
			}
			out = append(out, fmt.Sprintf("pod %s/%s cannot be evicted: PodDisruptionBudget %s allows %d disruptions (%d healthy, %d desired)",
				p.Namespace, p.Name, b.Name, b.Status.DisruptionsAllowed, b.Status.CurrentHealthy, b.Status.DesiredHealthy))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

func (d *daemon) waitReady(ctx context.Context, name string) error {
	for {
		n, err := d.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		if err == nil {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					return nil
				}
			}
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

func (d *daemon) annotate(ctx context.Context, node string, ann map[string]any) error {
	return patchNodeAnnotations(ctx, d.kube, node, ann)
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
