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
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

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
			p, err := loadPolicy(policyFile)
			if err != nil {
				return err
			}
			client, _, err := cf.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(c.Context(), time.Minute)
			defer cancel()
			return explainPod(ctx, c.OutOrStdout(), client, p, ns, name)
		},
	}
	cf.add(pod.Flags())
	pod.Flags().StringVar(&policyFile, "policy", "", "scheduler Policy file to evaluate with (default: the default policy)")
	c.AddCommand(pod)
	return c
}

func explainPod(ctx context.Context, out io.Writer, client kubernetes.Interface, p *policy.Policy, ns, name string) error {
	pod, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("pod %s/%s: %w", ns, name, err)
	}
	alg, err := algorithm.New(p, uint64(time.Now().UnixNano()))
	if err != nil {
		return err
	}
	alg.PercentageOfNodesToScore = 100
	snap, err := clusterSnapshot(ctx, client, pod)
	if err != nil {
		return err
	}
	candidate := pod.DeepCopy()
	candidate.Spec.NodeName = ""
	d := alg.Schedule(ctx, candidate, snap, algorithm.Options{Explain: true})
	printDecision(out, pod, alg, d)
	return nil
}

// clusterSnapshot reads nodes, assigned pods and the objects the priorities
// consult, leaving out the pod being explained.
func clusterSnapshot(ctx context.Context, client kubernetes.Interface, skip *corev1.Pod) (*algorithm.Snapshot, error) {
	f := informers.NewSharedInformerFactory(client, 0)
	l := algorithm.Listers{
		Services: f.Core().V1().Services().Lister(), ReplicationControllers: f.Core().V1().ReplicationControllers().Lister(),
		ReplicaSets: f.Apps().V1().ReplicaSets().Lister(), StatefulSets: f.Apps().V1().StatefulSets().Lister(),
		PersistentVolumeClaims: f.Core().V1().PersistentVolumeClaims().Lister(), PersistentVolumes: f.Core().V1().PersistentVolumes().Lister(),
		StorageClasses: f.Storage().V1().StorageClasses().Lister(), Namespaces: f.Core().V1().Namespaces().Lister(),
	}
	nodeLister, podLister := f.Core().V1().Nodes().Lister(), f.Core().V1().Pods().Lister()
	infCtx, stop := context.WithCancel(ctx)
	defer func() { stop(); f.Shutdown() }()
	f.Start(infCtx.Done())
	for typ, ok := range f.WaitForCacheSync(infCtx.Done()) {
		if !ok {
			return nil, fmt.Errorf("reading %v from the cluster: %w", typ, ctx.Err())
		}
	}
	nodes, err := nodeLister.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	infos := make([]*algorithm.NodeInfo, len(nodes))
	byName := map[string]*algorithm.NodeInfo{}
	for i, n := range nodes {
		infos[i] = algorithm.NewNodeInfo(n)
		byName[n.Name] = infos[i]
	}
	pods, err := podLister.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	for _, p := range pods {
		if p.UID == skip.UID || p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if ni := byName[p.Spec.NodeName]; ni != nil {
			ni.AddPod(algorithm.NewPodInfo(p))
		}
	}
	return algorithm.NewSnapshot(infos, l), nil
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
