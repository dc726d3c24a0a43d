package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/capstan-dev/capstan/internal/simulate"
)

// SimulateOptions size the zone-outage simulation benchmark.
type SimulateOptions struct {
	// Nodes are the workers, spread over three zones; each zone has a
	// master too.
	Nodes int
	// PodsPerNode one-CPU pods run on each four-CPU worker.
	PodsPerNode int
	// PodsPerDeployment splits the pods into Deployments of that many (0:
	// one Deployment).
	PodsPerDeployment int
	Speed             float64
	// Quiet is the simulated time without change that ends the run; For
	// the simulated time after which it ends anyway.
	Quiet, For time.Duration
	DataDir    string
}

// SimulateResult is what the benchmark measured.
type SimulateResult struct {
	Report *simulate.Report
	// Wall is the whole run: start, restore, outage, settling.
	Wall time.Duration
	// CPUSeconds is the CPU of this process and of the children it
	// waited for (etcd) over the run.
	CPUSeconds float64
}

// Simulate simulates the loss of one zone of three of a synthetic AWS
// cluster of o.Nodes workers, with the autoscaler on, and times it.
func Simulate(ctx context.Context, o SimulateOptions, log io.Writer) (*SimulateResult, error) {
	if o.Nodes < 3 || o.PodsPerNode < 0 || o.PodsPerNode > 4 {
		return nil, fmt.Errorf("--nodes must be at least 3 (one per zone) and --pods-per-node 0 to 4 (one-CPU pods on four-CPU workers); got %d and %d", o.Nodes, o.PodsPerNode)
	}
	if o.PodsPerDeployment < 0 {
		return nil, fmt.Errorf("--pods-per-deployment %d: must be 0 (one Deployment) or more", o.PodsPerDeployment)
	}
	zones := []string{"us-east-1a", "us-east-1b", "us-east-1c"}
	cl := simulate.AWSCluster{Zones: zones, WorkersPerZone: o.Nodes / len(zones),
		PodsPerWorker: []int{o.PodsPerNode, o.PodsPerNode, o.PodsPerNode}, Created: time.Now().Add(-30 * 24 * time.Hour),
		PodsPerDeployment: o.PodsPerDeployment}
	objs, err := cl.Objects()
	if err != nil {
		return nil, err
	}
	snap, _, err := simulate.SnapshotOf(objs, time.Now(), "the benchmark's cluster")
	if err != nil {
		return nil, err
	}
	autoscaling := simulate.Change{Kind: simulate.ChangeApply, Arg: "autoscaling"}
	for _, m := range cl.Autoscaling(1, 2*cl.WorkersPerZone) {
		autoscaling.Objects = append(autoscaling.Objects, &unstructured.Unstructured{Object: m})
	}
	outage, err := simulate.ParseChange("zone-outage=" + zones[0])
	if err != nil {
		return nil, err
	}
	cpu0 := selfCPUSeconds() + childrenCPUSeconds()
	start := time.Now()
	rep, err := simulate.Run(ctx, simulate.RunOptions{Snapshot: snap, SnapshotName: "synthetic", Changes: []simulate.Change{autoscaling, outage},
		Speed: o.Speed, For: o.For, Quiet: o.Quiet, BootTime: simulate.DefaultBootTime, DataDir: o.DataDir, Log: log,
		// The benchmark times the outage's course, not a control run.
		NoControl: true})
	if err != nil {
		return nil, err
	}
	return &SimulateResult{Report: rep, Wall: time.Since(start), CPUSeconds: selfCPUSeconds() + childrenCPUSeconds() - cpu0}, nil
}

// childrenCPUSeconds is the CPU of the children this process has waited
// for.
func childrenCPUSeconds() float64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_CHILDREN, &ru); err != nil {
		return 0
	}
	return tvSeconds(ru.Utime) + tvSeconds(ru.Stime)
}
