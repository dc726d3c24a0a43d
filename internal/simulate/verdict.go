package simulate

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Findings a run may end with, in the order a verdict names them; each
// is a value of `capstan simulate run --fail-on`.
const (
	// FindingError: a change could not be applied.
	FindingError = "error"
	// FindingPending: pods the changes left without a node (not those
	// pending before the first change).
	FindingPending = "pending"
	// FindingBlocked: a drain had not finished at the end.
	FindingBlocked = "blocked"
	// FindingRollout: a pool had not rolled its configuration out to
	// every node.
	FindingRollout = "rollout"
	// FindingUpdate: an update had not completed.
	FindingUpdate = "update"
	// FindingUnsettled: the cluster was still changing at --for.
	FindingUnsettled = "unsettled"
	// FindingRemoved: pods were removed from their nodes (whether or not
	// they were placed again).
	FindingRemoved = "removed"
	// FindingBudget: a PodDisruptionBudget had fewer healthy pods than
	// it wants, for a while.
	FindingBudget = "budget"
)

// Findings are every finding, in the order a verdict names them.
var Findings = []string{FindingError, FindingPending, FindingBlocked, FindingRollout, FindingUpdate, FindingUnsettled, FindingRemoved, FindingBudget}

// failing are the findings that make a verdict FAIL; the others (pods
// removed and placed again, a budget below its healthy pods for a
// while) are what a change may be expected to do.
var failing = []string{FindingError, FindingPending, FindingBlocked, FindingRollout, FindingUpdate, FindingUnsettled}

// Verdict is a run in one line, for whoever decides on the change.
type Verdict struct {
	// Outcome is OK, or FAIL when a finding but pods removed holds.
	Outcome string `json:"outcome"`
	// Findings are what the run found, of Findings.
	Findings []string `json:"findings"`
	// Line says it all in one line.
	Line string `json:"line"`
}

// ParseFailOn reads --fail-on: findings separated by commas, or "any"
// for every finding that fails a verdict.
func ParseFailOn(s string) ([]string, error) {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == "":
		case f == "any":
			out = append(out, failing...)
		case slices.Contains(Findings, f):
			out = append(out, f)
		default:
			return nil, fmt.Errorf("--fail-on %q: %q is not a finding (want any, or of %s)", s, f, strings.Join(Findings, ", "))
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// FailsOn is the findings of the verdict among those given.
func (v Verdict) FailsOn(findings []string) []string {
	var out []string
	for _, f := range v.Findings {
		if slices.Contains(findings, f) {
			out = append(out, f)
		}
	}
	return out
}

// verdict sums the report up.
func (r *Report) verdict() Verdict {
	var found, parts []string
	add := func(finding, part string) {
		found = append(found, finding)
		parts = append(parts, part)
	}
	var failed []string
	for _, c := range r.Changes {
		if c.Error != "" {
			failed = append(failed, c.Change)
		}
	}
	if len(failed) > 0 {
		add(FindingError, fmt.Sprintf("%s not applied (%s)", plural(len(failed), "change"), strings.Join(failed, ", ")))
	}
	var caused, before, inControl []string
	for _, p := range r.Pending {
		switch w := p.workload(); {
		case p.AlreadyPending:
			before = append(before, w)
		case p.InControl:
			inControl = append(inControl, w)
		default:
			caused = append(caused, w)
		}
	}
	if len(caused) > 0 {
		sort.Strings(caused)
		add(FindingPending, fmt.Sprintf("%s pending because of the changes (%s)", plural(len(caused), "pod"), strings.Join(compactCounts(caused), ", ")))
	}
	if len(r.BlockedDrains) > 0 {
		var nodes []string
		for _, d := range r.BlockedDrains {
			nodes = append(nodes, d.Node)
		}
		add(FindingBlocked, fmt.Sprintf("%s blocked (%s)", plural(len(nodes), "drain"), strings.Join(nodes, ", ")))
	}
	for _, ro := range r.Rollouts {
		if ro.Updated < ro.Nodes {
			add(FindingRollout, fmt.Sprintf("pool %s updated %d of %d nodes", ro.Pool, ro.Updated, ro.Nodes))
		}
	}
	if u := r.Update; u != nil && u.Took == nil {
		add(FindingUpdate, fmt.Sprintf("the update to %s %s", u.To, strings.ToLower(u.State)))
	}
	if !r.Settled {
		add(FindingUnsettled, "still changing at --for ("+r.Duration.String()+")")
	}
	outcome := "OK"
	for _, f := range found {
		if slices.Contains(failing, f) {
			outcome = "FAIL"
		}
	}
	if len(r.Removed) > 0 {
		found = append(found, FindingRemoved)
	}
	var below []string
	for _, b := range r.Budgets {
		if b.Below > 0 {
			below = append(below, fmt.Sprintf("%s below %d healthy for %s", b.Budget, b.DesiredHealthy, b.Below))
		}
	}
	if len(below) > 0 {
		found = append(found, FindingBudget)
	}
	// What else happened, after what was found.
	var also []string
	if r.Settled {
		also = append(also, "settled after "+r.Duration.String())
	}
	if len(r.Removed)+len(r.Placed) > 0 {
		also = append(also, fmt.Sprintf("%s removed, %d placed", plural(len(r.Removed), "pod"), len(r.Placed)))
	}
	if w := leastAvailable(r.Availability); w != nil {
		also = append(also, fmt.Sprintf("lowest availability %s %d of %d Ready", w.Workload, w.LowestReady, w.Desired))
	}
	if len(below) > 0 {
		also = append(also, "PodDisruptionBudget "+strings.Join(below, ", "))
	}
	if len(r.NodesNotReady) > 0 {
		also = append(also, plural(len(r.NodesNotReady), "node")+" NotReady")
	}
	if len(r.NodesAdded) > 0 {
		also = append(also, plural(len(r.NodesAdded), "node")+" added"+byMachineSet(r.NodesAdded))
	}
	if len(r.NodesRemoved) > 0 {
		also = append(also, plural(len(r.NodesRemoved), "node")+" removed"+byMachineSet(r.NodesRemoved))
	}
	if len(before) > 0 {
		also = append(also, plural(len(before), "pod")+" pending before the changes still pending")
	}
	if len(inControl) > 0 {
		also = append(also, plural(len(inControl), "pod")+" pending in the control run too")
	}
	if r.Control != nil && r.Control.Large {
		also = append(also, "the control run without the changes diverged too (see Control)")
	}
	line := outcome
	if len(parts) > 0 {
		line += ": " + strings.Join(parts, "; ")
		if len(also) > 0 {
			line += "; " + strings.Join(also, ", ")
		}
	} else if len(also) > 0 {
		line += ": " + strings.Join(also, ", ")
	}
	if found == nil {
		found = []string{}
	}
	return Verdict{Outcome: outcome, Findings: found, Line: line}
}

// leastAvailable is the workload with the lowest share of the pods it
// wants Ready at its lowest.
func leastAvailable(ws []WorkloadAvailability) *WorkloadAvailability {
	var out *WorkloadAvailability
	share := func(w *WorkloadAvailability) float64 { return float64(w.LowestReady) / float64(max(w.Desired, 1)) }
	for i := range ws {
		if w := &ws[i]; w.LowestReady < int(w.Desired) && (out == nil || share(w) < share(out)) {
			out = w
		}
	}
	return out
}

// byMachineSet is " (MachineSet a x2, b)" for nodes of MachineSets.
func byMachineSet(nodes []NodeChange) string {
	var sets []string
	for _, n := range nodes {
		if n.MachineSet != "" {
			sets = append(sets, n.MachineSet)
		}
	}
	if len(sets) == 0 {
		return ""
	}
	sort.Strings(sets)
	return " (MachineSet " + strings.Join(compactCounts(sets), ", ") + ")"
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
