package simulate

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is what a simulation saw, in simulated time: durations since
// the first change, at the cluster's speed.
type Report struct {
	// Verdict is the run in one line, and what it found.
	Verdict Verdict `json:"verdict"`
	// Caveats are what the snapshot holds that the simulation does not
	// play as the cluster would.
	Caveats  []string  `json:"caveats"`
	Snapshot string    `json:"snapshot"`
	TakenAt  time.Time `json:"takenAt"`
	// Speed is how much faster than real time the simulation ran.
	Speed float64 `json:"speed"`
	// Recorded says the report is of a live cluster (Record), not of a
	// simulation: Snapshot names the cluster, TakenAt when the recording
	// began, and times are real.
	Recorded bool `json:"recorded,omitempty"`
	// Scheduler is the default-scheduler that ran, and why that one.
	Scheduler SchedulerUsed `json:"scheduler"`
	// BootTime is how long the simulation's new instances took to become
	// Ready nodes, and Boot says why that long.
	BootTime Duration `json:"bootTime"`
	Boot     string   `json:"boot,omitempty"`
	// Calibration compares the restored cluster, as the changes began,
	// with the snapshot.
	Calibration Calibration `json:"calibration"`
	// Control is the run of the snapshot without the changes (nil when
	// skipped).
	Control *ControlRun `json:"control,omitempty"`
	// Summary says in a sentence each which scheduler ran, how the
	// restore compares with the snapshot, and what the control run did.
	Summary []string `json:"summary"`
	// Nodes and Pods are the snapshot's, restored.
	Nodes int `json:"nodes"`
	Pods  int `json:"pods"`
	// RestoreTime is the real time the private cluster took to start and
	// restore the snapshot; RunTime the real time from the first change
	// to the end.
	RestoreTime Duration `json:"restoreTime"`
	RunTime     Duration `json:"runTime"`
	// Changes are the changes applied, in order, with when and how each
	// went.
	Changes []AppliedChange `json:"changes"`
	// Settled says whether nothing changed for the quiet time before the
	// end; otherwise the run ended at --for.
	Settled bool `json:"settled"`
	// Duration is the simulated time from the first change to the end
	// (or, settled, to the last thing that happened).
	Duration Duration `json:"duration"`
	// Removed are the pods deleted from their nodes, and why.
	Removed []PodRemoval `json:"removed"`
	// Placed are the pods made during the simulation that a node took.
	Placed []PodPlacement `json:"placed"`
	// Pending are the pods without a node at the end, with the
	// scheduler's and the autoscaler's reasons.
	Pending []PendingPod `json:"pending"`
	// NodesAdded and NodesRemoved are the nodes that registered or went
	// away; NodesNotReady those that stopped being Ready.
	NodesAdded    []NodeChange `json:"nodesAdded"`
	NodesRemoved  []NodeChange `json:"nodesRemoved"`
	NodesNotReady []NodeChange `json:"nodesNotReady"`
	// Availability are the workloads whose Ready pods went down during
	// the run, or that end with fewer than they want; Budgets the
	// PodDisruptionBudgets that fell below their desired healthy pods.
	Availability []WorkloadAvailability `json:"availability"`
	Budgets      []BudgetAvailability   `json:"budgets"`
	// Autoscaler are the cluster autoscaler's events: scale-ups, the pods
	// it would not scale up for and why, scale-downs.
	Autoscaler []Event `json:"autoscaler"`
	// BlockedDrains are drains that had not finished at the end: of a
	// drain change, or of a Machine being deleted.
	BlockedDrains []BlockedDrain `json:"blockedDrains"`
	// Rollouts are the MachineConfigPools that rolled a new configuration
	// to their nodes.
	Rollouts []PoolRollout `json:"rollouts"`
	// Update is an update change's course: its run levels, the operator
	// waited on longest, the risks that apply (each pool's rollout is in
	// Rollouts).
	Update *UpdateRun `json:"update,omitempty"`
}

// PoolRollout is a MachineConfigPool's rollout of a new configuration:
// its nodes in the order the MCO told them to update.
type PoolRollout struct {
	Pool string `json:"pool"`
	// Config is the rendered configuration the pool rolled out.
	Config string `json:"config"`
	// Nodes is how many nodes the pool has; Updated how many run Config
	// at the end.
	Nodes   int `json:"nodes"`
	Updated int `json:"updated"`
	// MaxUnavailable is the pool's, for its node count.
	MaxUnavailable int `json:"maxUnavailable"`
	// Started is when the first node was told to update; Finished, when
	// every node runs Config, is when the last one did.
	Started  Duration  `json:"started"`
	Finished *Duration `json:"finished,omitempty"`
	// Longest is the node whose update took longest.
	Longest string       `json:"longest,omitempty"`
	Order   []NodeUpdate `json:"order"`
}

// NodeUpdate is one node's update in a rollout.
type NodeUpdate struct {
	Node string `json:"node"`
	Zone string `json:"zone,omitempty"`
	// Targeted is when the MCO told the node to update, Updated when its
	// daemon was done (absent if it was not).
	Targeted Duration  `json:"targeted"`
	Updated  *Duration `json:"updated,omitempty"`
	// State is the daemon's state at the end (Done, Working, Degraded),
	// Reason its reason for a Degraded one.
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
}

// Duration is a time.Duration written as text ("4m10s").
type Duration time.Duration

// MarshalText writes the duration as time.Duration does, to the second.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads what MarshalText wrote.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = Duration(v)
	return err
}

func (d Duration) String() string { return time.Duration(d).Round(time.Second).String() }

// AppliedChange is a change and how applying it went.
type AppliedChange struct {
	Change string   `json:"change"`
	At     Duration `json:"at"`
	Error  string   `json:"error,omitempty"`
}

// PodRemoval is a pod deleted from its node.
type PodRemoval struct {
	Pod      string   `json:"pod"`
	Workload string   `json:"workload,omitempty"`
	Node     string   `json:"node"`
	At       Duration `json:"at"`
	// Reason is the pod's DisruptionTarget condition's reason
	// (DeletionByTaintManager, EvictionByEvictionAPI, DeletionByPodGC,
	// PreemptionByScheduler, ...), or Deleted.
	Reason string `json:"reason"`
}

// PodPlacement is a new pod a node took.
type PodPlacement struct {
	Pod      string   `json:"pod"`
	Workload string   `json:"workload,omitempty"`
	Node     string   `json:"node"`
	Zone     string   `json:"zone,omitempty"`
	At       Duration `json:"at"`
}

// PendingPod is a pod no node took.
type PendingPod struct {
	Pod      string `json:"pod"`
	Workload string `json:"workload,omitempty"`
	// AlreadyPending says the pod was pending before the first change
	// already: not the changes' doing.
	AlreadyPending bool `json:"alreadyPending,omitempty"`
	// InControl says the control run, without the changes, left a pod
	// of its workload pending too: not the changes' doing either.
	InControl bool `json:"inControl,omitempty"`
	// Scheduler is the scheduler's last word (PodScheduled's message).
	Scheduler string `json:"scheduler,omitempty"`
	// Autoscaler is the autoscaler's last word on the pod.
	Autoscaler string `json:"autoscaler,omitempty"`
}

// NodeChange is a node that came, went or stopped being Ready.
type NodeChange struct {
	Node string   `json:"node"`
	Zone string   `json:"zone,omitempty"`
	At   Duration `json:"at"`
	// MachineSet is the MachineSet of the node's Machine, if any.
	MachineSet string `json:"machineSet,omitempty"`
	// For are, of an added node, the pods whose scale-up of its
	// MachineSet the autoscaler reported (TriggeredScaleUp) during the
	// run.
	For []string `json:"for,omitempty"`
}

// Event is an event of the simulation.
type Event struct {
	At      Duration `json:"at"`
	Object  string   `json:"object"`
	Reason  string   `json:"reason"`
	Message string   `json:"message"`
	Count   int      `json:"count"`
}

// BlockedDrain is a drain that had not finished.
type BlockedDrain struct {
	Node string `json:"node"`
	// By is what drained: the change, or the Machine being deleted.
	By      string   `json:"by"`
	Pods    []string `json:"pods"`
	Message string   `json:"message"`
}

// summary is the report's Summary.
func (r *Report) summary() []string {
	if r.Recorded {
		return []string{"Recorded on the live cluster: its own scheduler and controllers ran, in real time."}
	}
	var out []string
	if r.Scheduler.Name != "" {
		out = append(out, fmt.Sprintf("Scheduled by %s.", r.Scheduler))
	}
	if r.Boot != "" {
		out = append(out, fmt.Sprintf("Boot: %s.", r.Boot))
	}
	out = append(out, fmt.Sprintf("Restore: %s.", r.Calibration.Line()))
	if r.Control != nil {
		out = append(out, fmt.Sprintf("Control: %s.", r.Control.line()))
	} else {
		out = append(out, "Control: none (--control=false): nothing separates the changes' effect from the simulation's own divergence.")
	}
	return out
}

// WriteTable writes the report for a terminal.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	p := func(format string, a ...any) { fmt.Fprintf(tw, format, a...) }
	end := "ended at --for"
	if r.Settled {
		end = "settled"
	}
	v := r.Verdict
	if v.Outcome == "" {
		v = r.verdict()
	}
	p("%s\n", v.Line)
	for _, c := range r.Caveats {
		p("Caveat: %s.\n", c)
	}
	p("\n")
	if r.Recorded {
		p("Recorded %d nodes and %d pods of %s from %s: %s after %s.\n", r.Nodes, r.Pods, r.Snapshot, r.TakenAt.UTC().Format(time.RFC3339), end, r.Duration)
	} else {
		p("Simulated %d nodes and %d pods of the snapshot taken %s, at %gx: %s after %s (restored in %s, run in %s of real time).\n",
			r.Nodes, r.Pods, r.TakenAt.UTC().Format(time.RFC3339), r.Speed, end, r.Duration, r.RestoreTime, r.RunTime)
	}
	summary := r.Summary
	if summary == nil {
		summary = r.summary()
	}
	for _, l := range summary {
		p("%s\n", l)
	}
	p("\nCHANGE\tAT\tRESULT\n")
	for _, c := range r.Changes {
		res := "applied"
		if c.Error != "" {
			res = c.Error
		}
		p("%s\t%s\t%s\n", c.Change, c.At, res)
	}
	if len(r.NodesNotReady)+len(r.NodesRemoved)+len(r.NodesAdded) > 0 {
		// By zone and MachineSet: one row per group, however many nodes
		// (each node is in -o json).
		p("\nNODES\tZONE\tMACHINESET\tCOUNT\tFIRST AT\tLAST AT\n")
		for _, set := range []struct {
			what  string
			nodes []NodeChange
		}{{"NotReady", r.NodesNotReady}, {"removed", r.NodesRemoved}, {"added", r.NodesAdded}} {
			for _, g := range groupNodes(set.nodes) {
				p("%s\t%s\t%s\t%d\t%s\t%s\n", set.what, dash(g.zone), dash(g.machineSet), g.count, g.first, g.last)
			}
		}
	}
	if ups := scaleUps(r); len(ups) > 0 {
		p("\nSCALED UP\tNODES ADDED\tFOR PODS OF\n")
		for _, u := range ups {
			p("%s\t%d\t%s\n", u.machineSet, u.nodes, strings.Join(u.for_, ", "))
		}
	}
	if len(r.Removed)+len(r.Placed) > 0 {
		p("\nWORKLOAD\tPODS REMOVED\tPODS PLACED\tPLACED ON\n")
		for _, wl := range workloadSummary(r) {
			p("%s\t%d\t%d\t%s\n", wl.name, wl.removed, wl.placed, strings.Join(wl.on, ", "))
		}
		reasons := map[string]int{}
		for _, rm := range r.Removed {
			reasons[rm.Reason]++
		}
		var rs []string
		for k, n := range reasons {
			rs = append(rs, fmt.Sprintf("%s %d", k, n))
		}
		sort.Strings(rs)
		if len(rs) > 0 {
			p("Pods removed by: %s\n", strings.Join(rs, ", "))
		}
	}
	if len(r.Availability) > 0 {
		p("\nAVAILABILITY\tDESIRED\tREADY AT START\tLOWEST\tAT END\n")
		for _, a := range r.Availability {
			p("%s\t%d\t%d\t%d\t%d\n", a.Workload, a.Desired, a.ReadyAtStart, a.LowestReady, a.ReadyAtEnd)
		}
	}
	if len(r.Budgets) > 0 {
		p("\nBUDGET\tDESIRED HEALTHY\tLOWEST HEALTHY\tBELOW FOR\n")
		for _, b := range r.Budgets {
			p("%s\t%d\t%d\t%s\n", b.Budget, b.DesiredHealthy, b.LowestHealthy, b.Below)
		}
	}
	if len(r.Pending) > 0 {
		// By workload, cause and reasons (each pod is in -o json).
		p("\nPENDING\tPODS\tSINCE\tSCHEDULER\tAUTOSCALER\n")
		for _, g := range groupPending(r.Pending) {
			p("%s\t%d\t%s\t%s\t%s\n", g.workload, g.count, g.since, g.scheduler, g.autoscaler)
		}
	}
	if len(r.Autoscaler) > 0 {
		p("\nAUTOSCALER\tAT\tOBJECT\tCOUNT\tMESSAGE\n")
		for _, e := range r.Autoscaler {
			p("%s\t%s\t%s\t%d\t%s\n", e.Reason, e.At, e.Object, e.Count, e.Message)
		}
	}
	if u := r.Update; u != nil {
		writeUpdate(p, u)
	}
	for _, ro := range r.Rollouts {
		end := fmt.Sprintf("%d of %d nodes updated at the end", ro.Updated, ro.Nodes)
		if ro.Finished != nil {
			end = fmt.Sprintf("every node updated after %s", *ro.Finished-ro.Started)
		}
		p("\nPool %s rolled out %s from %s, maxUnavailable %d: %s", ro.Pool, ro.Config, ro.Started, ro.MaxUnavailable, end)
		if ro.Longest != "" {
			p("; longest %s", ro.Longest)
		}
		p(".\nNODE\tZONE\tTARGETED\tUPDATED\tSTATE\n")
		for _, u := range ro.Order {
			upd := "-"
			if u.Updated != nil {
				upd = u.Updated.String()
			}
			state := u.State
			if u.Reason != "" {
				state += ": " + u.Reason
			}
			p("%s\t%s\t%s\t%s\t%s\n", u.Node, u.Zone, u.Targeted, upd, state)
		}
	}
	if len(r.BlockedDrains) > 0 {
		p("\nBLOCKED DRAIN\tBY\tPODS LEFT\tWHY\n")
		for _, d := range r.BlockedDrains {
			p("%s\t%s\t%s\t%s\n", d.Node, d.By, strings.Join(d.Pods, ", "), d.Message)
		}
	}
	return tw.Flush()
}

// writeUpdate writes an update's section of the table.
func writeUpdate(p func(string, ...any), u *UpdateRun) {
	kind := "Update"
	if u.Conditional {
		kind = "Conditional update"
	}
	p("\n%s from %s to %s (channel %s): ", kind, u.From, u.To, u.Channel)
	switch {
	case u.Took != nil:
		p("accepted at %s, completed after %s", *u.Accepted, *u.Took)
	case u.Accepted != nil:
		p("accepted at %s, %s at the end", *u.Accepted, u.State)
	default:
		p("%s", u.State)
	}
	p(". %s.\n", u.Progress)
	if u.LongestOperator != "" {
		p("Waited longest on ClusterOperator %s: %s.\n", u.LongestOperator, *u.LongestOperatorWait)
	}
	if len(u.RunLevels) > 0 {
		p("RUN LEVEL\tSTARTED\tFINISHED\tTOOK\tWAITED LONGEST ON\n")
		for _, l := range u.RunLevels {
			op := "-"
			if l.Operator != "" {
				op = fmt.Sprintf("%s (%s)", l.Operator, *l.Waited)
			}
			p("%s\t%s\t%s\t%s\t%s\n", l.RunLevel, l.Started, l.Finished, l.Finished-l.Started, op)
		}
	}
	if u.Recommended != "" {
		p("The cluster evaluated the update as Recommended=%s\n", u.Recommended)
	}
	for _, r := range u.Risks {
		p("Risk %s: %s (%s; %s)\n", r.Name, r.Message, r.URL, strings.Join(r.Rules, "; "))
	}
	if u.NotUpgradeable != "" {
		p("Upgradeable=False in the snapshot, which holds a minor update: %s\n", u.NotUpgradeable)
	}
	if len(u.NotSimulated) > 0 {
		p("ClusterOperators of the snapshot the simulated release does not carry: %s\n", strings.Join(u.NotSimulated, ", "))
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

type nodeGroup struct {
	zone, machineSet string
	count            int
	first, last      Duration
}

// groupNodes groups nodes by zone and MachineSet, in the order of their
// first node.
func groupNodes(nodes []NodeChange) []nodeGroup {
	var out []nodeGroup
	at := map[[2]string]int{}
	for _, n := range nodes {
		k := [2]string{n.Zone, n.MachineSet}
		i, ok := at[k]
		if !ok {
			at[k], i = len(out), len(out)
			out = append(out, nodeGroup{zone: n.Zone, machineSet: n.MachineSet, first: n.At, last: n.At})
		}
		g := &out[i]
		g.count++
		g.first, g.last = min(g.first, n.At), max(g.last, n.At)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].first < out[j].first })
	return out
}

type scaleUp struct {
	machineSet string
	nodes      int
	for_       []string
}

// scaleUps are, by MachineSet, the nodes added and the workloads of the
// pods they were added for.
func scaleUps(r *Report) []scaleUp {
	workload := map[string]string{}
	for _, p := range r.Placed {
		workload[p.Pod] = p.Workload
	}
	for _, p := range r.Pending {
		workload[p.Pod] = p.Workload
	}
	var out []scaleUp
	at := map[string]int{}
	for _, n := range r.NodesAdded {
		if n.MachineSet == "" {
			continue
		}
		i, ok := at[n.MachineSet]
		if !ok {
			at[n.MachineSet], i = len(out), len(out)
			out = append(out, scaleUp{machineSet: n.MachineSet})
		}
		out[i].nodes++
		if out[i].for_ == nil && len(n.For) > 0 {
			var ws []string
			for _, pod := range n.For {
				w := workload[pod]
				if w == "" {
					w = "pod " + pod
				}
				ws = append(ws, w)
			}
			sort.Strings(ws)
			out[i].for_ = compactCounts(ws)
		}
	}
	for i := range out {
		if out[i].for_ == nil {
			out[i].for_ = []string{"-"}
		}
	}
	return out
}

type pendingGroup struct {
	workload, since, scheduler, autoscaler string
	count                                  int
}

// groupPending groups pending pods by workload, cause and reasons.
func groupPending(pods []PendingPod) []pendingGroup {
	var out []pendingGroup
	at := map[pendingGroup]int{}
	for _, pp := range pods {
		g := pendingGroup{workload: pp.Workload, since: "the changes", scheduler: pp.Scheduler, autoscaler: pp.Autoscaler}
		if g.workload == "" {
			g.workload = "pod " + pp.Pod
		}
		if pp.AlreadyPending {
			g.since = "before"
		}
		i, ok := at[g]
		if !ok {
			at[g], i = len(out), len(out)
			out = append(out, g)
		}
		out[i].count++
	}
	return out
}

type workloadLine struct {
	name            string
	removed, placed int
	on              []string
}

// workloadSummary counts the removed and placed pods by workload.
func workloadSummary(r *Report) []workloadLine {
	by := map[string]*workloadLine{}
	get := func(w, pod string) *workloadLine {
		if w == "" {
			w = "pod " + pod
		}
		if by[w] == nil {
			by[w] = &workloadLine{name: w}
		}
		return by[w]
	}
	for _, rm := range r.Removed {
		get(rm.Workload, rm.Pod).removed++
	}
	for _, pl := range r.Placed {
		l := get(pl.Workload, pl.Pod)
		l.placed++
		l.on = append(l.on, pl.Node)
	}
	out := make([]workloadLine, 0, len(by))
	for _, l := range by {
		sort.Strings(l.on)
		l.on = compactCounts(l.on)
		out = append(out, *l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// compactCounts turns sorted names into "name" or "name x3".
func compactCounts(sorted []string) []string {
	var out []string
	for i := 0; i < len(sorted); {
		j := i
		for j < len(sorted) && sorted[j] == sorted[i] {
			j++
		}
		if j-i > 1 {
			out = append(out, fmt.Sprintf("%s x%d", sorted[i], j-i))
		} else {
			out = append(out, sorted[i])
		}
		i = j
	}
	return out
}
