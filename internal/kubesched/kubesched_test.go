package kubesched

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/klog/v2"
	kubescheduleroptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
)

// load reads a profile's configuration as kube-scheduler's --config
// does: decoded, defaulted and validated by its own code.
func load(t *testing.T, profile string) *config.KubeSchedulerProfile {
	t.Helper()
	raw, err := Config(profile, "/etc/kubeconfig", 0, 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := kubescheduleroptions.LoadConfigFromFile(klog.Background(), path)
	if err != nil {
		t.Fatalf("profile %q: %v\n%s", profile, err, raw)
	}
	if err := validation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
		t.Fatalf("profile %q: %v\n%s", profile, err, raw)
	}
	if cfg.LeaderElection.LeaderElect || cfg.ClientConnection.Kubeconfig != "/etc/kubeconfig" || cfg.ClientConnection.QPS != -1 {
		t.Errorf("profile %q: leader election %v, kubeconfig %q, QPS %g; want none, /etc/kubeconfig and no limit", profile,
			cfg.LeaderElection.LeaderElect, cfg.ClientConnection.Kubeconfig, cfg.ClientConnection.QPS)
	}
	if len(cfg.Profiles) != 1 || cfg.Profiles[0].SchedulerName != "default-scheduler" {
		t.Fatalf("profile %q: profiles %+v, want default-scheduler only", profile, cfg.Profiles)
	}
	return &cfg.Profiles[0]
}

// scores are the score plugins a profile runs, with their weights, as
// the framework expands them: the multi-point plugins, less those the
// score extension point disables ("*": all), then its own.
func scores(p *config.KubeSchedulerProfile) map[string]int32 {
	return expand(p.Plugins.MultiPoint, p.Plugins.Score)
}

func prescores(p *config.KubeSchedulerProfile) map[string]int32 {
	return expand(p.Plugins.MultiPoint, p.Plugins.PreScore)
}

func expand(multi, point config.PluginSet) map[string]int32 {
	out := map[string]int32{}
	disabled := map[string]bool{}
	for _, pl := range point.Disabled {
		disabled[pl.Name] = true
	}
	if !disabled["*"] {
		for _, pl := range multi.Enabled {
			if !disabled[pl.Name] {
				out[pl.Name] = pl.Weight
			}
		}
	}
	for _, pl := range point.Enabled {
		out[pl.Name] = pl.Weight
	}
	return out
}

func fitStrategy(t *testing.T, p *config.KubeSchedulerProfile) config.ScoringStrategyType {
	t.Helper()
	for _, pc := range p.PluginConfig {
		if pc.Name == "NodeResourcesFit" {
			return pc.Args.(*config.NodeResourcesFitArgs).ScoringStrategy.Type
		}
	}
	t.Fatal("no NodeResourcesFit arguments")
	return ""
}

func TestEachProfileIsWhatOpenShiftRenders(t *testing.T) {
	low := load(t, "")
	if s := scores(low); s["NodeResourcesBalancedAllocation"] == 0 || s["NodeResourcesFit"] != 1 || s["PodTopologySpread"] != 2 {
		t.Errorf("the default profile scores with %v; want upstream's defaults", s)
	}
	if got := fitStrategy(t, low); got != config.LeastAllocated {
		t.Errorf("the default profile's NodeResourcesFit strategy is %s, want LeastAllocated", got)
	}
	if s := scores(load(t, LowNodeUtilization)); s["NodeResourcesBalancedAllocation"] == 0 || s["NodeResourcesFit"] != 1 {
		t.Errorf("LowNodeUtilization scores with %v; want upstream's defaults", s)
	}

	high := load(t, HighNodeUtilization)
	if s := scores(high); s["NodeResourcesFit"] != 5 || s["NodeResourcesBalancedAllocation"] != 0 {
		t.Errorf("HighNodeUtilization scores with %v; want NodeResourcesFit at 5 and no NodeResourcesBalancedAllocation", s)
	}
	if got := fitStrategy(t, high); got != config.MostAllocated {
		t.Errorf("HighNodeUtilization's NodeResourcesFit strategy is %s, want MostAllocated", got)
	}

	none := load(t, NoScoring)
	if s, pre := scores(none), prescores(none); len(s) != 0 || len(pre) != 0 {
		t.Errorf("NoScoring scores with %v and prescores with %v; want neither", s, pre)
	}
	f := expand(none.Plugins.MultiPoint, none.Plugins.Filter)
	if _, fit := f["NodeResourcesFit"]; !fit || len(f) < 5 {
		t.Errorf("NoScoring filters with %v; want upstream's filters", f)
	}
}

func TestAnUnknownProfileIsRefusedNamingTheKnownOnes(t *testing.T) {
	_, err := Config("Packed", "/etc/kubeconfig", 0, 100, 0)
	if err == nil || !strings.Contains(err.Error(), `scheduler profile "Packed": want one of LowNodeUtilization, HighNodeUtilization, NoScoring`) {
		t.Errorf("err %v", err)
	}
}

func TestTheBackoffIsBoundedWhenAsked(t *testing.T) {
	for max, want := range map[int64][]string{0: nil, 2: {"podInitialBackoffSeconds: 1", "podMaxBackoffSeconds: 2"}} {
		raw, err := Config("", "/etc/kubeconfig", 0, 100, max)
		if err != nil {
			t.Fatal(err)
		}
		if max == 0 && strings.Contains(string(raw), "Backoff") {
			t.Errorf("without a bound, the configuration sets a backoff:\n%s", raw)
		}
		for _, w := range want {
			if !strings.Contains(string(raw), w) {
				t.Errorf("bounded to %d s, the configuration lacks %q:\n%s", max, w, raw)
			}
		}
	}
}
