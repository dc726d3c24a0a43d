package simulate

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"
	"time"
)

// DefaultTolerance is the share of the observed course within which a
// predicted time agrees with the observed one.
const DefaultTolerance = 0.10

// Comparison sets a simulation's prediction beside what a live cluster
// did under the same change (Record): the course's milestones, each
// predicted time and count against the observed one.
type Comparison struct {
	// Course is the observed course: from the change to its last
	// milestone. A time agrees within Tolerance of it.
	Course    Duration        `json:"course"`
	Tolerance Duration        `json:"tolerance"`
	Rows      []ComparisonRow `json:"rows"`
	// Agree says whether every row agrees.
	Agree bool `json:"agree"`
}

// ComparisonRow is one milestone: how many times it happened and when
// it first and last did, predicted and observed, times since the
// change.
type ComparisonRow struct {
	What           string    `json:"what"`
	PredictedCount int       `json:"predictedCount"`
	ObservedCount  int       `json:"observedCount"`
	PredictedFirst *Duration `json:"predictedFirst,omitempty"`
	ObservedFirst  *Duration `json:"observedFirst,omitempty"`
	PredictedLast  *Duration `json:"predictedLast,omitempty"`
	ObservedLast   *Duration `json:"observedLast,omitempty"`
	Agrees         bool      `json:"agrees"`
	// Why says how a row that does not agree differs.
	Why string `json:"why,omitempty"`
}

// milestone is a kind of event of a course: when each one happened, and
// under which group (a MachineSet, for nodes added).
type milestone struct {
	what  string
	times func(r *Report) map[string][]time.Duration
}

func one(ts []time.Duration) map[string][]time.Duration {
	return map[string][]time.Duration{"": ts}
}

var milestones = []milestone{
	{"nodes NotReady", func(r *Report) map[string][]time.Duration { return one(nodeTimes(r.NodesNotReady)) }},
	{"pods removed", func(r *Report) map[string][]time.Duration {
		var ts []time.Duration
		for _, p := range r.Removed {
			ts = append(ts, time.Duration(p.At))
		}
		return one(ts)
	}},
	{"scale-ups", func(r *Report) map[string][]time.Duration {
		var ts []time.Duration
		for _, e := range r.Autoscaler {
			if e.Reason == "ScaledUpGroup" {
				ts = append(ts, time.Duration(e.At))
			}
		}
		return one(ts)
	}},
	{"nodes added", func(r *Report) map[string][]time.Duration {
		out := map[string][]time.Duration{}
		for _, n := range r.NodesAdded {
			out[n.MachineSet] = append(out[n.MachineSet], time.Duration(n.At))
		}
		return out
	}},
	{"nodes removed", func(r *Report) map[string][]time.Duration { return one(nodeTimes(r.NodesRemoved)) }},
	{"pods placed", func(r *Report) map[string][]time.Duration {
		var ts []time.Duration
		for _, p := range r.Placed {
			ts = append(ts, time.Duration(p.At))
		}
		return one(ts)
	}},
}

func nodeTimes(ns []NodeChange) []time.Duration {
	var ts []time.Duration
	for _, n := range ns {
		ts = append(ts, time.Duration(n.At))
	}
	return ts
}

// changeAt is when a report's first change was made: its times count
// from there. A recording has none: its times count from its beginning.
func changeAt(r *Report) time.Duration {
	if len(r.Changes) > 0 {
		return time.Duration(r.Changes[0].At)
	}
	return 0
}

// Compare sets a prediction beside what was observed. Times count from
// each report's first change (a recording's from its beginning). Each
// milestone agrees when it happened as many times in both, first and
// last within tolerance (a share, DefaultTolerance when 0) of the
// observed course; the pods left pending agree when as many were.
func Compare(predicted, observed *Report, tolerance float64) Comparison {
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	type group struct {
		what, key string
		p, o      []time.Duration
	}
	var groups []group
	var course time.Duration
	for _, m := range milestones {
		pt, ot := m.times(predicted), m.times(observed)
		keys := slices.Sorted(maps.Keys(pt))
		for k := range ot {
			if _, ok := pt[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			g := group{what: m.what, key: k, p: shift(pt[k], changeAt(predicted)), o: shift(ot[k], changeAt(observed))}
			if len(g.p)+len(g.o) == 0 {
				continue
			}
			if len(g.o) > 0 {
				course = max(course, g.o[len(g.o)-1])
			}
			groups = append(groups, g)
		}
	}
	c := Comparison{Course: Duration(course), Tolerance: Duration(time.Duration(float64(course) * tolerance)), Agree: true}
	for _, g := range groups {
		row := ComparisonRow{What: g.what, PredictedCount: len(g.p), ObservedCount: len(g.o), Agrees: true}
		if g.key != "" {
			row.What += " to " + g.key
		}
		if len(g.p) > 0 {
			row.PredictedFirst, row.PredictedLast = ptrDuration(g.p[0]), ptrDuration(g.p[len(g.p)-1])
		}
		if len(g.o) > 0 {
			row.ObservedFirst, row.ObservedLast = ptrDuration(g.o[0]), ptrDuration(g.o[len(g.o)-1])
		}
		switch {
		case len(g.p) != len(g.o):
			row.Agrees, row.Why = false, fmt.Sprintf("%d predicted, %d observed", len(g.p), len(g.o))
		case absDuration(g.p[0]-g.o[0]) > time.Duration(c.Tolerance):
			row.Agrees, row.Why = false, fmt.Sprintf("the first %s off", Duration(absDuration(g.p[0]-g.o[0])))
		case absDuration(g.p[len(g.p)-1]-g.o[len(g.o)-1]) > time.Duration(c.Tolerance):
			row.Agrees, row.Why = false, fmt.Sprintf("the last %s off", Duration(absDuration(g.p[len(g.p)-1]-g.o[len(g.o)-1])))
		}
		c.Agree = c.Agree && row.Agrees
		c.Rows = append(c.Rows, row)
	}
	pp, op := causedPending(predicted), causedPending(observed)
	row := ComparisonRow{What: "pods left pending", PredictedCount: pp, ObservedCount: op, Agrees: pp == op}
	if !row.Agrees {
		row.Why = fmt.Sprintf("%d predicted, %d observed", pp, op)
	}
	c.Agree = c.Agree && row.Agrees
	c.Rows = append(c.Rows, row)
	return c
}

// causedPending counts the pods pending at the end that were not
// pending when the change was made.
func causedPending(r *Report) int {
	n := 0
	for _, p := range r.Pending {
		if !p.AlreadyPending {
			n++
		}
	}
	return n
}

func shift(ts []time.Duration, by time.Duration) []time.Duration {
	out := make([]time.Duration, 0, len(ts))
	for _, t := range ts {
		out = append(out, t-by)
	}
	slices.Sort(out)
	return out
}

func ptrDuration(d time.Duration) *Duration {
	v := Duration(d)
	return &v
}

func absDuration(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// WriteTable writes the comparison for a terminal.
func (c Comparison) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	verdict := "AGREE"
	if !c.Agree {
		verdict = "DISAGREE"
	}
	fmt.Fprintf(tw, "%s: every count equal and every time within %s (%s of the observed course of %s)\n\n",
		verdict, c.Tolerance, percent(c), c.Course)
	fmt.Fprintf(tw, "MILESTONE\tPREDICTED\tOBSERVED\tFIRST (PREDICTED/OBSERVED)\tLAST (PREDICTED/OBSERVED)\t\n")
	for _, r := range c.Rows {
		mark := ""
		if !r.Agrees {
			mark = "differs: " + r.Why
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s / %s\t%s / %s\t%s\n", r.What, r.PredictedCount, r.ObservedCount,
			dashDuration(r.PredictedFirst), dashDuration(r.ObservedFirst), dashDuration(r.PredictedLast), dashDuration(r.ObservedLast), mark)
	}
	return tw.Flush()
}

func percent(c Comparison) string {
	if c.Course == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(c.Tolerance)/float64(c.Course))
}

func dashDuration(d *Duration) string {
	if d == nil {
		return "-"
	}
	return d.String()
}
