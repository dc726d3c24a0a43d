package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/capstan-dev/capstan/internal/autoscaler"
	"github.com/capstan-dev/capstan/internal/explain"
	"github.com/capstan-dev/capstan/internal/scheduler/algorithm"
	"github.com/capstan-dev/capstan/internal/scheduler/policy"
)

func newExplainCommand() *cobra.Command {
	c := &cobra.Command{Use: "explain", Short: "Explain decisions capstan makes"}
	cf := &clientFlags{}
	var policyFile string
	pod := &cobra.Command{
		Use:   "pod NAMESPACE/NAME",
		Short: "Show, node by node, why the scheduler places a pod where it does (or nowhere)",
		Long: `Runs the scheduler's own decision code on the cluster as it is now, with every
predicate evaluated on every node, and prints each node's verdict, each
priority's score (times its weight) and the totals. A scheduled pod is
evaluated as if it were not yet on its node.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			ns, name, ok := strings.Cut(args[0], "/")
			if !ok || ns == "" || name == "" {
				return fmt.Errorf("pod %q is not NAMESPACE/NAME", args[0])
			}
			in, err := newExplainInputs(cf, policyFile)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(c.Context(), time.Minute)
			defer cancel()
			pending, err := explainPod(ctx, c.OutOrStdout(), in.client, in.policy, ns, name)
			if err != nil || !pending {
				return err
			}
			return explainPodScaleUp(ctx, c.OutOrStdout(), in.cfg, in.client, in.policy, ns, name)
		},
	}
	cf.add(pod.Flags())
	pod.Flags().StringVar(&policyFile, "policy", "", "scheduler Policy file to evaluate with (default: the default policy)")
	c.AddCommand(pod, newExplainNodeCommand())
	return c
}

func newExplainNodeCommand() *cobra.Command {
	cf := &clientFlags{}
	var policyFile string
	c := &cobra.Command{
		Use:   "node NAME",
		Short: "Show why the cluster autoscaler removes a node or keeps it",
		Long: `Runs the cluster autoscaler's scale-down decision on the cluster as it is
now and prints what it concludes of the node: its utilization, whether it is
unneeded and since when, the pods that would move, or why it stays.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			in, err := newExplainInputs(cf, policyFile)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(c.Context(), time.Minute)
			defer cancel()
			return explainNode(ctx, c.OutOrStdout(), in.cfg, in.client, in.policy, args[0])
		},
	}
	cf.add(c.Flags())
	c.Flags().StringVar(&policyFile, "policy", "", "scheduler Policy file the cluster's scheduler runs (default: the default policy)")
	return c
}

// explainInputs are what an explanation reads with: the Policy and the
// cluster's clients.
type explainInputs struct {
	policy *policy.Policy
	cfg    *rest.Config
	client kubernetes.Interface
}

func newExplainInputs(cf *clientFlags, policyFile string) (*explainInputs, error) {
	p, err := loadPolicy(policyFile)
	if err != nil {
		return nil, err
	}
	cfg, err := cf.restConfig()
	if err != nil {
		return nil, err
	}
	client, _, err := cf.client()
	if err != nil {
		return nil, err
	}
	return &explainInputs{policy: p, cfg: cfg, client: client}, nil
}

// explainPodScaleUp prints the autoscaler's view of a pending pod.
func explainPodScaleUp(ctx context.Context, out io.Writer, cfg *rest.Config, client kubernetes.Interface, p *policy.Policy, ns, name string) error {
	e, err := explain.Autoscaler(ctx, cfg, client, p)
	if err != nil {
		return err
	}
	fmt.Fprintln(out)
	if !e.Configured {
		fmt.Fprintln(out, "Autoscaler: not configured (no ClusterAutoscaler default)")
		return nil
	}
	if v := explain.ScaleUp(e, ns, name); v != nil {
		fmt.Fprintf(out, "Autoscaler: %s\n", v.Message)
		ids := make([]string, 0, len(v.Groups))
		for id := range v.Groups {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			fmt.Fprintf(out, "  %s: %s\n", id, v.Groups[id])
		}
		return nil
	}
	fmt.Fprintln(out, "Autoscaler: "+notCounted(ctx, client, ns, name))
	return nil
}

func explainNode(ctx context.Context, out io.Writer, cfg *rest.Config, client kubernetes.Interface, p *policy.Policy, name string) error {
	node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("node %s: %w", name, err)
	}
	e, err := explain.Autoscaler(ctx, cfg, client, p)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Node %s\n", name)
	switch {
	case !e.Configured:
		fmt.Fprintln(out, "Autoscaler: not configured (no ClusterAutoscaler default)")
		return nil
	case e.ScaleDown == nil:
		fmt.Fprintln(out, "Scale-down: disabled in the ClusterAutoscaler")
		return nil
	}
	v := e.ScaleDown.Verdicts[name]
	if v == nil {
		return fmt.Errorf("node %s is not in the autoscaler's view of the cluster", name)
	}
	if v.Group != nil {
		fmt.Fprintf(out, "Node group: %s\n", v.Group)
	}
	fmt.Fprintf(out, "Utilization: %.2f (threshold %g)\n", v.Utilization, e.Config.UtilizationThreshold)
	if v.Unneeded {
		fmt.Fprintf(out, "Unneeded since: %s\n", v.Since.UTC().Format(time.RFC3339))
		var pods []string
		for _, p := range v.PodsToMove {
			pods = append(pods, p.Namespace+"/"+p.Name)
		}
		if len(pods) > 0 {
			fmt.Fprintf(out, "Pods to move: %s\n", strings.Join(pods, ", "))
		}
	}
	fmt.Fprintf(out, "Scale-down: %s\n", v.Reason)
	if rec, ok := node.Annotations[autoscaler.ScaleDownStatusAnnotation]; ok && rec != v.Reason {
		fmt.Fprintf(out, "Last recorded by the autoscaler: %s\n", rec)
	}
	return nil
}

// explainPod prints the scheduler's decision for a pod and reports whether
// the pod is pending.
func explainPod(ctx context.Context, out io.Writer, client kubernetes.Interface, p *policy.Policy, ns, name string) (bool, error) {
	d, err := explain.Pod(ctx, client, p, ns, name)
	if err != nil {
		return false, err
	}
	printDecision(out, d.Pod, d.Algorithm, d.Decision)
	printSpread(out, d.Decision)
	if w := d.Waiting(); w != "" {
		fmt.Fprintf(out, "Preemption: %s\n", w)
	} else if p := d.Preempting(); p != "" {
		fmt.Fprintf(out, "Preemption: %s\n", p)
	}
	return d.Pending(), nil
}

// printSpread prints each node's verdict by the pod's hard topology spread
// constraints: its domain, the matching pods there, the global minimum
// and the skew the pod would make.
func printSpread(out io.Writer, d *algorithm.Decision) {
	names := make([]string, 0, len(d.Scored)+len(d.Filtered))
	for _, s := range d.Scored {
		names = append(names, s.Node)
	}
	for n := range d.Filtered {
		names = append(names, n)
	}
	sort.Strings(names)
	header := false
	for _, n := range names {
		verdicts := d.SpreadVerdicts(n)
		if len(verdicts) == 0 {
			continue
		}
		if !header {
			fmt.Fprintln(out, "Topology spread (DoNotSchedule):")
			header = true
		}
		parts := make([]string, len(verdicts))
		for i, v := range verdicts {
			parts[i] = v.String()
		}
		fmt.Fprintf(out, "  %s: %s\n", n, strings.Join(parts, "; "))
	}
}

func printDecision(out io.Writer, pod *corev1.Pod, alg *algorithm.Algorithm, d *algorithm.Decision) {
	state := "pending"
	if pod.Spec.NodeName != "" {
		state = "scheduled on " + pod.Spec.NodeName
	}
	sched := pod.Spec.SchedulerName
	if sched == "" {
		sched = corev1.DefaultSchedulerName
	}
	fmt.Fprintf(out, "Pod %s/%s (%s, scheduler %s)\n", pod.Namespace, pod.Name, state, sched)
	fmt.Fprintf(out, "Predicates: %s\n\n", strings.Join(alg.Predicates(), ", "))

	prios := alg.Priorities()
	tw := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	header := []string{"NODE", "VERDICT"}
	for _, wp := range prios {
		header = append(header, fmt.Sprintf("%s(x%d)", strings.TrimSuffix(wp.Name(), "Priority"), wp.Weight))
	}
	header = append(header, "TOTAL")
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, ns := range d.Scored {
		row := []string{ns.Node, "fits"}
		if ns.Node == d.Selected {
			row[1] = "fits, selected"
		}
		for _, s := range ns.Scores {
			row = append(row, fmt.Sprintf("%d", s.Score))
		}
		row = append(row, fmt.Sprintf("%d", ns.Total))
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	var rejected []string
	for n := range d.Filtered {
		rejected = append(rejected, n)
	}
	sort.Strings(rejected)
	for _, n := range rejected {
		f := d.Filtered[n]
		verdict := f.Predicate + ": " + strings.Join(f.Reasons, "; ")
		for _, more := range f.More {
			verdict += "; " + more.Predicate + ": " + strings.Join(more.Reasons, "; ")
		}
		row := []string{n, verdict}
		for range prios {
			row = append(row, "-")
		}
		row = append(row, "-")
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
	fmt.Fprintln(out)
	switch {
	case d.Feasible() && d.Ties > 1:
		fmt.Fprintf(out, "Winner: %s (total %d; %d nodes tied, broken at random)\n", d.Selected, d.Scored[0].Total, d.Ties)
	case d.Feasible():
		fmt.Fprintf(out, "Winner: %s (total %d)\n", d.Selected, d.Scored[0].Total)
	default:
		fmt.Fprintf(out, "Winner: none: %s\n", d.Summary())
	}
	for _, b := range d.VolumeBindings {
		if b.Volume != "" {
			fmt.Fprintf(out, "Claim %s: gets volume %s\n", algorithm.ClaimKey(b.Claim), b.Volume)
		} else {
			fmt.Fprintf(out, "Claim %s: provisioned on %s\n", algorithm.ClaimKey(b.Claim), b.Node)
		}
	}
	if gates := pod.Spec.SchedulingGates; len(gates) > 0 && pod.Spec.NodeName == "" {
		names := make([]string, len(gates))
		for i, g := range gates {
			names[i] = g.Name
		}
		fmt.Fprintf(out, "Scheduling gates: %s (the scheduler leaves the pod alone until they are removed)\n", strings.Join(names, ", "))
	}
}

// notCounted says why the autoscaler leaves a pending pod out of its
// scale-up: preemption made room for it, or the scheduler has not marked
// it Unschedulable yet.
func notCounted(ctx context.Context, client kubernetes.Interface, ns, name string) string {
	if p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err == nil && p.Status.NominatedNodeName != "" {
		return explain.NominatedNotCounted(p.Status.NominatedNodeName)
	}
	return explain.NotMarkedUnschedulable
}
