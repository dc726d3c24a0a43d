package autoscaler

import (
	"testing"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	"sigs.k8s.io/yaml"

	autoscalingv1 "github.com/capstan-dev/capstan/internal/autoscaler/apis/v1"
	autoscalingv1beta1 "github.com/capstan-dev/capstan/internal/autoscaler/apis/v1beta1"
	"github.com/capstan-dev/capstan/internal/fuzzseed"
	"github.com/capstan-dev/capstan/internal/machine"
)

// FuzzClusterAutoscaler reads arbitrary ClusterAutoscaler documents: a
// spec is refused with the field named, or becomes a Config whose limits
// and durations the autoscaler can use as they are.
func FuzzClusterAutoscaler(f *testing.F) {
	fuzzseed.Files(f, "testdata/clusterautoscalers")
	f.Fuzz(func(t *testing.T, raw []byte) {
		ca := &autoscalingv1.ClusterAutoscaler{}
		if err := yaml.UnmarshalStrict(raw, ca); err != nil {
			return
		}
		c, err := ConfigFrom(ca)
		if err != nil {
			return
		}
		if c.MaxNodesTotal < 0 {
			t.Fatalf("maxNodesTotal %d accepted", c.MaxNodesTotal)
		}
		for _, r := range []Range{c.Cores, c.MemoryGiB} {
			if r.Min < 0 || r.Min > r.Max {
				t.Fatalf("range %v accepted", r)
			}
		}
		for _, g := range c.GPUs {
			if g.Type == "" || g.Min < 0 || g.Min > g.Max {
				t.Fatalf("GPU limit %+v accepted", g)
			}
		}
		for name, d := range map[string]int64{"delayAfterAdd": int64(c.DelayAfterAdd), "delayAfterDelete": int64(c.DelayAfterDelete),
			"delayAfterFailure": int64(c.DelayAfterFailure), "unneededTime": int64(c.UnneededTime), "newPodScaleUpDelay": int64(c.NewPodScaleUpDelay),
			"maxPodGracePeriod": int64(c.MaxPodGracePeriod), "maxNodeProvisionTime": int64(c.MaxNodeProvisionTime)} {
			if d < 0 {
				t.Fatalf("%s %d accepted", name, d)
			}
		}
		if c.UtilizationThreshold <= 0 || c.UtilizationThreshold >= 1 {
			t.Fatalf("utilizationThreshold %v accepted", c.UtilizationThreshold)
		}
	})
}

// FuzzPriorities reads arbitrary priority expander ConfigMaps.
func FuzzPriorities(f *testing.F) {
	fuzzseed.Files(f, "testdata/priorities")
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParsePriorities(string(data))
		if err != nil && p != nil {
			t.Fatalf("ParsePriorities returned priorities with its error %v", err)
		}
		for prio, res := range p {
			for _, re := range res {
				if re == nil {
					t.Fatalf("priority %d holds a nil expression", prio)
				}
			}
		}
	})
}

// FuzzNodeGroupAnnotations reads arbitrary bounds and scale-from-zero
// annotations on a MachineSet: it is a node group with 0 <= min <= max
// and a template of non-negative capacity, or is set apart with why.
func FuzzNodeGroupAnnotations(f *testing.F) {
	f.Add("1", "3", "8", "32768", "110")
	f.Add("0", "0", "", "", "")
	f.Add("4", "2", "16", "65536", "250")
	f.Add("-1", "x", "-2", "1e3", "9223372036854775807")
	f.Fuzz(func(t *testing.T, minS, maxS, cpu, mem, pods string) {
		ms := machineSet("fuzz", "capstan.large", "", 1, 0, 0)
		ms.Annotations[MinSizeAnnotation], ms.Annotations[MaxSizeAnnotation] = minS, maxS
		for k, v := range map[string]string{machine.CPUAnnotation: cpu, machine.MemoryAnnotation: mem, machine.MaxPodsAnnotation: pods} {
			if v != "" {
				ms.Annotations[k] = v
			}
		}
		groups, bad := NodeGroups([]*machinev1.MachineSet{ms}, nil, nil, nil, fixtureNow, MaxNodeStartupTime)
		if len(groups)+len(bad) > 1 {
			t.Fatalf("one MachineSet gave %d groups and %d bad ones", len(groups), len(bad))
		}
		if len(bad) == 1 && bad[0].Err == nil {
			t.Fatalf("a bad group without why")
		}
		if len(groups) == 0 {
			return
		}
		g := groups[0]
		if g.Min < 0 || g.Min > g.Max {
			t.Fatalf("bounds %q..%q read as %d..%d", minS, maxS, g.Min, g.Max)
		}
		if g.TemplateErr != nil {
			return
		}
		for name, q := range g.Template.Status.Capacity {
			if q.Sign() < 0 {
				t.Fatalf("template capacity %s=%s", name, q.String())
			}
		}
	})
}

// FuzzMachineAutoscaler writes an arbitrary MachineAutoscaler's bounds
// onto a MachineSet and reads them back as the autoscaler does: the
// bounds it reads are the spec's, or the set is not autoscaled (max 0),
// or it is set apart with why (bounds the API server would refuse).
func FuzzMachineAutoscaler(f *testing.F) {
	fuzzseed.Files(f, "testdata/machineautoscalers")
	f.Fuzz(func(t *testing.T, raw []byte) {
		ma := &autoscalingv1beta1.MachineAutoscaler{}
		if err := yaml.UnmarshalStrict(raw, ma); err != nil {
			return
		}
		ms := machineSet("target", "capstan.large", "", 1, 0, 0)
		delete(ms.Annotations, MinSizeAnnotation)
		delete(ms.Annotations, MaxSizeAnnotation)
		if _, err := setBounds(ms, ma); err != nil {
			t.Fatalf("setBounds on an unowned MachineSet: %v", err)
		}
		groups, bad := NodeGroups([]*machinev1.MachineSet{ms}, nil, nil, nil, fixtureNow, MaxNodeStartupTime)
		minR, maxR := int(ma.Spec.MinReplicas), int(ma.Spec.MaxReplicas)
		switch {
		case minR < 0 || maxR < 0 || maxR < minR:
			if len(bad) != 1 || len(groups) != 0 {
				t.Fatalf("bounds %d..%d gave groups %v and bad %v, want the set apart", minR, maxR, groups, bad)
			}
		case maxR == 0:
			if len(groups)+len(bad) != 0 {
				t.Fatalf("max 0 gave groups %v and bad %v, want none", groups, bad)
			}
		default:
			if len(groups) != 1 || groups[0].Min != minR || groups[0].Max != maxR {
				t.Fatalf("bounds %d..%d read back as %v (bad %v)", minR, maxR, groups, bad)
			}
		}
	})
}
