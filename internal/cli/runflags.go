package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"

	"github.com/capstan-dev/capstan/internal/component"
	"github.com/capstan-dev/capstan/internal/leader"
)

// runFlags are the flags every standalone component shares: leader
// election on its Lease (kube-scheduler's flag names and defaults) and
// where its health and metrics endpoints are.
type runFlags struct {
	leaderElect                               bool
	leaseDuration, renewDeadline, retryPeriod time.Duration
	healthAddress                             string
}

func (f *runFlags) add(fs *pflag.FlagSet, lease, healthAddress string) {
	fs.BoolVar(&f.leaderElect, "leader-elect", false, "act only while holding the Lease "+lease+"; other replicas stand by")
	fs.DurationVar(&f.leaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long a stand-by waits after the leader's last renewal before taking the lease")
	fs.DurationVar(&f.renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long the leader keeps trying to renew before it stops acting")
	fs.DurationVar(&f.retryPeriod, "leader-elect-retry-period", 2*time.Second, "how often replicas try to take or renew the lease")
	fs.StringVar(&f.healthAddress, "health-address", healthAddress, "address of /healthz, /readyz and /metrics; empty: none")
}

// addHealth adds only --health-address, for a component every replica
// of which serves (a server, not a controller): no lease.
func (f *runFlags) addHealth(fs *pflag.FlagSet, healthAddress string) {
	fs.StringVar(&f.healthAddress, "health-address", healthAddress, "address of /healthz, /readyz and /metrics; empty: none")
}

func (f *runFlags) validate() error {
	if !f.leaderElect {
		return nil
	}
	if f.retryPeriod <= 0 || f.renewDeadline <= f.retryPeriod || f.leaseDuration <= f.renewDeadline {
		return fmt.Errorf("leader election needs 0 < --leader-elect-retry-period (%s) < --leader-elect-renew-deadline (%s) < --leader-elect-lease-duration (%s)",
			f.retryPeriod, f.renewDeadline, f.leaseDuration)
	}
	return nil
}

// run runs work as the component name until SIGINT or SIGTERM.
func (f *runFlags) run(c *cobra.Command, name string, client kubernetes.Interface, lease leader.Config, gatherers []prometheus.Gatherer, work func(context.Context) error) error {
	if err := f.validate(); err != nil {
		return err
	}
	lease.LeaseDuration, lease.RenewDeadline, lease.RetryPeriod = f.leaseDuration, f.renewDeadline, f.retryPeriod
	ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return component.Run(ctx, component.Options{Name: name, Client: client, LeaderElect: f.leaderElect, Lease: lease,
		HealthAddress: f.healthAddress, Gatherers: gatherers, Out: c.OutOrStdout()}, work)
}
