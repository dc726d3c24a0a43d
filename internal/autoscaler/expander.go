package autoscaler

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// Option is a node group that can take pending pods, with how many new
// nodes they need.
type Option struct {
	Group     *NodeGroup
	NodeCount int
	Pods      []*corev1.Pod
	// MilliCPU and Memory are what the pods request in all.
	MilliCPU, Memory int64
}

// Expander chooses among options with upstream's expanders, applied in
// order, each keeping the options it likes best; what ties at the end is
// chosen at random.
type Expander struct {
	Names []string
	// Priorities is the priority expander's configuration (higher wins);
	// nil when there is none.
	Priorities map[int][]*regexp.Regexp
	Rand       *rand.Rand
}

// PriorityConfigMap is the priority expander's ConfigMap (key "priorities").
const PriorityConfigMap = "cluster-autoscaler-priority-expander"

// ParsePriorities reads the priority expander's configuration: a YAML map
// from priority to regular expressions matched against node group IDs.
func ParsePriorities(data string) (map[int][]*regexp.Regexp, error) {
	raw := map[int][]string{}
	if err := yaml.UnmarshalStrict([]byte(data), &raw); err != nil {
		return nil, fmt.Errorf("priorities: want a map from priority to a list of regular expressions: %w", err)
	}
	out := map[int][]*regexp.Regexp{}
	for prio, exprs := range raw {
		for _, e := range exprs {
			re, err := regexp.Compile(e)
			if err != nil {
				return nil, fmt.Errorf("priorities: %d: %w", prio, err)
			}
			out[prio] = append(out[prio], re)
		}
	}
	return out, nil
}

// Best returns the option the expanders choose, or nil when there is none.
func (e *Expander) Best(options []Option) *Option {
	if len(options) == 0 {
		return nil
	}
	cands := make([]*Option, len(options))
	for i := range options {
		cands[i] = &options[i]
	}
	for _, name := range e.Names {
		switch name {
		case "least-waste":
			cands = keepBest(cands, func(o *Option) float64 { return -waste(o) })
		case "most-pods":
			cands = keepBest(cands, func(o *Option) float64 { return float64(len(o.Pods)) })
		case "priority":
			cands = e.byPriority(cands)
		}
		if len(cands) == 1 {
			return cands[0]
		}
	}
	if e.Rand == nil {
		return cands[0]
	}
	return cands[e.Rand.IntN(len(cands))]
}

// keepBest keeps the options of the highest score.
func keepBest(cands []*Option, score func(*Option) float64) []*Option {
	var best []*Option
	var top float64
	for _, o := range cands {
		s := score(o)
		switch {
		case len(best) == 0 || s > top:
			best, top = []*Option{o}, s
		case s == top:
			best = append(best, o)
		}
	}
	return best
}

// waste is the share of the new nodes' cpu and memory capacity the pods
// leave unused, summed, as upstream's least-waste expander computes it.
func waste(o *Option) float64 {
	capa := o.Group.Template.Status.Capacity
	n := float64(o.NodeCount)
	capCPU, capMem := float64(capa.Cpu().MilliValue())*n, float64(capa.Memory().Value())*n
	reqCPU, reqMem := float64(o.MilliCPU), float64(o.Memory)
	w := 0.0
	if capCPU > 0 {
		w += (capCPU - reqCPU) / capCPU
	}
	if capMem > 0 {
		w += (capMem - reqMem) / capMem
	}
	return w
}

// byPriority keeps the options whose group matches the highest priority;
// groups matching no pattern are dropped, and when none matches, all stay.
func (e *Expander) byPriority(cands []*Option) []*Option {
	if e.Priorities == nil {
		return cands
	}
	prios := make([]int, 0, len(e.Priorities))
	for p := range e.Priorities {
		prios = append(prios, p)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(prios)))
	for _, p := range prios {
		var kept []*Option
		for _, o := range cands {
			for _, re := range e.Priorities[p] {
				if re.MatchString(o.Group.ID) {
					kept = append(kept, o)
					break
				}
			}
		}
		if len(kept) > 0 {
			return kept
		}
	}
	return cands
}
