package autoscaler

import (
	"os"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	autoscalingv1 "github.com/capstan-dev/capstan/internal/autoscaler/apis/v1"
)

// chapterClusterAutoscaler is the chapter's ClusterAutoscaler (4.7.1), as
// the documentation prints it; the e2e tests apply the same file.
func chapterClusterAutoscaler(t *testing.T) []byte {
	raw, err := os.ReadFile("testdata/chapter-clusterautoscaler.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestConfigFromChapterExample(t *testing.T) {
	ca := &autoscalingv1.ClusterAutoscaler{}
	if err := yaml.UnmarshalStrict(chapterClusterAutoscaler(t), ca); err != nil {
		t.Fatal(err)
	}
	c, err := ConfigFrom(ca)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxNodesTotal != 24 || c.Cores != (Range{8, 128}) || c.MemoryGiB != (Range{4, 256}) {
		t.Errorf("limits: %d nodes, cores %v, memory %v", c.MaxNodesTotal, c.Cores, c.MemoryGiB)
	}
	if len(c.GPUs) != 2 || c.GPUs[0] != (GPURange{"nvidia.com/gpu", 0, 16}) || c.GPUs[1] != (GPURange{"amd.com/gpu", 0, 4}) {
		t.Errorf("gpus: %+v", c.GPUs)
	}
	if !c.ScaleDownEnabled || c.DelayAfterAdd != 10*time.Minute || c.DelayAfterDelete != 5*time.Minute ||
		c.DelayAfterFailure != 30*time.Second || c.UnneededTime != 5*time.Minute {
		t.Errorf("scale-down: %+v", c)
	}
	if c.PriorityCutoff != -10 || c.UtilizationThreshold != 0.5 || c.MaxNodeProvisionTime != 15*time.Minute ||
		!c.SkipNodesWithLocalStorage || strings.Join(c.Expanders, ",") != "least-waste" {
		t.Errorf("defaults not kept: %+v", c)
	}
}

func TestConfigFromRefusesWhatTheAPICannotCheck(t *testing.T) {
	for name, tc := range map[string]struct {
		spec string
		want string
	}{
		"duration overflow":   {`{"scaleDown":{"enabled":true,"unneededTime":"99999999999h"}}`, "spec.scaleDown.unneededTime"},
		"threshold of 1":      {`{"scaleDown":{"enabled":true,"utilizationThreshold":"1.0"}}`, "spec.scaleDown.utilizationThreshold"},
		"provision time":      {`{"maxNodeProvisionTime":"soon"}`, "spec.maxNodeProvisionTime"},
		"unknown expander":    {`{"expanders":["Price"]}`, `unknown expander "Price"`},
		"cores min above max": {`{"resourceLimits":{"cores":{"min":9,"max":8}}}`, "spec.resourceLimits.cores"},
	} {
		t.Run(name, func(t *testing.T) {
			ca := &autoscalingv1.ClusterAutoscaler{}
			if err := yaml.UnmarshalStrict([]byte(`{"spec":`+tc.spec+`}`), ca); err != nil {
				t.Fatal(err)
			}
			_, err := ConfigFrom(ca)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %s", err, tc.want)
			}
		})
	}
}

func TestConfigFromEmptySpecIsUpstreamDefaults(t *testing.T) {
	c, err := ConfigFrom(&autoscalingv1.ClusterAutoscaler{})
	if err != nil {
		t.Fatal(err)
	}
	d := DefaultConfig()
	if c.UnneededTime != d.UnneededTime || c.DelayAfterDelete != 10*time.Second || c.Cores.Max != 320000 || !c.ScaleDownEnabled {
		t.Errorf("empty spec gave %+v", c)
	}
}
