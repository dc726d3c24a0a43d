package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/capstan-dev/capstan/internal/leader"
	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/machine/hooks"
)

// hookFlags choose and configure example hook controllers.
type hookFlags struct {
	selector string
	delay    time.Duration
}

func (f *hookFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.selector, "hook-selector", "", "label selector of the machines that get the hooks (default: all)")
	fs.DurationVar(&f.delay, "log-flush-delay", 30*time.Second, "how long log-flush-delay holds a drained machine")
}

func (f *hookFlags) build(names []string) ([]*hooks.Hook, error) {
	cfg := hooks.ExampleConfig{LogFlushDelay: f.delay}
	if f.selector != "" {
		sel, err := labels.Parse(f.selector)
		if err != nil {
			return nil, fmt.Errorf("--hook-selector %q: %w", f.selector, err)
		}
		cfg.Selector = sel
	}
	if f.delay < 0 {
		return nil, fmt.Errorf("--log-flush-delay %s: must not be negative", f.delay)
	}
	var out []*hooks.Hook
	for _, n := range names {
		h, err := hooks.Example(strings.TrimSpace(n), cfg)
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

func newHooksCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "hooks",
		Short: "Hook-implementing controllers for machine deletion lifecycle hooks",
	}
	cf := &clientFlags{}
	rf := &runFlags{}
	hf := &hookFlags{}
	opts := hooks.Options{Namespace: machine.Namespace}
	run := &cobra.Command{
		Use:   "run NAME...",
		Short: "Run example hook controllers: " + strings.Join(hooks.ExampleNames(), ", "),
		Long: `Runs the lifecycle-hooks chapter's example hook-implementing controllers:

  proactive-replacement  preDrain ProactiveReplacement: hold the drain until the
                         machine's MachineSet has all its replicas Running and
                         Ready besides it
  log-flush-delay        preTerminate LogFlushDelay: keep a drained machine's
                         instance for --log-flush-delay
  storage-detach         preTerminate WaitForStorageDetach: keep the instance
                         until no VolumeAttachment references the node

Each adds its hook to the machines --hook-selector selects, and removes it
from a deleted machine once its condition holds.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			hs, err := hf.build(args)
			if err != nil {
				return err
			}
			cfg, err := cf.restConfig()
			if err != nil {
				return err
			}
			mgr, err := hooks.NewManager(cfg, opts, hs...)
			if err != nil {
				return err
			}
			client, _, err := cf.client()
			if err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "Hook controllers %s running on namespace %s; Ctrl-C to stop\n", strings.Join(args, ", "), opts.Namespace)
			return rf.run(c, "hooks", client, leader.Config{Namespace: opts.Namespace, Name: hooks.LeaseName(hs)}, nil, mgr.Start)
		},
	}
	cf.addComponent(run.Flags())
	hf.add(run.Flags())
	run.Flags().StringVar(&opts.Namespace, "namespace", opts.Namespace, "namespace of the machines")
	rf.add(run.Flags(), "NAMESPACE/capstan-hook-<first hook>", ":8442")
	c.AddCommand(run)
	return c
}
