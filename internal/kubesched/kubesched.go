// Package kubesched runs upstream kube-scheduler in this process, built
// from its own options as its command builds it, with the configuration
// an OpenShift scheduler profile gives it. The simulation of a cluster
// that is not capstan's schedules with it, and the scheduler benchmark
// measures capstan's scheduler against it.
package kubesched

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/component-base/configz"
	kubescheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	schedulerappconfig "k8s.io/kubernetes/cmd/kube-scheduler/app/config"
	kubescheduleroptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler"
	"sigs.k8s.io/yaml"
)

// The profiles of OpenShift's Scheduler (config.openshift.io/v1,
// spec.profile), as the cluster-kube-scheduler-operator renders them.
const (
	// LowNodeUtilization is upstream's default configuration: pods
	// spread over the least used nodes. An empty profile is this one.
	LowNodeUtilization = "LowNodeUtilization"
	// HighNodeUtilization packs pods onto the most used nodes: the
	// NodeResourcesFit score with the MostAllocated strategy, at weight
	// 5, and no NodeResourcesBalancedAllocation.
	HighNodeUtilization = "HighNodeUtilization"
	// NoScoring disables every preScore and score plugin: the first
	// feasible node wins, for the lowest latency.
	NoScoring = "NoScoring"
)

// Profiles are the profiles Config knows.
var Profiles = []string{LowNodeUtilization, HighNodeUtilization, NoScoring}

// Options say how to run the scheduler.
type Options struct {
	// Kubeconfig is the file of the identity it acts as.
	Kubeconfig string
	// Profile is an OpenShift scheduler profile ("" is
	// LowNodeUtilization).
	Profile string
	// QPS and Burst are its client's rate limit; QPS <= 0 is unlimited.
	QPS   float32
	Burst int
	// Dir is where its configuration file is written.
	Dir string
	// MaxBackoffSeconds bounds how long a pod that failed to schedule
	// waits before it is tried again (0: kube-scheduler's 10 s). Its
	// first backoff is 1 s, the least it takes.
	MaxBackoffSeconds int64
}

// Config returns the KubeSchedulerConfiguration of a profile for a
// scheduler that acts with kubeconfig, elects no leader and is limited
// to qps and burst (qps <= 0: no limit), backing a pod off for at most
// maxBackoff seconds (0: its default).
func Config(profile, kubeconfig string, qps float32, burst int, maxBackoff int64) ([]byte, error) {
	if qps <= 0 {
		qps = -1 // client-go: no rate limiter
	}
	cfg := map[string]any{
		"apiVersion": "kubescheduler.config.k8s.io/v1",
		"kind":       "KubeSchedulerConfiguration",
		"clientConnection": map[string]any{
			"kubeconfig": kubeconfig, "qps": qps, "burst": burst,
			// Protobuf, as kube-scheduler's own default.
			"contentType": "application/vnd.kubernetes.protobuf",
		},
		"leaderElection": map[string]any{"leaderElect": false},
	}
	if maxBackoff > 0 {
		cfg["podInitialBackoffSeconds"], cfg["podMaxBackoffSeconds"] = 1, maxBackoff
	}
	profileCfg := map[string]any{"schedulerName": "default-scheduler"}
	switch profile {
	case "", LowNodeUtilization:
	case HighNodeUtilization:
		profileCfg["pluginConfig"] = []any{map[string]any{"name": "NodeResourcesFit",
			"args": map[string]any{"scoringStrategy": map[string]any{"type": "MostAllocated"}}}}
		profileCfg["plugins"] = map[string]any{"score": map[string]any{
			"disabled": []any{map[string]any{"name": "NodeResourcesBalancedAllocation"}},
			"enabled":  []any{map[string]any{"name": "NodeResourcesFit", "weight": 5}},
		}}
	case NoScoring:
		all := map[string]any{"disabled": []any{map[string]any{"name": "*"}}}
		profileCfg["plugins"] = map[string]any{"preScore": all, "score": all}
	default:
		return nil, fmt.Errorf("scheduler profile %q: want one of %s", profile, strings.Join(Profiles, ", "))
	}
	cfg["profiles"] = []any{profileCfg}
	return yaml.Marshal(cfg)
}

// Scheduler is a kube-scheduler whose informers have synced.
type Scheduler struct {
	cc    *schedulerappconfig.CompletedConfig
	sched *scheduler.Scheduler
}

// Setup builds the scheduler from its configuration file, as its command
// would with --config, starts its informers and waits until they and
// its event handlers have synced. It serves no port.
func Setup(ctx context.Context, o Options) (*Scheduler, error) {
	raw, err := Config(o.Profile, o.Kubeconfig, o.QPS, o.Burst, o.MaxBackoffSeconds)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(o.Dir, "kube-scheduler-config.yaml")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		return nil, fmt.Errorf("kube-scheduler configuration: %w", err)
	}
	opts := kubescheduleroptions.NewOptions()
	fs := pflag.NewFlagSet("kube-scheduler", pflag.ContinueOnError)
	for _, f := range opts.Flags.FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse([]string{"--config=" + path, "--secure-port=0"}); err != nil {
		return nil, err
	}
	if err := opts.ComponentGlobalsRegistry.Set(); err != nil {
		return nil, err
	}
	cc, sched, err := kubescheduler.Setup(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("kube-scheduler setup: %w", err)
	}
	// Start and sync its informers here, as Run would, to know when it
	// is ready; Run then finds them started and synced.
	cc.InformerFactory.Start(ctx.Done())
	cc.InformerFactory.WaitForCacheSync(ctx.Done())
	if cc.DynInformerFactory != nil {
		cc.DynInformerFactory.Start(ctx.Done())
		cc.DynInformerFactory.WaitForCacheSync(ctx.Done())
	}
	if err := sched.WaitForHandlersSync(ctx); err != nil {
		return nil, fmt.Errorf("kube-scheduler handlers: %w", err)
	}
	return &Scheduler{cc: cc, sched: sched}, nil
}

// RateLimit is the rate limiter its client really has, and its burst.
func (s *Scheduler) RateLimit() (flowcontrol.RateLimiter, int) {
	return s.cc.Client.CoreV1().RESTClient().GetRateLimiter(), s.cc.KubeConfig.Burst
}

// configzName is the name kube-scheduler registers its configuration
// under, process-wide (cmd/kube-scheduler/app/server.go).
const configzName = "componentconfig"

// Run schedules until ctx ends. One kube-scheduler runs in a process at a
// time: Run drops the configuration the last one registered, which
// kube-scheduler's own Run would refuse to register again.
func (s *Scheduler) Run(ctx context.Context) error {
	configz.Delete(configzName)
	return kubescheduler.Run(ctx, s.cc, s.sched)
}
