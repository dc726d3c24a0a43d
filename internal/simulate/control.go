package simulate

import (
	"fmt"
	"strings"
)

// ControlRun is what the snapshot did in a run without the changes, for
// as long as the changes' run took: the simulation's own divergence,
// which no change caused.
type ControlRun struct {
	// Duration is the simulated time it ran.
	Duration Duration `json:"duration"`
	// Calibration compares its restored cluster with the snapshot.
	Calibration Calibration `json:"calibration"`
	// Removed and Pending are its pods removed and left pending (not
	// pending before), by workload ("pod NAMESPACE/NAME" for a pod of
	// none); Placed how many pods a node took.
	Removed map[string]int `json:"removed"`
	Pending map[string]int `json:"pending"`
	Placed  int            `json:"placed"`
	// Its nodes that went NotReady, were added and were removed.
	NodesNotReady int `json:"nodesNotReady"`
	NodesAdded    int `json:"nodesAdded"`
	NodesRemoved  int `json:"nodesRemoved"`
	// Net is the changes' run less the control's.
	Net NetEffect `json:"net"`
	// Large says the control diverged by a quarter or more of what the
	// changes' run did: read the changes' effect net of it.
	Large bool `json:"large"`
}

// NetEffect is what the changes did beyond what the control run did by
// itself (negative: the control did more).
type NetEffect struct {
	Removed       int `json:"removed"`
	Placed        int `json:"placed"`
	Pending       int `json:"pending"`
	NodesNotReady int `json:"nodesNotReady"`
	NodesAdded    int `json:"nodesAdded"`
	NodesRemoved  int `json:"nodesRemoved"`
}

func (p PendingPod) workload() string { return workloadOr(p.Workload, p.Pod) }

// workloadOr names a pod's workload, or, for a pod of none, the pod.
func workloadOr(workload, pod string) string {
	if workload == "" {
		return "pod " + pod
	}
	return workload
}

// total is how many things a run did: pods removed, placed and left
// pending, nodes gone NotReady, added and removed.
func (n NetEffect) total() int {
	return abs(n.Removed) + abs(n.Placed) + abs(n.Pending) + abs(n.NodesNotReady) + abs(n.NodesAdded) + abs(n.NodesRemoved)
}

func abs(n int) int { return max(n, -n) }

// effect counts what a run did.
func (r *Report) effect() NetEffect {
	pending := 0
	for _, p := range r.Pending {
		if !p.AlreadyPending {
			pending++
		}
	}
	return NetEffect{Removed: len(r.Removed), Placed: len(r.Placed), Pending: pending,
		NodesNotReady: len(r.NodesNotReady), NodesAdded: len(r.NodesAdded), NodesRemoved: len(r.NodesRemoved)}
}

// compare sets the report's control run from the control's report, and
// marks the changes' pending pods the control left pending too (as
// many, workload by workload): those are not the changes' doing.
func (r *Report) compare(control *Report) {
	c := &ControlRun{Duration: control.Duration, Calibration: control.Calibration, Removed: map[string]int{}, Pending: map[string]int{},
		Placed: len(control.Placed), NodesNotReady: len(control.NodesNotReady), NodesAdded: len(control.NodesAdded), NodesRemoved: len(control.NodesRemoved)}
	for _, p := range control.Removed {
		c.Removed[workloadOr(p.Workload, p.Pod)]++
	}
	for _, p := range control.Pending {
		if !p.AlreadyPending {
			c.Pending[p.workload()]++
		}
	}
	left := map[string]int{}
	for w, n := range c.Pending {
		left[w] = n
	}
	for i := range r.Pending {
		p := &r.Pending[i]
		if w := p.workload(); !p.AlreadyPending && left[w] > 0 {
			p.InControl = true
			left[w]--
		}
	}
	changed, ctl := r.effect(), control.effect()
	c.Net = NetEffect{Removed: changed.Removed - ctl.Removed, Placed: changed.Placed - ctl.Placed, Pending: changed.Pending - ctl.Pending,
		NodesNotReady: changed.NodesNotReady - ctl.NodesNotReady, NodesAdded: changed.NodesAdded - ctl.NodesAdded, NodesRemoved: changed.NodesRemoved - ctl.NodesRemoved}
	c.Large = ctl.total() > 0 && 4*ctl.total() >= changed.total()
	r.Control = c
}

// line says in a sentence what the control run did, and the changes'
// effect net of it when it did anything.
func (c *ControlRun) line() string {
	did := c.did()
	if len(did) == 0 {
		return fmt.Sprintf("the snapshot without the changes, for %s, changed nothing: what follows is the changes' doing", c.Duration)
	}
	n := c.Net
	net := []string{fmt.Sprintf("%d removed", n.Removed), fmt.Sprintf("%d placed", n.Placed), fmt.Sprintf("%d pending", n.Pending)}
	nodes := []string{fmt.Sprintf("%d NotReady", n.NodesNotReady), fmt.Sprintf("%d added", n.NodesAdded), fmt.Sprintf("%d removed", n.NodesRemoved)}
	s := fmt.Sprintf("the snapshot without the changes, for %s, %s; net of it, the changes' pods %s, nodes %s",
		c.Duration, strings.Join(did, ", "), strings.Join(net, ", "), strings.Join(nodes, ", "))
	if c.Large {
		s += ". The simulation diverges from the snapshot by itself by a quarter or more of what the changes did: read their effect net of it"
	}
	return s
}

// did lists what the control run did.
func (c *ControlRun) did() []string {
	var out []string
	if n, ws := tally(c.Removed); n > 0 {
		out = append(out, fmt.Sprintf("removed %s (%s)", plural(n, "pod"), ws))
	}
	if c.Placed > 0 {
		out = append(out, fmt.Sprintf("placed %s", plural(c.Placed, "pod")))
	}
	if n, ws := tally(c.Pending); n > 0 {
		out = append(out, fmt.Sprintf("left %s pending (%s)", plural(n, "pod"), ws))
	}
	for _, nc := range []struct {
		n    int
		what string
	}{{c.NodesNotReady, "NotReady"}, {c.NodesAdded, "added"}, {c.NodesRemoved, "removed"}} {
		if nc.n > 0 {
			out = append(out, fmt.Sprintf("had %s %s", plural(nc.n, "node"), nc.what))
		}
	}
	return out
}
