package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/capstan-dev/capstan/internal/atomicfile"
	"github.com/capstan-dev/capstan/internal/autoscaler"
	"github.com/capstan-dev/capstan/internal/simulate"
)

func newSimulateCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "simulate",
		Short: "What-if: snapshots of a cluster, to replay a change on",
	}
	c.AddCommand(newSimulateSnapshotCommand(), newSimulateRunCommand(), newSimulateRecordCommand(), newSimulateCompareCommand())
	return c
}

func newSimulateSnapshotCommand() *cobra.Command {
	var cf clientFlags
	var out string
	var from []string
	var anonymize bool
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
OpenShift ones) is left out. No Secret and no ConfigMap is read, and no secret is kept
from the objects that are: their managedFields and last-applied
configurations go; containers' environment values, commands and
arguments, and the content of MachineConfigs (files, units, SSH keys,
password hashes, LUKS key files, merged Ignition configs) become digests
keyed per snapshot; HTTP headers, Ignition proxies and PersistentVolumes'
driver options and attributes go. The file is written only once every
list has succeeded.

With --anonymize, names that say whose cluster it is (namespaces other
than default, kube-* and openshift-*, the objects in them, nodes,
machines, label keys and values other than well-known ones, images) are
replaced, consistently, by keyed hashes, and annotations, environments,
commands and addresses are dropped: what runs where, on what sizes of
node, with which taints, priorities and budgets, stays.

With --from, the snapshot is made from files of objects instead, as
kubectl get -o yaml (or -o json) writes them, without reading any
cluster: for example the output of
  kubectl get namespaces,nodes,pods,pdb,deployments,replicasets,statefulsets,daemonsets,jobs -A -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if out == "" {
				return errors.New("-o FILE: say where to write the snapshot")
			}
			if len(from) > 0 {
				return snapshotFromManifests(c, from, out, anonymize)
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
			objects, err := writeSnapshot(snap, out, anonymize)
			if err != nil {
				return err
			}
			served := len(snap.Objects)
			fmt.Fprintf(c.OutOrStdout(), "Snapshot of %s written to %s: %d objects of %d resources (%d not served by the cluster)\n",
				cfg.Host, out, objects, served, len(simulate.Resources)-served)
			return nil
		},
	}
	cf.add(c.Flags())
	c.Flags().StringVarP(&out, "output", "o", "", "file to write the snapshot to (JSON; mode 0600)")
	c.Flags().BoolVar(&anonymize, "anonymize", false, "rename namespaces, workloads, nodes, machines, labels and images consistently, and drop what names people or secrets (see docs/simulate.md)")
	c.Flags().StringArrayVar(&from, "from", nil, "make the snapshot from this file of objects (kubectl get -o yaml or json output) instead of a cluster; repeatable")
	return c
}

// writeSnapshot anonymizes the snapshot if asked, writes it to out (mode
// 0600, replacing any file there at once) and returns how many objects
// it holds.
func writeSnapshot(snap *simulate.Snapshot, out string, anonymize bool) (int, error) {
	if anonymize {
		if err := snap.Anonymize(); err != nil {
			return 0, err
		}
	}
	var b bytes.Buffer
	if err := snap.Write(&b); err != nil {
		return 0, err
	}
	if err := atomicfile.Write(out, b.Bytes(), 0o600); err != nil {
		return 0, err
	}
	objects := 0
	for _, objs := range snap.Objects {
		objects += len(objs)
	}
	return objects, nil
}

// snapshotFromManifests writes the snapshot of files of objects.
func snapshotFromManifests(c *cobra.Command, from []string, out string, anonymize bool) error {
	files := map[string][]byte{}
	for _, f := range from {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		files[f] = data
	}
	snap, skipped, err := simulate.FromManifests(files, time.Now())
	if err != nil {
		return err
	}
	objects, err := writeSnapshot(snap, out, anonymize)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.OutOrStdout(), "Snapshot of %d files written to %s: %d objects\n", len(from), out, objects)
	if len(skipped) > 0 {
		var kinds []string
		for k, n := range skipped {
			kinds = append(kinds, fmt.Sprintf("%d %s", n, k))
		}
		sort.Strings(kinds)
		fmt.Fprintf(c.OutOrStdout(), "Left out, of kinds a snapshot does not hold: %s\n", strings.Join(kinds, ", "))
	}
	return nil
}

func newSimulateRunCommand() *cobra.Command {
	o := simulate.RunOptions{}
	var snapshot, output, failOn string
	var changes []string
	control := true
	c := &cobra.Command{
		Use:   "run --snapshot FILE --change KIND=ARG ...",
		Short: "Replay a snapshot on a private cluster under changes, and report what it would do",
		Long: `Starts a private embedded capstan (control plane, scheduler, Machine API,
autoscaler, simulated nodes and, for a snapshot with MachineConfigPools,
the Machine Config Operator) in a temporary directory, restores the
snapshot on it (nodes with their capacity, labels, taints, conditions and
configuration, pods bound where they ran, workloads, PodDisruptionBudgets,
Machines, MachineSets, autoscalers, MachineConfigPools and MachineConfigs),
applies the changes in order, and reports what happened until nothing
changed for --quiet or --for passed: pods removed and placed, pods left
pending with the scheduler's and the autoscaler's reasons, nodes lost,
added and removed, the autoscaler's decisions, drains left blocked,
each pool's rollout node by node, and an update's run levels, the
operator waited on longest and the risks the cluster's graph named. The
cluster the snapshot was taken from is not touched.

The report opens with its verdict in one line: OK, or FAIL naming what
the changes left (changes not applied, pods pending because of them,
drains blocked, pools not rolled out, an update not completed, a cluster
still changing at --for); pods pending before the first change are counted
apart. Nodes and pending pods are grouped by zone, MachineSet and
workload; -o json has each one. --fail-on exits with status 3 when the
verdict has one of the findings named, for CI.

Pods are scheduled by capstan's scheduler for a snapshot of a cluster
capstan runs, and by upstream kube-scheduler, with the profile of the
snapshot's Scheduler (config.openshift.io/v1), for any other; a policy=
change runs capstan's scheduler with that Policy. --scheduler picks one;
the report says which ran and why.

Before the first change, the restored cluster is compared with the
snapshot (pods gone, placed or made during the restore). Then a control
run replays the snapshot without the changes for as long as theirs ran;
the report gives what the control did by itself and the changes' effect
net of it, and says so when the control diverged by a quarter or more of
what the changes did. --control=false skips it.

The cluster runs --speed times faster than real time (100x at most):
capstan's components keep the cluster's durations on a scaled clock,
tolerations, grace periods and eviction rates are scaled, the node
lifecycle controller's grace stays real and the simulated kubelets
declare a stopped kubelet's node lost when it would, and the report gives
simulated times.

Changes (each --change KIND=ARGUMENT; several are applied in order):
  policy=FILE                    a scheduler Policy (the first change only)
  cordon=NODE[,NODE...]          or cordon=zone:ZONE
  drain=NODE[,NODE...]           or drain=zone:ZONE (evictions honour PDBs)
  delete=NODE[,NODE...]          or delete=zone:ZONE (deletes their Machines)
  zone-outage=ZONE               the zone's kubelets stop; nothing launches there
  scale=[NAMESPACE/]MACHINESET=N a MachineSet's replicas
  apply=FILE                     Deployments, StatefulSets, DaemonSets, Jobs,
                                 PodDisruptionBudgets, ClusterAutoscalers,
                                 MachineAutoscalers
  machineconfig=FILE             MachineConfigs (and MachineConfigPools): the
                                 pools that select them roll them out
  update=VERSION                 a release the snapshot's ClusterVersion offers:
                                 the CVO applies it run level by run level and
                                 every pool rolls its machine OS
  wait=DURATION                  simulated time to let pass before the next change`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if snapshot == "" {
				return errors.New("--snapshot FILE: say which snapshot to simulate")
			}
			if output != "table" && output != "json" {
				return fmt.Errorf("-o %q: want table or json", output)
			}
			failures, err := simulate.ParseFailOn(failOn)
			if err != nil {
				return err
			}
			data, err := os.ReadFile(snapshot)
			if err != nil {
				return err
			}
			if o.Snapshot, err = simulate.Load(snapshot, data); err != nil {
				return err
			}
			for _, s := range changes {
				ch, err := simulate.ParseChange(s)
				if err != nil {
					return err
				}
				o.Changes = append(o.Changes, ch)
			}
			o.SnapshotName, o.Log, o.NoControl = snapshot, c.ErrOrStderr(), !control
			rep, err := simulate.Run(c.Context(), o)
			if err != nil {
				return err
			}
			if err := writeReport(c.OutOrStdout(), output, rep, rep.WriteTable); err != nil {
				return err
			}
			if failed := rep.Verdict.FailsOn(failures); len(failed) > 0 {
				fmt.Fprintf(c.ErrOrStderr(), "capstan: the simulation found %s (--fail-on %s)\n", strings.Join(failed, ", "), failOn)
				return &exitError{code: FailOnExitCode}
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&snapshot, "snapshot", "", "snapshot file (capstan simulate snapshot)")
	f.StringArrayVar(&changes, "change", nil, "a change, KIND=ARGUMENT (see above); repeat for several, applied in order")
	f.Float64Var(&o.Speed, "speed", simulate.DefaultSpeed, "how many times faster than real time the cluster runs (at most 100)")
	f.DurationVar(&o.For, "for", simulate.DefaultFor, "simulated time after the first change at which the run ends, settled or not")
	f.DurationVar(&o.Quiet, "quiet", simulate.DefaultQuiet, "simulated time without a change after which the cluster counts as settled")
	f.DurationVar(&o.BootTime, "boot-time", 0, fmt.Sprintf("simulated time a new instance takes to become a Ready node (default: the median the snapshot's machines of MachineSets took, else %s)", simulate.DefaultBootTime))
	f.DurationVar(&o.MaxNodeStartupTime, "max-node-startup-time", autoscaler.MaxNodeStartupTime, "the cluster autoscaler's --max-node-startup-time: how long a registered node that is not Ready counts as starting (OpenShift keeps upstream's)")
	f.DurationVar(&o.RebootTime, "reboot-time", simulate.DefaultRebootTime, "simulated time a node is down when it reboots into a new MachineConfig")
	f.BoolVar(&control, "control", true, "run the snapshot without the changes too, and net their effect of what it does by itself")
	f.StringVar(&o.Scheduler, "scheduler", simulate.SchedulerAuto, "the scheduler: "+strings.Join(simulate.Schedulers, ", ")+" (by the snapshot: capstan's for a cluster capstan runs)")
	f.StringVar(&o.DataDir, "data-dir", "", "directory for the private cluster (default: a temporary one, removed at the end)")
	f.StringVarP(&output, "output", "o", "table", "table or json")
	f.StringVar(&failOn, "fail-on", "", "exit with status 3 when the verdict finds any of these (comma-separated): "+strings.Join(simulate.Findings, ", ")+", or any (all but removed)")
	return c
}

func newSimulateRecordCommand() *cobra.Command {
	var cf clientFlags
	o := simulate.RecordOptions{}
	var output string
	c := &cobra.Command{
		Use:   "record [-o json]",
		Short: "Record what a live cluster does until it settles, as a simulation reports it",
		Long: `Watches a live cluster (with list and watch only) from now until nothing
has changed for --quiet, or --for has passed, and reports what it did as
capstan simulate run reports a simulation, in real time: pods removed and
placed, pods left pending with the scheduler's and the autoscaler's
reasons, nodes lost, added and removed, the autoscaler's events,
workloads' availability and budgets. It changes nothing: make the change
the simulation predicted as soon as it says it is recording, and its
times count from then. capstan simulate compare sets the two reports side
by side.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if output != "table" && output != "json" {
				return fmt.Errorf("-o %q: want table or json", output)
			}
			cfg, err := cf.restConfig()
			if err != nil {
				return err
			}
			if o.Kube, err = kubernetes.NewForConfig(cfg); err != nil {
				return err
			}
			if o.Dyn, err = dynamic.NewForConfig(cfg); err != nil {
				return err
			}
			o.Host, o.Log = cfg.Host, c.ErrOrStderr()
			rep, err := simulate.Record(c.Context(), o)
			if err != nil {
				return err
			}
			return writeReport(c.OutOrStdout(), output, rep, rep.WriteTable)
		},
	}
	cf.add(c.Flags())
	f := c.Flags()
	f.DurationVar(&o.For, "for", simulate.DefaultFor, "how long to record at most, settled or not")
	f.DurationVar(&o.Quiet, "quiet", simulate.DefaultQuiet, "time without a change after which the cluster counts as settled")
	f.StringVarP(&output, "output", "o", "table", "table or json")
	return c
}

func newSimulateCompareCommand() *cobra.Command {
	var output string
	tolerance := simulate.DefaultTolerance
	c := &cobra.Command{
		Use:   "compare PREDICTED.json OBSERVED.json",
		Short: "Set a simulation's report beside a recording of the same change on the live cluster",
		Long: `Reads two reports written with -o json, a simulation's (capstan simulate
run) and a recording's (capstan simulate record), and compares the
course of each, times counted from the first change (a recording's from
its beginning): nodes NotReady, pods removed, scale-ups, nodes added to
each MachineSet, nodes removed and pods placed, each as how many and when
the first and the last, and the pods left pending. A milestone agrees
when it happened as many times in both, its first and last within
--tolerance of the observed course (from the change to its last
milestone). Exits with status 3 when any does not agree.`,
		Args: cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			if output != "table" && output != "json" {
				return fmt.Errorf("-o %q: want table or json", output)
			}
			if tolerance <= 0 || tolerance >= 1 {
				return fmt.Errorf("--tolerance %g: want a share of the course between 0 and 1", tolerance)
			}
			var reports [2]simulate.Report
			for i, path := range args {
				data, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				if err := json.Unmarshal(data, &reports[i]); err != nil {
					return fmt.Errorf("%s: not a report of capstan simulate run or record -o json: %w", path, err)
				}
			}
			if reports[0].Recorded || !reports[1].Recorded {
				fmt.Fprintf(c.ErrOrStderr(), "capstan: comparing %s with %s: the first is meant to be a simulation's, the second a recording's\n", args[0], args[1])
			}
			cmp := simulate.Compare(&reports[0], &reports[1], tolerance)
			if err := writeReport(c.OutOrStdout(), output, cmp, cmp.WriteTable); err != nil {
				return err
			}
			if !cmp.Agree {
				return &exitError{code: FailOnExitCode}
			}
			return nil
		},
	}
	c.Flags().Float64Var(&tolerance, "tolerance", tolerance, "the share of the observed course within which a time agrees")
	c.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	return c
}

// writeReport writes v as indented JSON, or as table writes it.
func writeReport(w io.Writer, output string, v any, table func(io.Writer) error) error {
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	return table(w)
}

// FailOnExitCode is the exit status of a simulation whose verdict has a
// finding --fail-on names.
const FailOnExitCode = 3
