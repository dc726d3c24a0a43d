package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/capstan-dev/capstan/internal/etcd"
	"github.com/capstan-dev/capstan/internal/sim"
	"github.com/capstan-dev/capstan/internal/taints"
)

func newSimCommand() *cobra.Command {
	cf := &clientFlags{}
	var bootDelay, terminateDelay time.Duration
	c := &cobra.Command{
		Use:   "sim",
		Short: "Run the simulated cloud and kubelets against a cluster, or inject faults",
		Long: `Without a subcommand, runs the simulated kubelets of every instance of the
simulated cloud against the cluster of --kubeconfig (capstan up runs the same
thing in-process). The subcommands inject faults and add or remove nodes;
they work against any cluster a simulator serves.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			client, _, err := cf.client()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			cloud := sim.NewAPICloud(client, sim.CloudOptions{BootDelay: bootDelay, TerminateDelay: terminateDelay})
			if err := cloud.PublishSettings(ctx); err != nil {
				return err
			}
			fmt.Fprintln(c.OutOrStdout(), "Simulating the kubelets of the capstan-sim cloud; Ctrl-C to stop")
			return sim.New(client, sim.Options{Cloud: cloud}).Run(ctx)
		},
	}
	cf.add(c.PersistentFlags())
	c.Flags().DurationVar(&bootDelay, "boot-delay", 0, "how long new instances take to boot")
	c.Flags().DurationVar(&terminateDelay, "terminate-delay", 0, "how long deleted instances take to disappear")
	node := &cobra.Command{Use: "node", Short: "Inject faults into simulated nodes, add or remove them"}
	node.AddCommand(simNodeStop(cf), simNodeStart(cf), simNodeReboot(cf), simNodeSetCondition(cf), simNodeAdd(cf), simNodeDelete(cf), simNodeList(cf), simNodeMCDFail(cf))
	zone := &cobra.Command{Use: "zone", Short: "Run a zone of the simulated cloud out of capacity, or restore it"}
	zone.AddCommand(simZoneSet(cf, true), simZoneSet(cf, false), simZoneList(cf))
	c.AddCommand(node, zone, simCVO(cf))
	return c
}

// simZoneSet is `capstan sim zone exhaust` (exhaust) or `restore`.
func simZoneSet(cf *clientFlags, exhaust bool) *cobra.Command {
	use, short, verb, f := "restore ZONE...", "Let zones launch instances again", "restored", sim.RestoreZone
	if exhaust {
		use, short, verb, f = "exhaust ZONE...",
			"Run zones out of capacity: every new instance in them is refused (InsufficientInstanceCapacity) and its machine goes Failed",
			"exhausted", sim.ExhaustZone
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return forEach(c, cf, "zone", args, verb, f)
		},
	}
}

func simZoneList(cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the zones: the default ones, those of instances and the exhausted ones, with their instances",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			client, _, err := cf.client()
			if err != nil {
				return err
			}
			insts, err := sim.NewAPICloud(client, sim.CloudOptions{}).ListInstances(c.Context())
			if err != nil {
				return err
			}
			exhausted, err := sim.ExhaustedZones(c.Context(), client)
			if err != nil {
				return err
			}
			count := map[string]int{}
			for _, z := range append(slices.Clone(sim.DefaultZones), exhausted...) {
				count[z] += 0
			}
			for _, inst := range insts {
				count[inst.Spec.Zone]++
			}
			tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 8, 3, ' ', 0)
			fmt.Fprintln(tw, "ZONE\tINSTANCES\tCAPACITY")
			for _, z := range slices.Sorted(maps.Keys(count)) {
				capacity := "available"
				if slices.Contains(exhausted, z) {
					capacity = "exhausted"
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\n", z, count[z], capacity)
			}
			return tw.Flush()
		},
	}
}

func simNodeStop(cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "stop NODE...",
		Short: "Stop the kubelet of nodes: no more heartbeats, the node lifecycle controller marks them unreachable",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return forEachNode(c, cf, args, "stopped", sim.StopNode)
		},
	}
}

func simNodeStart(cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "start NODE...",
		Short: "Restart the kubelet of stopped nodes",
		Long: `Restart the kubelet of stopped nodes.

A control-plane machine can be started while the API is unavailable (two
of three stopped lose etcd's quorum): the request then goes through the
cluster's data dir (--data-dir), as an administrator would turn to the
cloud console, and the node is started once the API is back.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			client, _, err := cf.client()
			if err != nil {
				return err
			}
			for _, n := range args {
				ctx, cancel := context.WithTimeout(c.Context(), 10*time.Second)
				err := sim.StartNode(ctx, client, n)
				cancel()
				if err != nil && apiUnavailable(err) {
					if perr := etcd.RequestPowerOn(cf.dataDir, n); perr != nil {
						return fmt.Errorf("%v; %w", err, perr)
					}
					fmt.Fprintf(c.OutOrStdout(), "node/%s started through %s (the API is unavailable)\n", n, cf.dataDir)
					continue
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(c.OutOrStdout(), "node/%s started\n", n)
			}
			return nil
		},
	}
}

// apiUnavailable: the API server did not answer, or answered that it
// cannot serve (no etcd quorum behind it).
func apiUnavailable(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) || apierrors.IsTooManyRequests(err) ||
		strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "context deadline exceeded")
}

func simNodeReboot(cf *clientFlags) *cobra.Command {
	var down time.Duration
	c := &cobra.Command{
		Use:   "reboot NODE...",
		Short: "Reboot the machines of nodes: NotReady while down, then up in a new boot, the containers of their pods restarted",
		Example: `  capstan sim node reboot worker-0
  capstan sim node reboot worker-0 worker-1 --down 30s`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if down < 0 {
				return fmt.Errorf("--down %s must not be negative", down)
			}
			client, _, err := cf.client()
			if err != nil {
				return err
			}
			for _, n := range args {
				if err := sim.StartReboot(c.Context(), client, n); err != nil {
					return err
				}
			}
			select {
			case <-c.Context().Done():
				return c.Context().Err()
			case <-time.After(down):
			}
			for _, n := range args {
				if err := sim.FinishReboot(c.Context(), client, n); err != nil {
					return err
				}
				fmt.Fprintf(c.OutOrStdout(), "node/%s rebooted\n", n)
			}
			return nil
		},
	}
	c.Flags().DurationVar(&down, "down", 5*time.Second, "how long the machines stay down")
	return c
}

func forEachNode(c *cobra.Command, cf *clientFlags, names []string, verb string, f func(context.Context, kubernetes.Interface, string) error) error {
	return forEach(c, cf, "node", names, verb, f)
}

// forEach does f to each named object of a kind, saying "kind/name verb"
// of each, and stops at the first error.
func forEach(c *cobra.Command, cf *clientFlags, kind string, names []string, verb string, f func(context.Context, kubernetes.Interface, string) error) error {
	client, _, err := cf.client()
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := f(c.Context(), client, n); err != nil {
			return err
		}
		fmt.Fprintf(c.OutOrStdout(), "%s/%s %s\n", kind, n, verb)
	}
	return nil
}

func simNodeSetCondition(cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "set-condition NODE TYPE=STATUS...",
		Short: "Make a node's kubelet report a condition (Ready, MemoryPressure, DiskPressure, PIDPressure, NetworkUnavailable)",
		Example: `  capstan sim node set-condition worker-0 MemoryPressure=True
  capstan sim node set-condition worker-0 MemoryPressure=False   # back to healthy`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			type cond struct {
				t corev1.NodeConditionType
				s corev1.ConditionStatus
			}
			var conds []cond
			for _, a := range args[1:] {
				t, s, err := sim.ParseCondition(a)
				if err != nil {
					return err
				}
				conds = append(conds, cond{t, s})
			}
			client, _, err := cf.client()
			if err != nil {
				return err
			}
			for _, cd := range conds {
				if err := sim.SetCondition(c.Context(), client, args[0], cd.t, cd.s); err != nil {
					return err
				}
			}
			fmt.Fprintf(c.OutOrStdout(), "node/%s condition set\n", args[0])
			return nil
		},
	}
}

func simNodeAdd(cf *clientFlags) *cobra.Command {
	var (
		name, cpu, memory, zone, region, role, instanceType string
		pods, gpu                                           int64
		count                                               int
		labels, taints, extended                            []string
	)
	c := &cobra.Command{
		Use:     "add",
		Short:   "Launch simulated instances that register as nodes",
		Example: `  capstan sim node add --cpu 8 --memory 32Gi --zone z1 --gpu 2 --labels disktype=ssd --taints dedicated=gpu:NoSchedule`,
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			spec := sim.InstanceSpec{Name: name, Zone: zone, Region: region, Role: role, InstanceType: instanceType, Pods: pods, GPU: gpu}
			var err error
			if spec.CPU, err = resource.ParseQuantity(cpu); err != nil {
				return fmt.Errorf("--cpu %q: %w", cpu, err)
			}
			if spec.Memory, err = resource.ParseQuantity(memory); err != nil {
				return fmt.Errorf("--memory %q: %w", memory, err)
			}
			if spec.Labels, err = parseLabels(labels); err != nil {
				return err
			}
			if spec.Taints, err = parseTaints(taints); err != nil {
				return err
			}
			if spec.ExtendedResources, err = parseResources(extended); err != nil {
				return err
			}
			if count < 1 {
				return fmt.Errorf("--count must be at least 1, got %d", count)
			}
			if count > 1 && name != "" {
				return fmt.Errorf("--name cannot be combined with --count %d", count)
			}
			if err := spec.Validate(); err != nil {
				return err
			}
			client, _, err := cf.client()
			if err != nil {
				return err
			}
			cloud := sim.NewAPICloud(client, sim.CloudOptions{})
			for i := 0; i < count; i++ {
				inst, err := cloud.CreateInstance(c.Context(), spec)
				if err != nil {
					return err
				}
				fmt.Fprintf(c.OutOrStdout(), "instance/%s created (%s, zone %s)\n", inst.Name(), inst.Spec.InstanceType, inst.Spec.Zone)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&name, "name", "", "instance and node name (generated when empty)")
	f.StringVar(&cpu, "cpu", "4", "CPU capacity")
	f.StringVar(&memory, "memory", "16Gi", "memory capacity")
	f.Int64Var(&pods, "pods", 250, "pod capacity")
	f.Int64Var(&gpu, "gpu", 0, "nvidia.com/gpu capacity")
	f.StringSliceVar(&extended, "resource", nil, "extended resource NAME=QUANTITY (repeatable)")
	f.StringVar(&zone, "zone", sim.DefaultZones[0], "topology.kubernetes.io/zone")
	f.StringVar(&region, "region", sim.DefaultRegion, "topology.kubernetes.io/region")
	f.StringVar(&role, "role", "worker", "master or worker")
	f.StringVar(&instanceType, "instance-type", "", "node.kubernetes.io/instance-type (derived from the size when empty)")
	f.StringSliceVar(&labels, "labels", nil, "node labels KEY=VALUE (comma-separated or repeated)")
	f.StringSliceVar(&taints, "taints", nil, "node taints KEY[=VALUE]:EFFECT (comma-separated or repeated)")
	f.IntVar(&count, "count", 1, "how many instances to launch")
	return c
}

func simNodeDelete(cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "delete NODE...",
		Short: "Terminate the instances behind nodes and delete the nodes, as a cloud node controller would",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			client, _, err := cf.client()
			if err != nil {
				return err
			}
			cloud := sim.NewAPICloud(client, sim.CloudOptions{})
			for _, n := range args {
				if _, err := cloud.GetInstance(c.Context(), n); err != nil {
					return fmt.Errorf("instance %s: %w", n, err)
				}
				if err := cloud.DeleteInstance(c.Context(), n); err != nil {
					return err
				}
				if err := client.CoreV1().Nodes().Delete(c.Context(), n, metav1.DeleteOptions{}); err != nil && !strings.Contains(err.Error(), "not found") {
					return fmt.Errorf("deleting node %s: %w", n, err)
				}
				fmt.Fprintf(c.OutOrStdout(), "instance/%s deleted\n", n)
			}
			return nil
		},
	}
}

func simNodeList(cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the simulated cloud's instances and their injected faults",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			client, _, err := cf.client()
			if err != nil {
				return err
			}
			insts, err := sim.NewAPICloud(client, sim.CloudOptions{}).ListInstances(c.Context())
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 8, 3, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSTATE\tROLE\tZONE\tTYPE\tIP\tFAULTS")
			now := time.Now()
			for _, inst := range insts {
				faults := "-"
				if node, err := client.CoreV1().Nodes().Get(c.Context(), inst.Name(), metav1.GetOptions{}); err == nil {
					faults = describeFaults(node)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", inst.Name(), inst.State(now), inst.Spec.Role, inst.Spec.Zone, inst.Spec.InstanceType, inst.InternalIP, faults)
			}
			return tw.Flush()
		},
	}
}

func describeFaults(node *corev1.Node) string {
	var parts []string
	if node.Annotations[sim.StoppedAnnotation] == "true" {
		parts = append(parts, "kubelet-stopped")
	}
	for t, s := range sim.InjectedConditions(node) {
		parts = append(parts, string(t)+"="+string(s))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ",")
}

func parseLabels(items []string) (map[string]string, error) {
	out := map[string]string{}
	for _, it := range items {
		k, v, ok := strings.Cut(it, "=")
		if !ok {
			return nil, fmt.Errorf("label %q is not KEY=VALUE", it)
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, fmt.Errorf("label %q: key %s", it, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return nil, fmt.Errorf("label %q: value %s", it, strings.Join(errs, "; "))
		}
		out[k] = v
	}
	return out, nil
}

func parseTaints(items []string) ([]corev1.Taint, error) {
	if len(items) == 0 {
		return nil, nil
	}
	specs, err := taints.Parse(items)
	if err != nil {
		return nil, err
	}
	out := make([]corev1.Taint, 0, len(specs))
	for _, s := range specs {
		if s.Remove {
			return nil, fmt.Errorf("taint %q: a new node has no taint to remove", s.Arg)
		}
		out = append(out, s.Taint)
	}
	return out, nil
}

func parseResources(items []string) (map[corev1.ResourceName]resource.Quantity, error) {
	if len(items) == 0 {
		return nil, nil
	}
	out := map[corev1.ResourceName]resource.Quantity{}
	for _, it := range items {
		k, v, ok := strings.Cut(it, "=")
		if !ok {
			return nil, fmt.Errorf("resource %q is not NAME=QUANTITY", it)
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("resource %q: %w", it, err)
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 || !strings.Contains(k, "/") {
			return nil, fmt.Errorf("resource %q: name must be a domain-prefixed name like example.com/foo", it)
		}
		out[corev1.ResourceName(k)] = q
	}
	return out, nil
}
