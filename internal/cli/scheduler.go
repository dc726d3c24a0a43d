package cli

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/leader"
	"github.com/capstan-dev/capstan/internal/scheduler"
	"github.com/capstan-dev/capstan/internal/scheduler/policy"
)

func newSchedulerCommand() *cobra.Command {
	cf := &clientFlags{}
	rf := &runFlags{}
	var (
		policyFile, name string
		seed             uint64
		noPreemption     bool
	)
	c := &cobra.Command{
		Use:   "scheduler",
		Short: "Run a Policy scheduler against a cluster",
		Long: `Runs capstan's Policy scheduler: predicates filter nodes, weighted priorities
score them, the best total wins. Without --policy it uses the default policy
of the scheduling documentation; a policy file replaces it entirely. Pods
choose a scheduler by spec.schedulerName, so several run side by side. A pod
that fits nowhere preempts pods of lower priority, as kube-scheduler's
DefaultPreemption does, unless --disable-preemption.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			p, err := loadPolicy(policyFile)
			if err != nil {
				return err
			}
			client, _, err := cf.client()
			if err != nil {
				return err
			}
			s, err := scheduler.New(client, scheduler.Config{Name: name, Policy: p, Seed: seed, DisablePreemption: noPreemption})
			if err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "Scheduler %s running; Ctrl-C to stop\n", name)
			return rf.run(c, "scheduler", client, leader.Config{Namespace: metav1.NamespaceSystem, Name: name}, []prometheus.Gatherer{s.Metrics()}, s.Run)
		},
	}
	cf.addComponent(c.Flags())
	c.Flags().StringVar(&policyFile, "policy", "", "scheduler Policy file (JSON or YAML); default: the default policy")
	c.Flags().StringVar(&name, "scheduler-name", scheduler.DefaultSchedulerName, "the spec.schedulerName this scheduler serves")
	rf.add(c.Flags(), "kube-system/<scheduler-name>", ":10259")
	c.Flags().Uint64Var(&seed, "seed", 0, "seed of the random tie-breaking between equally good nodes")
	c.Flags().BoolVar(&noPreemption, "disable-preemption", false, "never evict pods of lower priority to make room for a pod that fits nowhere (kube-scheduler's disablePreemption)")
	c.AddCommand(&cobra.Command{
		Use:   "validate-policy FILE",
		Short: "Check a scheduler Policy file without running a scheduler",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			p, err := policy.Load(args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "%s: valid policy, %d predicates and %d priorities\n", args[0], len(p.Predicates), len(p.Priorities))
			return nil
		},
	})
	return c
}

// loadPolicy reads a Policy file, or returns the default policy for "".
func loadPolicy(file string) (*policy.Policy, error) {
	if file == "" {
		return policy.Default(), nil
	}
	return policy.Load(file)
}

// loadSchedulerPolicy sets --scheduler-policy on capstan up's options.
func loadSchedulerPolicy(file string, opts *cluster.Options) error {
	p, err := loadPolicy(file)
	if err != nil {
		return err
	}
	if opts.Scheduler == nil {
		if file != "" {
			return errors.New("--scheduler-policy: no scheduler runs (--bare)")
		}
		return nil
	}
	opts.Scheduler.Policy = p
	return nil
}
