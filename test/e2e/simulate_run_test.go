package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/capstan-dev/capstan/internal/simulate"
	"github.com/capstan-dev/capstan/internal/testenv"
)

// awsCluster is what `kubectl get ... -o yaml` prints of a small OpenShift
// cluster on AWS that capstan never ran: a master and two four-CPU workers
// in each of three zones, and 20 one-CPU web pods, four on each worker of
// us-east-1a and three on the others. The workloads come as a second
// file, as a second kubectl command would print them, with a Service,
// which a snapshot does not hold.
func awsCluster(t *testing.T, dir string) []string {
	t.Helper()
	c := simulate.AWSCluster{Zones: []string{"us-east-1a", "us-east-1b", "us-east-1c"}, WorkersPerZone: 2, PodsPerWorker: []int{4, 3, 3},
		Created: time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)}
	objs, err := c.Objects()
	if err != nil {
		t.Fatal(err)
	}
	var items, workloads []any
	for _, o := range objs {
		switch o.GetKind() {
		case "Deployment", "ReplicaSet":
			workloads = append(workloads, o.Object)
		default:
			items = append(items, o.Object)
		}
	}
	workloads = append(workloads, map[string]any{"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{"name": "web", "namespace": "shop"},
		"spec": map[string]any{"ports": []any{map[string]any{"port": int64(80)}}}})
	var files []string
	for i, list := range [][]any{items, workloads} {
		data, err := yaml.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "metadata": map[string]any{"resourceVersion": ""}, "items": list})
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, fmt.Sprintf("kubectl-%d.yaml", i))
		if err := os.WriteFile(f, data, 0o600); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	var b bytes.Buffer
	for _, o := range c.Autoscaling(1, 4) {
		data, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("---\n")
		b.Write(data)
	}
	f := filepath.Join(dir, "autoscaling.yaml")
	if err := os.WriteFile(f, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return append(files, f)
}

// runSimulation runs `capstan simulate run -o json` in a process of its
// own (it starts a control plane of its own) and decodes its report.
func runSimulation(t *testing.T, args ...string) *simulate.Report {
	t.Helper()
	cmd := testenv.CapstanProcess(append([]string{"simulate", "run", "-o", "json"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("capstan simulate run %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var rep simulate.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("the report is not JSON: %v\n%s", err, stdout.String())
	}
	t.Logf("capstan simulate run %s:\n%s", strings.Join(args, " "), stderr.String())
	return &rep
}

// A zone outage simulated on the kubectl output of an AWS cluster: the
// zone's nodes are lost, their pods evicted when their tolerations run
// out and made again elsewhere, and the autoscaler, unable to launch in
// the lost zone, adds a node in another for the pods that no longer fit.
func TestSimulateAZoneOutageOnAKubectlSnapshotOfAnotherCluster(t *testing.T) {
	dir := t.TempDir()
	files := awsCluster(t, dir)
	snap := filepath.Join(dir, "snap.json")
	out := capstanOK(t, "simulate", "snapshot", "--from", files[0], "--from", files[1], "-o", snap)
	if !strings.Contains(out, "1 v1/Service") {
		t.Errorf("the Service left out is not said: %s", out)
	}
	autoscaling := files[2]
	rep := runSimulation(t, "--snapshot", snap, "--change", "apply="+autoscaling, "--change", "zone-outage=us-east-1a", "--speed", "10", "--quiet", "6m")

	if !rep.Settled || rep.Nodes != 9 || rep.Pods != 20 {
		t.Errorf("settled %v after %s, %d nodes and %d pods restored; want settled, 9 and 20", rep.Settled, rep.Duration, rep.Nodes, rep.Pods)
	}
	for _, c := range rep.Changes {
		if c.Error != "" {
			t.Errorf("change %s: %s", c.Change, c.Error)
		}
	}
	var lost []string
	lostNode := map[string]bool{}
	for _, n := range rep.NodesNotReady {
		lost = append(lost, n.Node)
		lostNode[n.Node] = true
		if n.Zone != "us-east-1a" {
			t.Errorf("node %s of zone %s went NotReady; only us-east-1a was lost", n.Node, n.Zone)
		}
	}
	if len(lost) != 3 {
		t.Errorf("nodes NotReady: %v, want the three of us-east-1a", lost)
	}
	evicted := 0
	for _, r := range rep.Removed {
		if r.Workload != "Deployment shop/web" || r.Reason != "DeletionByTaintManager" || !lostNode[r.Node] {
			t.Errorf("removed %+v; want only web pods of us-east-1a, by the taint manager", r)
			continue
		}
		evicted++
		if r.At < simulate.Duration(5*time.Minute) {
			t.Errorf("%s evicted at %s, before its 300 s toleration ran out after the node was lost", r.Pod, r.At)
		}
	}
	if evicted != 8 {
		t.Errorf("%d web pods evicted, want the 8 of us-east-1a", evicted)
	}
	placed := 0
	for _, p := range rep.Placed {
		if p.Workload == "Deployment shop/web" {
			placed++
			if p.Zone == "us-east-1a" {
				t.Errorf("%s placed on %s in the lost zone", p.Pod, p.Node)
			}
		}
	}
	if placed != 8 || len(rep.Pending) != 0 {
		t.Errorf("%d web pods placed, %d pending (%+v); want all 8 replacements placed", placed, len(rep.Pending), rep.Pending)
	}
	if len(rep.NodesAdded) != 1 {
		t.Fatalf("nodes added: %+v; want one (4 pods over the 16 CPUs left)", rep.NodesAdded)
	}
	if add := rep.NodesAdded[0]; add.Zone == "us-east-1a" || !strings.HasPrefix(add.MachineSet, "prod-worker-us-east-1") {
		t.Errorf("node added %+v; want one of a MachineSet of another zone", add)
	}
	triggered := false
	for _, e := range rep.Autoscaler {
		triggered = triggered || e.Reason == "TriggeredScaleUp"
	}
	if !triggered {
		t.Errorf("no TriggeredScaleUp among the autoscaler's events: %+v", rep.Autoscaler)
	}
}
