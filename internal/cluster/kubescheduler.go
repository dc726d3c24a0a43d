package cluster

import (
	"context"
	"fmt"
	"os"

	"github.com/capstan-dev/capstan/internal/kubesched"
)

// KubeSchedulerOptions configure upstream kube-scheduler in a cluster.
type KubeSchedulerOptions struct {
	// Profile is an OpenShift scheduler profile (kubesched.Profiles; ""
	// is LowNodeUtilization).
	Profile string
	// MaxBackoffSeconds bounds a failed pod's backoff (0: kube-scheduler's
	// 10 s).
	MaxBackoffSeconds int64
}

// kubeSchedulerUser is the user kube-scheduler acts as, whose rights the
// API server's bootstrap policy grants (the system:kube-scheduler and
// system:volume-scheduler ClusterRoles), as on any Kubernetes cluster.
const kubeSchedulerUser = "system:kube-scheduler"

// startKubeScheduler runs kube-scheduler as kubeSchedulerUser, with its
// configuration and kubeconfig in the data dir, once its informers have
// synced.
func (c *Cluster) startKubeScheduler(ctx, runCtx context.Context) error {
	dir := c.ControlPlane.DataDir().Path("kube-scheduler")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	cfg, err := c.ControlPlane.ClientConfigFor(kubeSchedulerUser)
	if err != nil {
		return err
	}
	kubeconfig := c.ControlPlane.DataDir().Path("kube-scheduler", "kubeconfig")
	if err := c.ControlPlane.WriteKubeconfigFor(kubeconfig, kubeSchedulerUser, cfg); err != nil {
		return fmt.Errorf("its kubeconfig: %w", err)
	}
	s, err := kubesched.Setup(runCtx, kubesched.Options{Kubeconfig: kubeconfig, Profile: c.opts.KubeScheduler.Profile,
		QPS: cfg.QPS, Burst: cfg.Burst, Dir: dir, MaxBackoffSeconds: c.opts.KubeScheduler.MaxBackoffSeconds})
	if err != nil {
		return err
	}
	c.run(runCtx, "kube-scheduler", s.Run)
	return ctx.Err()
}
