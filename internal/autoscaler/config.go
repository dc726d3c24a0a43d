package autoscaler

import (
	"fmt"
	"strconv"
	"time"

	autoscalingv1 "github.com/capstan-dev/capstan/internal/autoscaler/apis/v1"
)

// Config is a ClusterAutoscaler's spec with every default filled in: the
// defaults are the upstream cluster-autoscaler's flags', which OpenShift
// leaves in place for fields the spec does not set.
type Config struct {
	// MaxNodesTotal is the most nodes the cluster may have; 0 is no limit.
	MaxNodesTotal int
	// Cores and MemoryGiB bound the cluster's totals.
	Cores, MemoryGiB Range
	// GPUs bound the totals per GPU type.
	GPUs []GPURange

	ScaleDownEnabled  bool
	DelayAfterAdd     time.Duration
	DelayAfterDelete  time.Duration
	DelayAfterFailure time.Duration
	UnneededTime      time.Duration
	// UnreadyTime is how long an unready node must be unneeded before it
	// is removed (upstream's --scale-down-unready-time; OpenShift's
	// ClusterAutoscaler does not set it).
	UnreadyTime          time.Duration
	UtilizationThreshold float64
	CordonBeforeDelete   bool

	NewPodScaleUpDelay   time.Duration
	MaxPodGracePeriod    time.Duration
	MaxNodeProvisionTime time.Duration
	// MaxNodeStartupTime is how long a registered node that is not ready
	// is taken to be starting: upstream's constant, not a setting of the
	// ClusterAutoscaler (see Options.MaxNodeStartupTime).
	MaxNodeStartupTime time.Duration
	// PriorityCutoff: pods of lower priority are expendable.
	PriorityCutoff              int32
	BalanceSimilarNodeGroups    bool
	BalancingIgnoredLabels      []string
	IgnoreDaemonsetsUtilization bool
	SkipNodesWithLocalStorage   bool
	// Expanders are upstream's names (least-waste, priority, random,
	// most-pods), in the order they filter.
	Expanders               []string
	EnforceNodeGroupMinSize bool
	StartupTaints           []string
}

// Range is an inclusive minimum and maximum.
type Range struct{ Min, Max int64 }

// GPURange bounds the GPUs of one type.
type GPURange struct {
	Type     string
	Min, Max int64
}

// DefaultConfig is the configuration of a ClusterAutoscaler with an empty
// spec: upstream's flag defaults (cores 0:320000, memory 0:6400000 GiB,
// scale-down after 10m unneeded below 0.5 utilization, 10m after a
// scale-up, 10s after a deletion, 3m after a failure, priority cutoff -10,
// nodes provisioned within 15m, the least-waste expander).
func DefaultConfig() Config {
	return Config{
		Cores:                     Range{0, 320000},
		MemoryGiB:                 Range{0, 6400000},
		ScaleDownEnabled:          true,
		DelayAfterAdd:             10 * time.Minute,
		DelayAfterDelete:          10 * time.Second,
		DelayAfterFailure:         3 * time.Minute,
		UnneededTime:              10 * time.Minute,
		UnreadyTime:               20 * time.Minute,
		UtilizationThreshold:      0.5,
		CordonBeforeDelete:        true,
		MaxPodGracePeriod:         600 * time.Second,
		MaxNodeProvisionTime:      15 * time.Minute,
		MaxNodeStartupTime:        MaxNodeStartupTime,
		PriorityCutoff:            -10,
		SkipNodesWithLocalStorage: true,
		Expanders:                 []string{"least-waste"},
	}
}

// expanderNames maps the API's expander names to upstream's.
var expanderNames = map[autoscalingv1.ExpanderString]string{
	autoscalingv1.LeastWasteExpander: "least-waste",
	autoscalingv1.PriorityExpander:   "priority",
	autoscalingv1.RandomExpander:     "random",
	autoscalingv1.MostPodsExpander:   "most-pods",
}

// ConfigFrom turns a ClusterAutoscaler into a Config. The API server has
// checked the spec already (CRD rules); what it cannot check, such as a
// duration Go cannot parse, is an error naming the field.
func ConfigFrom(ca *autoscalingv1.ClusterAutoscaler) (Config, error) {
	c := DefaultConfig()
	s := &ca.Spec
	if rl := s.ResourceLimits; rl != nil {
		if rl.MaxNodesTotal != nil {
			if *rl.MaxNodesTotal < 0 {
				return c, fmt.Errorf("spec.resourceLimits.maxNodesTotal: %d is negative", *rl.MaxNodesTotal)
			}
			c.MaxNodesTotal = int(*rl.MaxNodesTotal)
		}
		if rl.Cores != nil {
			c.Cores = Range{int64(rl.Cores.Min), int64(rl.Cores.Max)}
		}
		if rl.Memory != nil {
			c.MemoryGiB = Range{int64(rl.Memory.Min), int64(rl.Memory.Max)}
		}
		for i, g := range rl.GPUS {
			if g.Type == "" || g.Min < 0 || g.Min > g.Max {
				return c, fmt.Errorf("spec.resourceLimits.gpus[%d]: type %q, min %d and max %d: want a type and 0 <= min <= max", i, g.Type, g.Min, g.Max)
			}
			c.GPUs = append(c.GPUs, GPURange{Type: g.Type, Min: int64(g.Min), Max: int64(g.Max)})
		}
		for name, r := range map[string]Range{"cores": c.Cores, "memory": c.MemoryGiB} {
			if r.Min > r.Max || r.Min < 0 {
				return c, fmt.Errorf("spec.resourceLimits.%s: min %d and max %d: want 0 <= min <= max", name, r.Min, r.Max)
			}
		}
	}
	if sd := s.ScaleDown; sd != nil {
		c.ScaleDownEnabled = sd.Enabled
		for _, d := range []struct {
			field string
			v     *string
			to    *time.Duration
		}{
			{"delayAfterAdd", sd.DelayAfterAdd, &c.DelayAfterAdd},
			{"delayAfterDelete", sd.DelayAfterDelete, &c.DelayAfterDelete},
			{"delayAfterFailure", sd.DelayAfterFailure, &c.DelayAfterFailure},
			{"unneededTime", sd.UnneededTime, &c.UnneededTime},
		} {
			if err := parseDuration("spec.scaleDown."+d.field, d.v, d.to); err != nil {
				return c, err
			}
		}
		if sd.UtilizationThreshold != nil {
			v, err := strconv.ParseFloat(*sd.UtilizationThreshold, 64)
			if err != nil || v <= 0 || v >= 1 {
				return c, fmt.Errorf("spec.scaleDown.utilizationThreshold: %q is not a number between 0 and 1", *sd.UtilizationThreshold)
			}
			c.UtilizationThreshold = v
		}
		if sd.CordonNodeBeforeTerminating != nil {
			c.CordonBeforeDelete = *sd.CordonNodeBeforeTerminating == autoscalingv1.Enabled
		}
	}
	if s.ScaleUp != nil {
		if err := parseDuration("spec.scaleUp.newPodScaleUpDelay", s.ScaleUp.NewPodScaleUpDelay, &c.NewPodScaleUpDelay); err != nil {
			return c, err
		}
	}
	if s.MaxPodGracePeriod != nil {
		if *s.MaxPodGracePeriod < 0 {
			return c, fmt.Errorf("spec.maxPodGracePeriod: %d seconds is negative", *s.MaxPodGracePeriod)
		}
		c.MaxPodGracePeriod = time.Duration(*s.MaxPodGracePeriod) * time.Second
	}
	if s.MaxNodeProvisionTime != "" {
		if err := parseDuration("spec.maxNodeProvisionTime", &s.MaxNodeProvisionTime, &c.MaxNodeProvisionTime); err != nil {
			return c, err
		}
	}
	if s.PodPriorityThreshold != nil {
		c.PriorityCutoff = *s.PodPriorityThreshold
	}
	if s.BalanceSimilarNodeGroups != nil {
		c.BalanceSimilarNodeGroups = *s.BalanceSimilarNodeGroups
	}
	c.BalancingIgnoredLabels = append([]string(nil), s.BalancingIgnoredLabels...)
	if s.IgnoreDaemonsetsUtilization != nil {
		c.IgnoreDaemonsetsUtilization = *s.IgnoreDaemonsetsUtilization
	}
	if s.SkipNodesWithLocalStorage != nil {
		c.SkipNodesWithLocalStorage = *s.SkipNodesWithLocalStorage
	}
	if len(s.Expanders) > 0 {
		c.Expanders = nil
		for _, e := range s.Expanders {
			name, ok := expanderNames[e]
			if !ok {
				return c, fmt.Errorf("spec.expanders: unknown expander %q (LeastWaste, Priority, Random or MostPods)", e)
			}
			c.Expanders = append(c.Expanders, name)
		}
	}
	if s.EnforceNodeGroupMinSize != nil {
		c.EnforceNodeGroupMinSize = *s.EnforceNodeGroupMinSize == autoscalingv1.Enabled
	}
	c.StartupTaints = append([]string(nil), s.StartupTaints...)
	return c, nil
}

func parseDuration(field string, v *string, to *time.Duration) error {
	if v == nil {
		return nil
	}
	d, err := time.ParseDuration(*v)
	if err != nil {
		return fmt.Errorf("%s: %q is not a duration such as 10m or 1h30m", field, *v)
	}
	if d < 0 {
		return fmt.Errorf("%s: %q is negative", field, *v)
	}
	*to = d
	return nil
}
