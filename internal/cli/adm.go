package cli

import (
	"context"
	"fmt"
	"sort"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/capstan-dev/capstan/internal/taints"
)

func newAdmCommand() *cobra.Command {
	c := &cobra.Command{Use: "adm", Short: "Administrative commands, as oc adm has them"}
	c.AddCommand(newAdmTaintCommand(), newAdmReleaseCommand(), newAdmUpgradeCommand(), newAdmImageCommand(), newAdmAuditCommand())
	return c
}

func newAdmTaintCommand() *cobra.Command {
	cf := &clientFlags{}
	var (
		overwrite, all bool
		selector       string
	)
	c := &cobra.Command{
		Use:   "taint nodes (NODE | -l SELECTOR | --all) KEY[=VALUE]:EFFECT ... | KEY- | KEY:EFFECT-",
		Short: "Add or remove taints on nodes, as oc adm taint nodes does",
		Example: `  capstan adm taint nodes node1 key1=value1:NoSchedule
  capstan adm taint nodes node1 key1=value1:NoExecute key2=value2:NoSchedule
  capstan adm taint nodes node1 key1:NoExecute-      # remove one effect
  capstan adm taint nodes node1 key1-                # remove every key1 taint
  capstan adm taint nodes -l disktype=ssd disktype=ssd:PreferNoSchedule --overwrite`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			if args[0] != "nodes" && args[0] != "node" && args[0] != "no" {
				return fmt.Errorf("only nodes can be tainted, not %q", args[0])
			}
			args = args[1:]
			var names []string
			if selector == "" && !all {
				if len(args) < 2 {
					return fmt.Errorf("give a node name, -l SELECTOR or --all, then at least one taint")
				}
				names, args = []string{args[0]}, args[1:]
			}
			specs, err := taints.Parse(args)
			if err != nil {
				return err
			}
			var sel labels.Selector
			if selector != "" {
				if all {
					return fmt.Errorf("--all and -l cannot be used together")
				}
				if sel, err = labels.Parse(selector); err != nil {
					return fmt.Errorf("selector %q: %w", selector, err)
				}
			}
			client, _, err := cf.client()
			if err != nil {
				return err
			}
			ctx := c.Context()
			if names == nil {
				list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selectorString(sel)})
				if err != nil {
					return err
				}
				for _, n := range list.Items {
					names = append(names, n.Name)
				}
				sort.Strings(names)
				if len(names) == 0 {
					return fmt.Errorf("no nodes match")
				}
			}
			for _, name := range names {
				op, err := taintNode(ctx, client, name, specs, overwrite)
				if err != nil {
					return err
				}
				fmt.Fprintf(c.OutOrStdout(), "node/%s %s\n", name, op)
			}
			return nil
		},
	}
	cf.add(c.Flags())
	c.Flags().BoolVar(&overwrite, "overwrite", false, "replace the value of a taint whose key and effect the node already has")
	c.Flags().BoolVar(&all, "all", false, "taint every node")
	c.Flags().StringVarP(&selector, "selector", "l", "", "taint the nodes matching this label selector")
	return c
}

func selectorString(s labels.Selector) string {
	if s == nil {
		return ""
	}
	return s.String()
}

// taintNode applies the taints with retries on conflicting updates.
func taintNode(ctx context.Context, client kubernetes.Interface, name string, specs []taints.Spec, overwrite bool) (string, error) {
	var op string
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("nodes %q not found", name)
		}
		if err != nil {
			return err
		}
		var newTaints []corev1.Taint
		op, newTaints, err = taints.Apply(node, specs, overwrite)
		if err != nil {
			return err
		}
		node.Spec.Taints = newTaints
		_, err = client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	})
	return op, err
}
