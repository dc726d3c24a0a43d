// Package failpoint lets a fault campaign (`capstan chaos`) kill capstan
// at a named point of its code: between a decision and its write, in the
// middle of a drain, a reboot or the apply of a release. A point is armed
// for one process through the environment, CAPSTAN_FAILPOINT=NAME:N, or
// through a file the campaign writes once the operation it kills has
// started (CAPSTAN_FAILPOINT_FILE); the N-th time the process reaches it
// after it was armed, it sends itself SIGKILL: exactly what a crash, an
// OOM kill or a power cut at that instant would do, with no deferred
// function, no flush and no shutdown run.
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

// Env arms points: NAME:N kills the process the N-th time it reaches
// NAME (NAME alone: the first time); NAME:N,NAME:N arms several, the
// first reached killing.
const Env = "CAPSTAN_FAILPOINT"

// Marker starts the line a process prints on stdout just before it kills
// itself at a point, so that whoever runs it can tell the kill from a
// crash.
const Marker = "capstan: failpoint "

// HitMarker starts the line a process prints at each hit of an armed
// point that does not kill it: a campaign counts the hits the operation
// made, so that a point armed again after a kill waits for the hit it
// planned, not for that many more.
const HitMarker = "capstan: failpoint hit "

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
	EtcdLearnerAdded        = "etcd/learner-added"
	EtcdLearnerPromoted     = "etcd/learner-promoted"
	EtcdRemovalWritten      = "etcd/removal-written"
	EtcdMemberRemoved       = "etcd/member-removed"
	CPMSMachineCreated      = "cpms/machine-created"
	CVORetrieved            = "cvo/retrieved-not-accepted"
	CVOHandover             = "cvo/handover"
	MCDRebooted             = "mcd/rebooted-not-recorded"
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
	{EtcdLearnerAdded, "etcd added a learner member and capstan has not started its process"},
	{EtcdLearnerPromoted, "etcd promoted a learner to a voting member and capstan has not written it down"},
	{EtcdRemovalWritten, "a member is written down as being removed and etcd has not been asked to remove it"},
	{EtcdMemberRemoved, "etcd removed a member and capstan has neither forgotten it nor let its machine's deletion go on"},
	{CPMSMachineCreated, "the ControlPlaneMachineSet created a replacement control-plane machine and has not seen it"},
	{CVORetrieved, "the CVO's retrieval job of a release completed and the CVO has not accepted the release"},
	{CVOHandover, "the CVO applied its own Deployment of the new release and hands over to it"},
	{MCDRebooted, "a node rebooted into its new configuration and its daemon has not recorded it"},
}

// Known reports whether name is a point.
func Known(name string) bool {
	return slices.ContainsFunc(Points, func(p Point) bool { return p.Name == name })
}

// FileEnv names a file that arms points the way Env does: the process
// reads it as it starts and again every PollInterval, and each time its
// content changes, the points it names are armed afresh, their hits
// counted from then on ("" disarms). A campaign arms points this way only
// once the operation it kills has started, so that the hits it counts are
// the operation's, not the install's or the start-up's.
const FileEnv = "CAPSTAN_FAILPOINT_FILE"

// PollInterval is how often the file of FileEnv is read.
const PollInterval = 50 * time.Millisecond

// Arm is a point armed for its Hit-th hit.
type Arm struct {
	Name string
	Hit  int
}

func (a Arm) String() string { return a.Name + ":" + strconv.Itoa(a.Hit) }

// armedPoints are the armed points and the hits each has left: the first
// to run out kills the process.
type armedPoints map[string]*atomic.Int64

var armed atomic.Pointer[armedPoints]

// arm arms the points, for their hits from now (none: disarms).
func arm(arms []Arm) {
	if len(arms) == 0 {
		armed.Store(nil)
		return
	}
	a := armedPoints{}
	for _, x := range arms {
		n := &atomic.Int64{}
		n.Store(int64(x.Hit))
		a[x.Name] = n
	}
	armed.Store(&a)
}

func init() {
	arms, err := Parse(envOf(Env))
	if err != nil {
		fmt.Fprintf(os.Stderr, "capstan: %s: %v (no failpoint armed)\n", Env, err)
	} else {
		arm(arms)
	}
	if path := envOf(FileEnv); path != "" {
		last := readArmFile(path, "")
		go func() {
			for range time.Tick(PollInterval) {
				last = readArmFile(path, last)
			}
		}()
	}
}

// readArmFile arms the points the file at path names when its content is
// not last, and returns the content. A missing file is an empty one; a
// bad one arms nothing and says why.
func readArmFile(path, last string) string {
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return last
	}
	content := strings.TrimSpace(string(b))
	if content == last {
		return last
	}
	arms, err := Parse(content)
	if err != nil {
		fmt.Fprintf(os.Stderr, "capstan: %s %s: %v (no failpoint armed)\n", FileEnv, path, err)
	}
	arm(arms)
	return content
}

// Armed are the points armed now, by name.
func Armed() []string {
	a := armed.Load()
	if a == nil {
		return nil
	}
	var out []string
	for name := range *a {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// WriteArmFile arms the points, from now on, in every process that reads
// the file at path (FileEnv); none disarms. The file is replaced whole,
// never seen half-written.
func WriteArmFile(path string, arms ...Arm) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(Format(arms...)+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Parse reads NAME[:N][,NAME[:N]...]; "" arms nothing.
func Parse(s string) ([]Arm, error) {
	if s == "" {
		return nil, nil
	}
	var out []Arm
	for _, one := range strings.Split(s, ",") {
		name, count, hasCount := strings.Cut(one, ":")
		n := 1
		if hasCount {
			var err error
			if n, err = strconv.Atoi(count); err != nil || n < 1 {
				return nil, fmt.Errorf("%q: the count after %q must be a positive number", one, name)
			}
		}
		if !Known(name) {
			names := make([]string, len(Points))
			for i, p := range Points {
				names[i] = p.Name
			}
			return nil, fmt.Errorf("%q is not a failpoint (known: %s)", name, strings.Join(names, ", "))
		}
		if slices.ContainsFunc(out, func(a Arm) bool { return a.Name == name }) {
			return nil, fmt.Errorf("%q: %s is armed twice", s, name)
		}
		out = append(out, Arm{Name: name, Hit: n})
	}
	return out, nil
}

// Format is the value of Env that arms the points.
func Format(arms ...Arm) string {
	parts := make([]string, len(arms))
	for i, a := range arms {
		parts[i] = a.String()
	}
	return strings.Join(parts, ",")
}

// ReachedPoint reads the point a process's output line says it killed
// itself at ("" if the line is no marker).
func ReachedPoint(line string) string {
	rest, ok := strings.CutPrefix(line, Marker)
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, " ")
	return name
}

// HitPoint reads the point a process's output line says was hit without
// a kill ("" if the line says nothing of it).
func HitPoint(line string) string {
	name, ok := strings.CutPrefix(line, HitMarker)
	if !ok {
		return ""
	}
	return strings.TrimSpace(name)
}

// Hit marks that the process reached the point name; armed for this hit,
// it kills the process.
func Hit(name string) {
	a := armed.Load()
	if a == nil {
		return
	}
	n := (*a)[name]
	if n == nil {
		return
	}
	if n.Add(-1) != 0 {
		fmt.Fprintf(os.Stdout, "%s%s\n", HitMarker, name)
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
// while, again and again (a timeout, a 429), would; NAME:xN makes its
// first N calls fail.
const FaultEnv = "CAPSTAN_FAULTS"

// Faults that Fail can inject.
const (
	EtcdNodeRead = "etcd/node-read"
	// EtcdInstanceRead: the etcd operator's look-up of a deleting
	// control-plane machine's instance fails.
	EtcdInstanceRead = "etcd/instance-read"
	// CloudCreateAnswerLost: the cloud launches the instance and the
	// answer is lost (a timeout after the commit).
	CloudCreateAnswerLost = "cloud/create-answer-lost"
	// CloudDescribeLags: the cloud's describe does not see an instance
	// launched in the last DescribeLag yet (eventually consistent).
	CloudDescribeLags = "cloud/describe-lags"
)

// DescribeLag is how far behind a lagging describe is.
const DescribeLag = 3 * time.Second

// FaultPoints are the places a lasting fault may be injected, documented.
var FaultPoints = []Point{
	{EtcdNodeRead, "the etcd operator reads the Node of a control-plane machine or member: the read fails"},
	{EtcdInstanceRead, "the etcd operator looks up the instance of a deleting control-plane machine: the look-up fails"},
	{CloudCreateAnswerLost, "the simulated cloud launches an instance and answers an error, as a create whose answer timed out after the commit"},
	{CloudDescribeLags, "the machine actuator describes the instance of a machine that has not recorded it yet: one launched in the last 3s is not found yet, as an eventually consistent cloud API answers"},
}

// fault is a lasting fault: Fail fails for on of every period, or the
// first times it is called.
type fault struct {
	on, period time.Duration
	first      *atomic.Int64
}

var faults map[string]fault

func init() {
	var err error
	if faults, err = ParseFaults(envOf(FaultEnv)); err != nil {
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
		if !slices.ContainsFunc(FaultPoints, func(p Point) bool { return p.Name == name }) {
			known := make([]string, len(FaultPoints))
			for i, p := range FaultPoints {
				known[i] = p.Name
			}
			return nil, fmt.Errorf("%q is not a fault point (known: %s)", name, strings.Join(known, ", "))
		}
		if n, isCount := strings.CutPrefix(spec, "x"); ok && isCount {
			times, err := strconv.Atoi(n)
			if err != nil || times < 1 {
				return nil, fmt.Errorf("%q: the count after x must be a positive number", f)
			}
			first := &atomic.Int64{}
			first.Store(int64(times))
			out[name] = fault{first: first}
			continue
		}
		on, period, ok2 := strings.Cut(spec, "/")
		if !ok || !ok2 {
			return nil, fmt.Errorf("%q is not NAME:ON/PERIOD or NAME:xCOUNT", f)
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

// FormatFirstFaults is the value of FaultEnv that makes the first n calls
// of name fail.
func FormatFirstFaults(name string, n int) string {
	return fmt.Sprintf("%s:x%d", name, n)
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
	if f.first != nil {
		if f.first.Add(-1) >= 0 {
			return fmt.Errorf("%s: %w (one of the first calls)", name, ErrInjected)
		}
		return nil
	}
	if time.Duration(time.Now().UnixNano())%f.period < f.on {
		return fmt.Errorf("%s: %w (%s of every %s)", name, ErrInjected, f.on, f.period)
	}
	return nil
}
