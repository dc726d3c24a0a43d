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
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
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

// FaultEnv injects lasting faults, for every process of a run:
// NAME:ON/PERIOD (comma-separated) makes Fail(NAME) fail for ON of every
// PERIOD of wall-clock time, as an API server that answers errors for a
// while, again and again (a timeout, a 429), would.
const FaultEnv = "CAPSTAN_FAULTS"

// Faults that Fail can inject.
const (
	EtcdNodeRead = "etcd/node-read"
)

// FaultPoints are the places a lasting fault may be injected, documented.
var FaultPoints = []Point{
	{EtcdNodeRead, "the etcd operator reads the Node of a control-plane machine or member: the read fails"},
}

// fault is a lasting fault: Fail fails for on of every period.
type fault struct {
	on, period time.Duration
}

var faults map[string]fault

func init() {
	var err error
	if faults, err = ParseFaults(os.Getenv(FaultEnv)); err != nil {
		fmt.Fprintf(os.Stderr, "capstan: %s: %v (no fault injected)\n", FaultEnv, err)
	}
}

// ParseFaults reads NAME:ON/PERIOD,...; "" injects nothing.
func ParseFaults(s string) (map[string]fault, error) {
	out := map[string]fault{}
	if s == "" {
		return out, nil
	}
	for _, f := range strings.Split(s, ",") {
		name, spec, ok := strings.Cut(f, ":")
		on, period, ok2 := strings.Cut(spec, "/")
		if !ok || !ok2 {
			return nil, fmt.Errorf("%q is not NAME:ON/PERIOD", f)
		}
		if !slices.ContainsFunc(FaultPoints, func(p Point) bool { return p.Name == name }) {
			return nil, fmt.Errorf("%q is not a fault point (known: %s)", name, EtcdNodeRead)
		}
		d1, err1 := time.ParseDuration(on)
		d2, err2 := time.ParseDuration(period)
		if err1 != nil || err2 != nil || d1 <= 0 || d2 < d1 {
			return nil, fmt.Errorf("%q: ON and PERIOD must be durations with 0 < ON <= PERIOD", f)
		}
		out[name] = fault{on: d1, period: d2}
	}
	return out, nil
}

// FormatFault is the value of FaultEnv that makes name fail for on of
// every period.
func FormatFault(name string, on, period time.Duration) string {
	return fmt.Sprintf("%s:%s/%s", name, on, period)
}

// ErrInjected is what Fail returns while its fault is on.
var ErrInjected = errors.New("injected fault")

// Fail returns an error while the fault injected at name is on, nil
// otherwise (always, unless FaultEnv names it).
func Fail(name string) error {
	f, ok := faults[name]
	if !ok {
		return nil
	}
	if time.Duration(time.Now().UnixNano())%f.period < f.on {
		return fmt.Errorf("%s: %w (%s of every %s)", name, ErrInjected, f.on, f.period)
	}
	return nil
}
