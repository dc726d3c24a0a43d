package simulate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// RecordOptions are those of Record.
type RecordOptions struct {
	Kube kubernetes.Interface
	Dyn  dynamic.Interface
	// Host names the cluster, for the report.
	Host string
	// For bounds the recording; Quiet is how long nothing must change
	// for the cluster to count as settled (real time both).
	For, Quiet time.Duration
	// Begun, when set, is called once the recording has begun, and makes
	// the change, named Change: the report's times count from its return.
	// Without it, the change is whoever's, and times count from the
	// beginning.
	Begun  func()
	Change string
	// Log receives progress lines.
	Log io.Writer
}

// Record watches a live cluster from now until it settles or For passes,
// and reports what it did as a simulation's run reports it, in real
// time: pods removed and placed, pods pending with their reasons, nodes
// lost, added and removed, the autoscaler's events, workloads'
// availability, blocked drains and rollouts. The changes are whoever's
// makes them once it has begun; it changes nothing itself. Set beside
// a simulation of the same change (Compare), it says how far the
// prediction was from what happened.
func Record(ctx context.Context, o RecordOptions) (*Report, error) {
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.For <= 0 || o.Quiet <= 0 {
		return nil, fmt.Errorf("--for (%s) and --quiet (%s) must be positive", o.For, o.Quiet)
	}
	if o.Kube == nil || o.Dyn == nil {
		return nil, errors.New("no cluster to record")
	}
	// A plain Kubernetes cluster serves no Machine API: no Machine to
	// watch then.
	_, err := o.Kube.Discovery().ServerResourcesForGroupVersion(machinesGVR.GroupVersion().String())
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("discovering %s: %w", machinesGVR.GroupVersion(), err)
	}
	machinesServed := err == nil
	// An identity without list and watch would wait for ever: a minute
	// to sync, then the error names what did not.
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	rec, err := newRecorder(syncCtx, o.Kube, o.Dyn, 1, machinesServed)
	if err != nil {
		return nil, fmt.Errorf("recording %s: %w", o.Host, err)
	}
	defer rec.stop()
	rec.begin(nil)
	report := &Report{Snapshot: o.Host, TakenAt: time.Now().UTC().Truncate(time.Second), Speed: 1, Recorded: true}
	nodes, pods := rec.nodeList(), rec.runningPods()
	report.Nodes, report.Pods = len(nodes), pods
	fmt.Fprintf(o.Log, "Recording %s (%d nodes, %d pods running) until nothing changes for %s, for %s at most\n",
		o.Host, len(nodes), pods, Duration(o.Quiet), Duration(o.For))
	if o.Begun == nil {
		fmt.Fprintln(o.Log, "Make the change now: the report's times count from here")
	}
	if o.Begun != nil {
		o.Begun()
		report.Changes = append(report.Changes, AppliedChange{Change: o.Change, At: Duration(rec.now())})
	}
	a := &applier{kube: o.Kube, dyn: o.Dyn, speed: 1, rec: rec}
	report.Settled = rec.waitSettled(ctx, o.Quiet, o.For, func() bool { return false }, o.Log)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	report.RunTime = Duration(time.Since(rec.started))
	if err := rec.fill(ctx, report, a); err != nil {
		return nil, err
	}
	report.Verdict, report.Summary = report.verdict(), report.summary()
	return report, nil
}
