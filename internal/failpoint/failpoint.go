// Package failpoint lets a fault campaign (`capstan chaos`) kill capstan
// at a named point of its code: between a decision and its write, in the
// middle of a drain, a reboot or the apply of a release. A point is armed
// for one process through the environment, CAPSTAN_FAILPOINT=NAME:N, and
// the N-th time the process reaches it, it sends itself SIGKILL: exactly
// what a crash, an OOM kill or a power cut at that instant would do, with
// no deferred function, no flush and no shutdown run.
//
// Unarmed, Hit costs one atomic load.
package failpoint

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// Env arms a point: NAME:N kills the process the N-th time it reaches
// NAME (NAME alone: the first time).
const Env = "CAPSTAN_FAILPOINT"

// Marker starts the line a process prints on stdout just before it kills
// itself at a point, so that whoever runs it can tell the kill from a
// crash.
const Marker = "capstan: failpoint "

// Point is a place in capstan's code where a campaign may kill it.
type Point struct {
	Name string
	// What the process was doing when it is killed there.
	Doc string
}

// The points, by component.
const (
	AutoscalerScaleUp       = "autoscaler/scale-up-decided"
	AutoscalerScaleDown     = "autoscaler/scale-down-decided"
	MachineSetCreate        = "machineset/create-decided"
	MachineInstanceLaunched = "machine/instance-launched"
	DrainStarted            = "drain/mid-drain"
	MCOTargetDecided        = "mco/target-decided"
	MCDMidApply             = "mcd/mid-apply"
	MCDMidReboot            = "mcd/mid-reboot"
	CVOMidApply             = "cvo/mid-apply"
	CVOApplied              = "cvo/applied-not-recorded"
	EtcdAddWritten          = "etcd/add-written"
	EtcdRemovalWritten      = "etcd/removal-written"
)

// Points are every point, documented.
var Points = []Point{
	{AutoscalerScaleUp, "the autoscaler decided a scale-up and has not written the new replicas"},
	{AutoscalerScaleDown, "the autoscaler tainted and marked a node to remove and has not lowered the replicas"},
	{MachineSetCreate, "a MachineSet decided to create a machine and has not created it"},
	{MachineInstanceLaunched, "a machine's instance was launched and the machine does not say so yet"},
	{DrainStarted, "a node is cordoned and its drain has begun: some pods evicted, others not"},
	{MCOTargetDecided, "the MCO's node controller chose the nodes to update and has not targeted them"},
	{MCDMidApply, "a node's daemon is writing the new configuration (state Working, drained)"},
	{MCDMidReboot, "a node is rebooting into its new configuration"},
	{CVOMidApply, "the CVO has applied some of a release's manifests"},
	{CVOApplied, "the CVO applied a whole release and has not recorded it as completed"},
	{EtcdAddWritten, "a learner member is written down as being added and etcd has not been asked to add it"},
	{EtcdRemovalWritten, "a member is written down as being removed and etcd has not been asked to remove it"},
}

// Known reports whether name is a point.
func Known(name string) bool {
	return slices.ContainsFunc(Points, func(p Point) bool { return p.Name == name })
}

var (
	armedName string
	remaining atomic.Int64
)

func init() {
	name, n, err := Parse(os.Getenv(Env))
	if err != nil {
		fmt.Fprintf(os.Stderr, "capstan: %s: %v (no failpoint armed)\n", Env, err)
		return
	}
	armedName = name
	remaining.Store(int64(n))
}

// Parse reads NAME[:N]; "" arms nothing.
func Parse(s string) (name string, n int, err error) {
	if s == "" {
		return "", 0, nil
	}
	name, count, hasCount := strings.Cut(s, ":")
	n = 1
	if hasCount {
		if n, err = strconv.Atoi(count); err != nil || n < 1 {
			return "", 0, fmt.Errorf("%q: the count after %q must be a positive number", s, name)
		}
	}
	if !Known(name) {
		names := make([]string, len(Points))
		for i, p := range Points {
			names[i] = p.Name
		}
		return "", 0, fmt.Errorf("%q is not a failpoint (known: %s)", name, strings.Join(names, ", "))
	}
	return name, n, nil
}

// Format is the value of Env that arms name for its n-th hit.
func Format(name string, n int) string { return name + ":" + strconv.Itoa(n) }

// Hit marks that the process reached the point name; armed for this hit,
// it kills the process.
func Hit(name string) {
	if remaining.Load() <= 0 || name != armedName {
		return
	}
	if remaining.Add(-1) != 0 {
		return
	}
	fmt.Fprintf(os.Stdout, "%s%s reached: SIGKILL\n", Marker, name)
	_ = os.Stdout.Sync()
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}
