package cli

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	configclient "github.com/openshift/client-go/config/clientset/versioned"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/cvo"
	"github.com/capstan-dev/capstan/internal/mco"
)

// annotationPatch is a merge patch setting (or, with value nil, removing)
// one annotation.
func annotationPatch(key string, value *string) []byte {
	raw, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: value}}})
	return raw
}

// simCVO is `capstan sim cvo stop|start`.
func simCVO(cf *clientFlags) *cobra.Command {
	c := &cobra.Command{Use: "cvo", Short: "Stop or start the cluster version operator, as scaling its Deployment does"}
	set := func(stop bool) *cobra.Command {
		use, short, verb := "start", "Start the stopped cluster version operator again, afresh (as a new pod)", "started"
		if stop {
			use, short, verb = "stop", "Stop the cluster version operator: nothing reconciles the release, and its metrics endpoint is down", "stopped"
		}
		return &cobra.Command{
			Use:   use,
			Short: short,
			Args:  cobra.NoArgs,
			RunE: func(c *cobra.Command, _ []string) error {
				_, cfg, err := cf.client()
				if err != nil {
					return err
				}
				config, err := configclient.NewForConfig(cfg)
				if err != nil {
					return err
				}
				var value *string
				if stop {
					value = new("true")
				}
				if _, err := config.ConfigV1().ClusterVersions().Patch(c.Context(), cvo.Name, types.MergePatchType,
					annotationPatch(cluster.CVOStoppedAnnotation, value), metav1.PatchOptions{}); err != nil {
					return fmt.Errorf("clusterversion/%s: %w", cvo.Name, err)
				}
				fmt.Fprintf(c.OutOrStdout(), "clusterversion/%s: cluster version operator %s\n", cvo.Name, verb)
				return nil
			},
		}
	}
	c.AddCommand(set(true), set(false))
	return c
}

// simNodeMCDFail is `capstan sim node mcd-fail NODE --at STEP`.
func simNodeMCDFail(cf *clientFlags) *cobra.Command {
	var at string
	var clear bool
	c := &cobra.Command{
		Use:   "mcd-fail NODE... (--at drain|pivot|reboot | --clear)",
		Short: "Make the machine-config-daemon of nodes fail a step of their next update until cleared",
		Long: `Make the simulated machine-config-daemon of nodes fail a step of their
updates, again at every retry: the drain (mcc_drain_err), the pivot to the new
OS image (mcd_pivot_errors_total) or the reboot (mcd_reboots_failed_total). The
node is Degraded meanwhile; --clear lets the update go on from that step.`,
		Example: `  capstan sim node mcd-fail worker-0 --at reboot
  capstan sim node mcd-fail worker-0 --clear`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			var value *string
			switch {
			case clear && at != "":
				return fmt.Errorf("--at and --clear: give one")
			case clear:
			case slices.Contains(mco.FailAtSteps, at):
				value = &at
			default:
				return fmt.Errorf("--at %q: want one of %s", at, strings.Join(mco.FailAtSteps, ", "))
			}
			client, _, err := cf.client()
			if err != nil {
				return err
			}
			for _, n := range args {
				if _, err := client.CoreV1().Nodes().Patch(c.Context(), n, types.MergePatchType,
					annotationPatch(mco.FailAtAnnotation, value), metav1.PatchOptions{}); err != nil {
					return fmt.Errorf("node/%s: %w", n, err)
				}
				if clear {
					fmt.Fprintf(c.OutOrStdout(), "node/%s: machine-config-daemon failure cleared\n", n)
				} else {
					fmt.Fprintf(c.OutOrStdout(), "node/%s: machine-config-daemon fails at %s\n", n, at)
				}
			}
			return nil
		},
	}
	c.Flags().StringVar(&at, "at", "", "the step that fails: "+strings.Join(mco.FailAtSteps, ", "))
	c.Flags().BoolVar(&clear, "clear", false, "remove the injected failure")
	return c
}
