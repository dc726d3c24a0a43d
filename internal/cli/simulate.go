package cli

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/dynamic"

	"github.com/capstan-dev/capstan/internal/atomicfile"
	"github.com/capstan-dev/capstan/internal/simulate"
)

func newSimulateCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "simulate",
		Short: "What-if: snapshots of a cluster, to replay a change on",
	}
	c.AddCommand(newSimulateSnapshotCommand())
	return c
}

func newSimulateSnapshotCommand() *cobra.Command {
	var cf clientFlags
	var out string
	c := &cobra.Command{
		Use:   "snapshot -o FILE",
		Short: "Read a cluster, with list only, into a snapshot file",
		Long: `Lists, page by page, what the scheduler, the autoscaler, drains, the MCO
and the CVO decide on: namespaces, nodes, pods, persistent volumes and
claims, storage classes, priority classes, PodDisruptionBudgets,
DaemonSets, Deployments, ReplicaSets, StatefulSets, Jobs, and the
OpenShift Machines, MachineSets, ControlPlaneMachineSets,
MachineAutoscalers, ClusterAutoscalers, MachineConfigPools,
MachineConfigs, ClusterVersions and ClusterOperators. A resource the
cluster does not serve (a plain Kubernetes cluster has none of the
OpenShift ones) is left out. No Secret and no ConfigMap is read; objects
are kept whole but for their managedFields. The file is written only once
every list has succeeded.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if out == "" {
				return errors.New("-o FILE: say where to write the snapshot")
			}
			cfg, err := cf.restConfig()
			if err != nil {
				return err
			}
			client, err := dynamic.NewForConfig(cfg)
			if err != nil {
				return err
			}
			snap, err := simulate.Take(c.Context(), client, time.Now())
			if err != nil {
				return fmt.Errorf("snapshot of %s: %w", cfg.Host, err)
			}
			var b bytes.Buffer
			if err := snap.Write(&b); err != nil {
				return err
			}
			if err := atomicfile.Write(out, b.Bytes(), 0o600); err != nil {
				return err
			}
			var served, objects int
			for _, objs := range snap.Objects {
				served++
				objects += len(objs)
			}
			fmt.Fprintf(c.OutOrStdout(), "Snapshot of %s written to %s: %d objects of %d resources (%d not served by the cluster)\n",
				cfg.Host, out, objects, served, len(simulate.Resources)-served)
			return nil
		},
	}
	cf.add(c.Flags())
	c.Flags().StringVarP(&out, "output", "o", "", "file to write the snapshot to (JSON; mode 0600)")
	return c
}
