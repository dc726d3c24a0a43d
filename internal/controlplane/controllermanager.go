package controlplane

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/pflag"
	"k8s.io/component-base/configz"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
)

// controllerManagerFlags are the kube-controller-manager flags capstan runs
// with: every default controller, service-account credentials per
// controller, and the node lifecycle timings taken from Config so tests can
// shorten them.
func (cp *ControlPlane) controllerManagerFlags() []string {
	pki := cp.dataDir.PKIDir()
	c := cp.cfg
	flags := []string{
		"--kubeconfig=" + pki + "/controller-manager.kubeconfig",
		"--leader-elect=false",
		"--secure-port=0",
		"--controllers=*",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + pki + "/sa.key",
		"--root-ca-file=" + pki + "/ca.crt",
		"--cluster-signing-cert-file=" + pki + "/ca.crt",
		"--cluster-signing-key-file=" + pki + "/ca.key",
		"--node-monitor-period=" + c.NodeMonitorPeriod.String(),
		"--node-monitor-grace-period=" + c.NodeMonitorGracePeriod.String(),
		"--node-startup-grace-period=" + c.NodeStartupGracePeriod.String(),
		"--node-eviction-rate=" + strconv.FormatFloat(float64(c.NodeEvictionRate), 'f', -1, 32),
		"--secondary-node-eviction-rate=" + strconv.FormatFloat(float64(c.SecondaryNodeEvictionRate), 'f', -1, 32),
		"--large-cluster-size-threshold=" + strconv.Itoa(int(c.LargeClusterSizeThreshold)),
		"--unhealthy-zone-threshold=" + strconv.FormatFloat(float64(c.UnhealthyZoneThreshold), 'f', -1, 32),
		"--kube-api-qps=200",
		"--kube-api-burst=400",
		"--profiling=false",
	}
	return append(flags, c.ExtraControllerManagerFlags...)
}

// runControllerManager builds kube-controller-manager's configuration from
// its own options (the cobra command would apply the logging configuration a
// second time in this process) and runs it until ctx ends.
func (cp *ControlPlane) runControllerManager(ctx context.Context) (<-chan error, error) {
	s, err := options.NewKubeControllerManagerOptions()
	if err != nil {
		return nil, fmt.Errorf("kube-controller-manager options: %w", err)
	}
	known, disabled, aliases := app.KnownControllers(), app.ControllersDisabledByDefault(), app.ControllerAliases()
	fs := pflag.NewFlagSet("kube-controller-manager", pflag.ContinueOnError)
	for _, f := range s.Flags(known, disabled, aliases).FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(cp.controllerManagerFlags()); err != nil {
		return nil, fmt.Errorf("kube-controller-manager flags: %w", err)
	}
	if err := s.ComponentGlobalsRegistry.Set(); err != nil {
		return nil, fmt.Errorf("kube-controller-manager feature gates: %w", err)
	}
	c, err := s.Config(ctx, known, disabled, aliases)
	if err != nil {
		return nil, fmt.Errorf("kube-controller-manager configuration: %w", err)
	}
	// Its configuration is registered process-wide, and Run refuses a
	// second registration: a process that runs one cluster after another
	// (a simulation and its control run) drops the last one's first.
	configz.Delete(app.ConfigzName)
	done := make(chan error, 1)
	go func() {
		done <- app.Run(ctx, c.Complete())
		close(done)
	}()
	return done, nil
}
