package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/capstan-dev/capstan/internal/drain"
	"github.com/capstan-dev/capstan/internal/simulate"
	"github.com/capstan-dev/capstan/internal/testenv"
)

// awsCluster is what `kubectl get ... -o yaml` prints of a small OpenShift
// cluster on AWS that capstan never ran: a master and two four-CPU workers
// in each of three zones, and 20 one-CPU web pods, four on each worker of
// us-east-1a and three on the others. The workloads come as a second
// file, as a second kubectl command would print them, with the web
// Service and a ConfigMap, which a snapshot does not hold.
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
		"spec": map[string]any{"ports": []any{map[string]any{"port": int64(80)}}, "selector": map[string]any{"app": "web"}}},
		map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "web", "namespace": "shop"}, "data": map[string]any{"k": "v"}})
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

// A zone outage simulated on the kubectl output of an AWS cluster: the
// zone's nodes are lost, their pods evicted when their tolerations run
// out and made again elsewhere, and the autoscaler, unable to launch in
// the lost zone, adds a node in another for the pods that no longer fit.
func TestSimulateAZoneOutageOnAKubectlSnapshotOfAnotherCluster(t *testing.T) {
	dir := t.TempDir()
	files := awsCluster(t, dir)
	snap := filepath.Join(dir, "snap.json")
	// Anonymized: the outage plays out the same on renamed objects.
	out := capstanOK(t, "simulate", "snapshot", "--anonymize", "--from", files[0], "--from", files[1], "-o", snap)
	if !strings.Contains(out, "1 v1/ConfigMap") || strings.Contains(out, "v1/Service") {
		t.Errorf("the ConfigMap left out (and the Service kept) is not said: %s", out)
	}
	if data, err := os.ReadFile(snap); err != nil || strings.Contains(string(data), "shop") || strings.Contains(string(data), "prod-worker") {
		t.Fatalf("the snapshot is not anonymized (%v)", err)
	}
	autoscaling := filepath.Join(dir, "autoscaling-anonymized.yaml")
	data, err := os.ReadFile(files[2])
	if err != nil {
		t.Fatal(err)
	}
	// The MachineAutoscalers name their MachineSets as the snapshot now
	// does.
	sim, err := simulate.Load(snap, mustRead(t, snap))
	if err != nil {
		t.Fatal(err)
	}
	for _, ms := range sim.Objects["machine.openshift.io/v1beta1/machinesets"] {
		zone, _, _ := unstructured.NestedString(ms.Object, "spec", "template", "spec", "providerSpec", "value", "placement", "availabilityZone")
		data = bytes.ReplaceAll(data, []byte("name: prod-worker-"+zone+"\n"), []byte("name: "+ms.GetName()+"\n"))
	}
	if err := os.WriteFile(autoscaling, data, 0o600); err != nil {
		t.Fatal(err)
	}
	// --fail-on removed: the run removes pods (and places them again), so
	// it exits 3 with a verdict of OK, which names that finding only.
	rep, status := testenv.SimulateRunStatus(t, "--snapshot", snap, "--change", "apply="+autoscaling, "--change", "zone-outage=us-east-1a", "--control=false", "--speed", "20", "--quiet", "6m",
		"--fail-on", "removed")
	if v := rep.Verdict; status != 3 || v.Outcome != "OK" || !slices.Equal(v.Findings, []string{simulate.FindingRemoved}) || !strings.HasPrefix(v.Line, "OK: settled after ") {
		t.Errorf("exit status %d, verdict %+v; want 3 and OK, with pods removed its one finding", status, v)
	}

	if u := rep.Scheduler; u.Name != simulate.SchedulerKube || u.Profile != "LowNodeUtilization" || !strings.Contains(u.ProfileFrom, "has no Scheduler") {
		t.Errorf("scheduler %+v; want kube-scheduler's default profile, as the snapshot has no Scheduler", u)
	}
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
	web := ""
	if len(rep.Removed) > 0 {
		web = rep.Removed[0].Workload
	}
	if !strings.HasPrefix(web, "Deployment ns-") {
		t.Errorf("the evicted pods' workload is %q, want the anonymized web Deployment", web)
	}
	for _, r := range rep.Removed {
		if r.Workload != web || r.Reason != "DeletionByTaintManager" || !lostNode[r.Node] {
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
		if p.Workload == web {
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
	if add := rep.NodesAdded[0]; add.Zone == "us-east-1a" || !strings.HasPrefix(add.MachineSet, "machine-") {
		t.Errorf("node added %+v; want one of a MachineSet of another zone", add)
	}
	// web's availability went down with its pods of the lost zone, and
	// came back.
	var webAvail *simulate.WorkloadAvailability
	for i := range rep.Availability {
		if rep.Availability[i].Workload == web {
			webAvail = &rep.Availability[i]
		}
	}
	if webAvail == nil || webAvail.ReadyAtStart != int(webAvail.Desired) || webAvail.LowestReady > webAvail.ReadyAtStart-8 || webAvail.ReadyAtEnd != int(webAvail.Desired) {
		t.Errorf("web's availability %+v (of %+v); want all its pods Ready at the start, its 8 of the lost zone down at the lowest, and all back at the end", webAvail, rep.Availability)
	}
	// The node is linked to the pods it was added for: web's, whose
	// scale-up of its MachineSet the autoscaler reported.
	if add := rep.NodesAdded[0]; len(add.For) == 0 {
		t.Errorf("node added %+v names no pod it was added for", add)
	}
	placedWeb := map[string]bool{}
	for _, p := range rep.Placed {
		placedWeb[p.Pod] = p.Workload == web
	}
	for _, pod := range rep.NodesAdded[0].For {
		if !placedWeb[pod] {
			t.Errorf("node %s was added for %s, not a web pod placed during the run", rep.NodesAdded[0].Node, pod)
		}
	}
	triggered := false
	for _, e := range rep.Autoscaler {
		triggered = triggered || e.Reason == "TriggeredScaleUp"
	}
	if !triggered {
		t.Errorf("no TriggeredScaleUp among the autoscaler's events: %+v", rep.Autoscaler)
	}
}

// A snapshot of a cluster capstan does not run is scheduled by upstream
// kube-scheduler with the profile of the cluster's Scheduler: under
// HighNodeUtilization a new pod goes to the fullest node that fits it,
// where capstan's scheduler (and kube-scheduler's default profile) would
// put it on the emptiest. The snapshot also drifts by itself: a pod it
// had pending is placed during the restore (the calibration says so),
// and a node it had NotReady loses its pods to the taint manager with or
// without the change (the control run says so, and the change's effect
// is netted of it).
func TestAForeignSnapshotIsScheduledByKubeSchedulerWithItsProfile(t *testing.T) {
	dir := t.TempDir()
	// One four-CPU worker a zone, running one, two and three one-CPU web
	// pods; us-east-1b's has stopped answering.
	c := simulate.AWSCluster{Zones: []string{"us-east-1a", "us-east-1b", "us-east-1c"}, WorkersPerZone: 1, PodsPerWorker: []int{1, 2, 3},
		Created: time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)}
	objs, err := c.Objects()
	if err != nil {
		t.Fatal(err)
	}
	lost := ""
	for _, o := range objs {
		if o.GetKind() == "Node" && o.GetLabels()["topology.kubernetes.io/zone"] == "us-east-1b" && o.GetLabels()["node-role.kubernetes.io/worker"] == "" {
			lost = o.GetName()
			if err := unstructured.SetNestedSlice(o.Object, []any{map[string]any{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}}, "status", "conditions"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if lost == "" {
		t.Fatal("no worker in us-east-1b")
	}
	objs = append(objs, unstructured.Unstructured{Object: map[string]any{"apiVersion": "config.openshift.io/v1", "kind": "Scheduler",
		"metadata": map[string]any{"name": "cluster"}, "spec": map[string]any{"profile": "HighNodeUtilization"}}},
		unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "waiting", "namespace": "shop"},
			"spec":   map[string]any{"containers": []any{map[string]any{"name": "w", "image": "quay.io/shop/w:1"}}},
			"status": map[string]any{"phase": "Pending"}}})
	snapFile := writeSnapshot(t, objs, c.Created, filepath.Join(dir, "snap.json"))
	packer := filepath.Join(dir, "packer.yaml")
	for f, data := range map[string]string{packer: `apiVersion: apps/v1
kind: Deployment
metadata: {name: packer, namespace: shop}
spec:
  replicas: 1
  selector: {matchLabels: {app: packer}}
  template:
    metadata: {labels: {app: packer}}
    spec:
      containers:
      - name: packer
        image: quay.io/shop/packer:1
        resources: {requests: {cpu: "1", memory: 1Gi}}
`} {
		if err := os.WriteFile(f, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rep := testenv.SimulateRun(t, "--snapshot", snapFile, "--change", "apply="+packer, "--speed", "20", "--quiet", "6m")
	t.Logf("summary:\n%s", strings.Join(rep.Summary, "\n"))
	if u := rep.Scheduler; u.Name != simulate.SchedulerKube || u.Profile != "HighNodeUtilization" ||
		!strings.Contains(u.ProfileFrom, "schedulers.config.openshift.io/cluster") || !strings.Contains(u.Why, "capstan does not run") {
		t.Errorf("scheduler %+v; want kube-scheduler with the snapshot's HighNodeUtilization profile, for a cluster capstan does not run", u)
	}
	var placed []simulate.PodPlacement
	for _, p := range rep.Placed {
		if p.Workload == "Deployment shop/packer" {
			placed = append(placed, p)
		}
	}
	if len(placed) != 1 || placed[0].Zone != "us-east-1c" {
		t.Errorf("packer's pod placed %+v; want it on us-east-1c's worker, the fullest that fits it", placed)
	}
	// The calibration: the pending pod placed during the restore, the
	// others where they were.
	if cal := rep.Calibration; cal.Pods != 7 || cal.Same != 6 || len(cal.Placed) != 1 || cal.Placed[0].Pod != "shop/waiting" || len(cal.Gone) != 0 {
		t.Errorf("calibration %+v; want the 6 web pods where they were and shop/waiting placed", cal)
	}
	// The control: the lost node's two web pods evicted and placed again
	// without the change too; net of it, the change placed one pod.
	removed := 0
	for _, r := range rep.Removed {
		if r.Node == lost && r.Reason == "DeletionByTaintManager" {
			removed++
		}
	}
	ctl := rep.Control
	if removed != 2 || ctl == nil || ctl.Removed["Deployment shop/web"] != 2 || ctl.Net.Removed != 0 || ctl.Net.Placed != 1 || !ctl.Large {
		t.Errorf("removed %d pods of %s; control %+v; want its 2 web pods removed in both runs, and the packer pod the change's one net placement", removed, lost, ctl)
	}
	if !strings.Contains(rep.Verdict.Line, "the control run without the changes diverged too") {
		t.Errorf("verdict %q does not say the control diverged", rep.Verdict.Line)
	}
}

// The restore rolls no workload: a StatefulSet's and a DaemonSet's
// controllers take the restored pods for up to date, though the restored
// templates differ from the snapshot's (scaled seconds, digested
// arguments, names renamed by --anonymize), so no pod of theirs is
// replaced before or during the run, anonymized or not.
func TestARestoreRollsNoStatefulSetOrDaemonSet(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, "norolling")
	taint := corev1.Taint{Key: "norolling", Value: ns, Effect: corev1.TaintEffectNoSchedule}
	node := ns + "-a"
	addNode(t, node, map[string]string{"norolling": ns}, taint)
	spec := func(app string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}}, Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"norolling": ns},
			Tolerations:  []corev1.Toleration{{Key: "norolling", Operator: corev1.TolerationOpEqual, Value: ns, Effect: corev1.TaintEffectNoSchedule}},
			Containers: []corev1.Container{{Name: app, Image: "registry.example/" + app + ":1", Args: []string{"--secret-flag=s3cret"},
				Env: []corev1.EnvVar{{Name: "TOKEN", Value: "t0ken"}}}},
			TerminationGracePeriodSeconds: new(int64(30))}}
	}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns}, Spec: appsv1.StatefulSetSpec{
		Replicas: new(int32(2)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, Template: spec("db")}}
	if _, err := env.Client.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}}, Template: spec("agent")}}
	if _, err := env.Client.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		s, err1 := env.Client.AppsV1().StatefulSets(ns).Get(ctx, "db", metav1.GetOptions{})
		d, err2 := env.Client.AppsV1().DaemonSets(ns).Get(ctx, "agent", metav1.GetOptions{})
		return err1 == nil && err2 == nil && s.Status.ReadyReplicas == 2 && d.Status.NumberReady == 1,
			fmt.Sprintf("StatefulSet %+v %v, DaemonSet %+v %v", s.Status, err1, d.Status, err2)
	})
	dir := t.TempDir()
	for _, anonymize := range []bool{false, true} {
		snap := filepath.Join(dir, fmt.Sprintf("snap-%v.json", anonymize))
		args := []string{"simulate", "snapshot", "--kubeconfig", env.Kubeconfig, "-o", snap}
		if anonymize {
			args = append(args, "--anonymize")
		}
		capstanOK(t, args...)
		loaded, err := simulate.Load(snap, mustRead(t, snap))
		if err != nil {
			t.Fatal(err)
		}
		// Every pod of a StatefulSet or a DaemonSet in the snapshot, ours
		// and the cluster's.
		owned := map[string]string{}
		ours := 0
		for _, p := range loaded.Objects["v1/pods"] {
			for _, ref := range p.GetOwnerReferences() {
				if ref.Kind == "StatefulSet" || ref.Kind == "DaemonSet" {
					owned[p.GetNamespace()+"/"+p.GetName()] = ref.Kind
					if p.GetNamespace() == ns || (anonymize && !strings.HasPrefix(p.GetNamespace(), "openshift") && !strings.HasPrefix(p.GetNamespace(), "kube-")) {
						ours++
					}
				}
			}
		}
		if ours < 3 {
			t.Fatalf("anonymized %v: %d pods of the test's StatefulSet and DaemonSet in the snapshot, want 3: %v", anonymize, ours, owned)
		}
		rep := testenv.SimulateRun(t, "--snapshot", snap, "--change", "cordon="+aMaster(t, loaded), "--control=false", "--speed", "20", "--quiet", "1m")
		for _, pod := range rep.Calibration.Gone {
			if kind, ok := owned[pod]; ok {
				t.Errorf("anonymized %v: %s %s replaced during the restore", anonymize, kind, pod)
			}
		}
		for _, r := range rep.Removed {
			if kind, ok := owned[r.Pod]; ok {
				t.Errorf("anonymized %v: %s %s removed during the run (%s)", anonymize, kind, r.Pod, r.Reason)
			}
		}
		revisions := 0
		for _, cr := range loaded.Objects["apps/v1/controllerrevisions"] {
			if _, hasData := cr.Object["data"]; hasData == anonymize {
				t.Errorf("anonymized %v: ControllerRevision %s has data %v", anonymize, cr.GetName(), hasData)
			}
			revisions++
		}
		if revisions < 2 {
			t.Errorf("anonymized %v: %d ControllerRevisions in the snapshot, want the StatefulSet's and the DaemonSet's at least", anonymize, revisions)
		}
		if !anonymize {
			rollingOut(t, loaded, ns, dir)
		}
	}
}

// rollingOut restores the snapshot of a StatefulSet caught rolling out:
// its update revision a new one, db-1 updated already, db-0 not. The
// simulation goes on rolling it: db-0 is replaced, db-1 is not.
func rollingOut(t *testing.T, loaded *simulate.Snapshot, ns, dir string) {
	t.Helper()
	var objs []unstructured.Unstructured
	for _, list := range loaded.Objects {
		for _, u := range list {
			u := u.DeepCopy()
			switch {
			case u.GetKind() == "StatefulSet" && u.GetNamespace() == ns:
				if err := unstructured.SetNestedField(u.Object, "db-7f00d1e5", "status", "updateRevision"); err != nil {
					t.Fatal(err)
				}
			case u.GetKind() == "Pod" && u.GetNamespace() == ns && u.GetName() == "db-1":
				labels := u.GetLabels()
				labels[appsv1.ControllerRevisionHashLabelKey] = "db-7f00d1e5"
				u.SetLabels(labels)
			}
			objs = append(objs, *u)
		}
	}
	snap := writeSnapshot(t, objs, loaded.TakenAt.Time, filepath.Join(dir, "rolling-out.json"))
	rep := testenv.SimulateRun(t, "--snapshot", snap, "--change", "cordon="+aMaster(t, loaded), "--control=false", "--speed", "20", "--quiet", "1m")
	replaced := map[string]bool{}
	for _, pod := range rep.Calibration.Gone {
		replaced[pod] = true
	}
	for _, r := range rep.Removed {
		replaced[r.Pod] = true
	}
	if !replaced[ns+"/db-0"] || replaced[ns+"/db-1"] {
		t.Errorf("a StatefulSet rolling out at the snapshot, db-1 updated: replaced %v, want db-0 and not db-1", replaced)
	}
}

// writeSnapshot writes the snapshot of objects to path, and returns path.
func writeSnapshot(t *testing.T, objs []unstructured.Unstructured, takenAt time.Time, path string) string {
	t.Helper()
	snap, _, err := simulate.SnapshotOf(objs, takenAt, "the test's cluster")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := snap.Write(&b); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// aMaster is a master node of a snapshot: cordoned, it evicts nothing.
func aMaster(t *testing.T, s *simulate.Snapshot) string {
	t.Helper()
	for _, n := range s.Objects["v1/nodes"] {
		if _, ok := n.GetLabels()["node-role.kubernetes.io/master"]; ok {
			return n.GetName()
		}
	}
	t.Fatal("no master node in the snapshot")
	return ""
}

// A pod that was not ready in the snapshot stays so in the simulation,
// and counts against its disruption budget as it did in the cluster: one
// web pod of four unready, a budget of one unavailable, and a drain of
// the other zone's worker can evict nothing.
func TestAnUnreadyPodOfTheSnapshotHoldsItsBudget(t *testing.T) {
	dir := t.TempDir()
	c := simulate.AWSCluster{Zones: []string{"us-east-1a", "us-east-1b"}, WorkersPerZone: 1, PodsPerWorker: []int{2, 2},
		Created: time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)}
	objs, err := c.Objects()
	if err != nil {
		t.Fatal(err)
	}
	workerA, unready := "", ""
	nodeZone := map[string]string{}
	for _, o := range objs {
		if o.GetKind() == "Node" {
			nodeZone[o.GetName()] = o.GetLabels()["topology.kubernetes.io/zone"]
			if _, w := o.GetLabels()["node-role.kubernetes.io/worker"]; w && nodeZone[o.GetName()] == "us-east-1a" {
				workerA = o.GetName()
			}
		}
	}
	for _, o := range objs {
		switch o.GetKind() {
		case "Pod":
			if node, _, _ := unstructured.NestedString(o.Object, "spec", "nodeName"); nodeZone[node] == "us-east-1b" && unready == "" {
				unready = o.GetName()
				if err := unstructured.SetNestedSlice(o.Object, []any{map[string]any{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}}, "status", "conditions"); err != nil {
					t.Fatal(err)
				}
			}
		case "PodDisruptionBudget":
			unstructured.RemoveNestedField(o.Object, "spec", "minAvailable")
			if err := unstructured.SetNestedField(o.Object, int64(1), "spec", "maxUnavailable"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if workerA == "" || unready == "" {
		t.Fatalf("worker %q, unready pod %q", workerA, unready)
	}
	snapFile := writeSnapshot(t, objs, c.Created, filepath.Join(dir, "snap.json"))
	rep, _ := testenv.SimulateRunStatus(t, "--snapshot", snapFile, "--change", "drain="+workerA, "--control=false", "--speed", "20", "--quiet", "3m")
	if len(rep.BlockedDrains) != 1 || rep.BlockedDrains[0].Node != workerA || len(rep.BlockedDrains[0].Pods) != 2 || len(rep.Removed) != 0 {
		t.Errorf("blocked drains %+v, removed %+v; want the drain of %s blocked with its 2 web pods, none evicted", rep.BlockedDrains, rep.Removed, workerA)
	}
	for _, a := range rep.Availability {
		if a.Workload == "Deployment shop/web" && a.ReadyAtStart != 3 {
			t.Errorf("web's availability %+v; want 3 of its 4 pods Ready at the start", a)
		}
	}
}

// A simulation of a drain on a snapshot of this cluster predicts what the
// same drain then does to it: which pods leave, that the disruption
// budget lets them go one at a time without blocking the drain, and on
// which node their replacements land: the empty node added after the
// Deployment, not the one holding its other pods, as the scheduler's
// priorities have it.
func TestSimulationOfADrainPredictsTheDrain(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, "fidelity")
	taint := corev1.Taint{Key: "fidelity", Value: ns, Effect: corev1.TaintEffectNoSchedule}
	nodeA, nodeB := ns+"-a", ns+"-b"
	for _, n := range []string{nodeA, nodeB} {
		addNode(t, n, map[string]string{"fidelity": ns}, taint)
	}
	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: appsv1.DeploymentSpec{
		Replicas: new(int32(4)), Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"fidelity": ns},
			Tolerations:  []corev1.Toleration{{Key: "fidelity", Operator: corev1.TolerationOpEqual, Value: ns, Effect: corev1.TaintEffectNoSchedule}},
			Containers: []corev1.Container{{Name: "web", Image: "registry.example/web:1",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}}}},
			TerminationGracePeriodSeconds: new(int64(0))}}}}
	if _, err := env.Client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: policyv1.PodDisruptionBudgetSpec{
		MinAvailable: new(intstr.FromInt32(3)), Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	if _, err := env.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	running := func() map[string]string {
		pods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				out[ns+"/"+p.Name] = p.Spec.NodeName
			}
		}
		return out
	}
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		r := running()
		return len(r) == 4, fmt.Sprintf("running: %v", r)
	})
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		p, err := env.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "web", metav1.GetOptions{})
		return err == nil && p.Status.DisruptionsAllowed == 1, fmt.Sprintf("budget %+v %v", p.Status, err)
	})
	nodeC := ns + "-c"
	addNode(t, nodeC, map[string]string{"fidelity": ns}, taint)
	before := running()
	var onA []string
	for pod, node := range before {
		if node == nodeA {
			onA = append(onA, pod)
		}
	}
	sort.Strings(onA)
	if len(onA) == 0 {
		t.Fatalf("no pod on %s to drain: %v", nodeA, before)
	}

	snap := filepath.Join(t.TempDir(), "snap.json")
	capstanOK(t, "simulate", "snapshot", "--kubeconfig", env.Kubeconfig, "-o", snap)
	rep := testenv.SimulateRun(t, "--snapshot", snap, "--change", "drain="+nodeA, "--control=false", "--speed", "20", "--quiet", "4m")

	// The drain itself, on this cluster.
	d := drain.New(ctx, env.Client, 2*time.Minute, klog.Background())
	if err := d.Cordon(env.GetNode(t, nodeA), true); err != nil {
		t.Fatal(err)
	}
	if err := d.Evict(nodeA); err != nil {
		t.Fatalf("draining %s: %v", nodeA, err)
	}
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		r := running()
		return len(r) == 4, fmt.Sprintf("running: %v", r)
	})
	after := running()
	realPlaced := map[string]int{}
	for pod, node := range after {
		if _, old := before[pod]; !old {
			realPlaced[node]++
		}
	}

	var simRemoved []string
	for _, r := range rep.Removed {
		if strings.HasPrefix(r.Pod, ns+"/") {
			simRemoved = append(simRemoved, r.Pod)
			if r.Reason != "EvictionByEvictionAPI" || r.Node != nodeA {
				t.Errorf("simulation removed %+v; want an eviction from %s", r, nodeA)
			}
		}
	}
	sort.Strings(simRemoved)
	if strings.Join(simRemoved, " ") != strings.Join(onA, " ") {
		t.Errorf("simulation removed %v; the drain removes %v", simRemoved, onA)
	}
	simPlaced := map[string]int{}
	for _, p := range rep.Placed {
		if strings.HasPrefix(p.Pod, ns+"/") {
			simPlaced[p.Node]++
		}
	}
	if realPlaced[nodeC] == 0 {
		t.Logf("the drain placed no replacement on the empty node %s: %v", nodeC, realPlaced)
	}
	if fmt.Sprint(simPlaced) != fmt.Sprint(realPlaced) {
		t.Errorf("simulation placed the replacements %v; the drain's went %v", simPlaced, realPlaced)
	}
	for _, b := range rep.BlockedDrains {
		t.Errorf("simulation left the drain blocked: %+v; the drain finished", b)
	}
	for _, p := range rep.Pending {
		if strings.HasPrefix(p.Pod, ns+"/") {
			t.Errorf("simulation left %s pending: %s", p.Pod, p.Scheduler)
		}
	}
}

// The other changes, in one run on the AWS cluster's snapshot, applied in
// order: a Policy that packs pods onto the fullest nodes, a cordon, a
// Deployment added, a minute of simulated time, a MachineSet scaled up,
// and a node deleted (its Machine drained, and replaced by its
// MachineSet).
func TestSimulatePolicyCordonWorkloadScaleAndDelete(t *testing.T) {
	dir := t.TempDir()
	files := awsCluster(t, dir)
	snap := filepath.Join(dir, "snap.json")
	capstanOK(t, "simulate", "snapshot", "--from", files[0], "--from", files[1], "-o", snap)
	write := func(name, content string) string {
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	pol := write("policy.json", `{"kind":"Policy","apiVersion":"v1",
"predicates":[{"name":"CheckNodeUnschedulable"},{"name":"GeneralPredicates"},{"name":"PodToleratesNodeTaints"}],
"priorities":[{"name":"MostRequestedPriority","weight":1}]}`)
	batch := write("batch.yaml", `apiVersion: apps/v1
kind: Deployment
metadata: {name: batch, namespace: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: batch}}
  template:
    metadata: {labels: {app: batch}}
    spec:
      containers:
      - {name: batch, image: quay.io/shop/batch:1, resources: {requests: {cpu: 500m}}}
`)
	// Zone b's first worker (3 web pods), and zone a's first (4: full).
	cordoned, deleted := "ip-10-1-1-10.ec2.internal", "ip-10-0-1-10.ec2.internal"
	rep := testenv.SimulateRun(t, "--snapshot", snap, "--control=false", "--speed", "20", "--quiet", "5m",
		"--change", "policy="+pol, "--change", "cordon="+cordoned, "--change", "apply="+batch, "--change", "wait=1m",
		"--change", "scale=prod-worker-us-east-1c=3", "--change", "delete="+deleted)

	if !rep.Settled {
		t.Errorf("not settled after %s", rep.Duration)
	}
	for _, c := range rep.Changes {
		if c.Error != "" {
			t.Errorf("change %s: %s", c.Change, c.Error)
		}
	}
	if at := rep.Changes[len(rep.Changes)-1].At; at < simulate.Duration(time.Minute) {
		t.Errorf("the delete was applied at %s, before the minute waited", at)
	}
	batchNodes := map[string]int{}
	for _, p := range rep.Placed {
		if p.Node == cordoned {
			t.Errorf("%s placed on the cordoned node", p.Pod)
		}
		if p.Workload == "Deployment shop/batch" {
			batchNodes[p.Node]++
		}
	}
	// The workers left are 3 CPUs of 4 full (b's second, c's two), or
	// full: the fullest-first policy puts both half-CPU pods on one.
	if len(batchNodes) != 1 {
		t.Errorf("batch pods placed on %v; MostRequestedPriority packs both on one node", batchNodes)
	}
	if len(rep.Pending) != 0 {
		t.Errorf("pending: %+v", rep.Pending)
	}
	sets := map[string]int{}
	for _, n := range rep.NodesAdded {
		sets[n.MachineSet]++
	}
	if len(rep.NodesAdded) != 2 || sets["prod-worker-us-east-1c"] != 1 || sets["prod-worker-us-east-1a"] != 1 {
		t.Errorf("nodes added %+v; want one scaled up in us-east-1c and the deleted node's replacement in us-east-1a", rep.NodesAdded)
	}
	if len(rep.NodesRemoved) != 1 || rep.NodesRemoved[0].Node != deleted {
		t.Errorf("nodes removed %+v; want %s", rep.NodesRemoved, deleted)
	}
	evicted := 0
	for _, r := range rep.Removed {
		if r.Node != deleted || r.Reason != "EvictionByEvictionAPI" || r.Workload != "Deployment shop/web" {
			t.Errorf("removed %+v; want only web pods evicted by the deleted node's drain", r)
			continue
		}
		evicted++
	}
	if evicted != 4 {
		t.Errorf("%d web pods evicted from %s, want its 4", evicted, deleted)
	}
	if len(rep.BlockedDrains) != 0 {
		t.Errorf("blocked drains: %+v", rep.BlockedDrains)
	}

	// The same report as a page of the console, opened from its file.
	raw, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	reportFile, notAReport := write("report.json", string(raw)), write("policy-again.json", `{"kind":"Policy"}`)
	tab := testenv.NewTab(t)
	tab.Go(env.Cluster.NewConsoleLoginLink(env.Cluster.AdminToken()))
	tab.WaitText("#who", "Logged in as ", 30*time.Second)
	tab.Go(env.Cluster.ConsoleURL + "/#/simulate")
	tab.WaitText("main", "No report open.", 30*time.Second)
	tab.Upload("#report-file", notAReport)
	tab.WaitText("#report-result", "policy-again.json: it has no speed, changes, removed", 10*time.Second)
	tab.Upload("#report-file", reportFile)
	tab.WaitText("main", fmt.Sprintf("report.json: 9 nodes and %d pods of the snapshot", rep.Pods), 10*time.Second)
	for row, want := range map[string][]string{
		"delete=" + deleted:     {rep.Changes[len(rep.Changes)-1].At.String(), "applied"},
		deleted:                 {"us-east-1a", "removed"},
		"Deployment shop/web":   {"4", "EvictionByEvictionAPI x4"},
		"Deployment shop/batch": {"2"},
	} {
		got, err := testenv.Eval[string](tab, fmt.Sprintf(`[...document.querySelectorAll('tr[data-key=%q]')].map((e) => e.innerText).join("\n")`, row))
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("the console's row %s is %q, want it to say %q", row, got, w)
			}
		}
	}
	if got := tab.Text("main"); !strings.Contains(got, "No pod was left pending.") || !strings.Contains(got, "No drain was left blocked.") {
		t.Errorf("the console's report does not say nothing is pending or blocked:\n%s", got)
	}
	if got := tab.Text("#verdict"); rep.Verdict.Line == "" || got != rep.Verdict.Line {
		t.Errorf("the console's verdict is %q, want the report's %q", got, rep.Verdict.Line)
	}
	if got, want := tab.Text("#summary"), strings.Join(rep.Summary, "\n"); len(rep.Summary) != 4 || strings.Join(strings.Fields(got), " ") != strings.Join(strings.Fields(want), " ") {
		t.Errorf("the console's summary is %q, want the report's %q (the scheduler, the boot time, the restore and the control)", got, want)
	}
	tab.A11y("what-if simulation")
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// A snapshot of a live cluster without the OpenShift APIs (capstan up
// --bare --kubernetes-only stands in for one): what it does not serve is
// absent, not empty, and a drain simulated on it moves the drained
// node's pods to the others.
func TestSimulateASnapshotOfALivePlainKubernetesCluster(t *testing.T) {
	dir := t.TempDir()
	up := testenv.StartUp(t, "--data-dir", dir, "--port", strconv.Itoa(testenv.FreePort(t)), "--bare", "--kubernetes-only",
		"--control-plane-nodes", "1", "--nodes", "2", "--metrics-address", "", "--console-address", "", "--thanos-address", "")
	up.WaitLine(t, "capstan is up", 4*time.Minute)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	kube := kubernetes.NewForConfigOrDie(testenv.Kubeconfig(t, kubeconfig))
	ctx := t.Context()
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No scheduler runs on a bare cluster: the pods are bound by name,
	// then a ReplicaSet adopts them.
	labels := map[string]string{"app": "web"}
	template := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "web", Image: "registry.example/web:1",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}}}},
		TerminationGracePeriodSeconds: new(int64(0))}}
	for i, node := range []string{"worker-0", "worker-0", "worker-1"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-%d", i), Namespace: "shop", Labels: labels}, Spec: *template.Spec.DeepCopy()}
		pod.Spec.NodeName = node
		if _, err := kube.CoreV1().Pods("shop").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"}, Spec: appsv1.ReplicaSetSpec{
		Replicas: new(int32(3)), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template}}
	if _, err := kube.AppsV1().ReplicaSets("shop").Create(ctx, rs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		pods, err := kube.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		owned := 0
		for _, p := range pods.Items {
			if metav1.GetControllerOf(&p) != nil && p.Status.Phase == corev1.PodRunning {
				owned++
			}
		}
		return owned == 3 && len(pods.Items) == 3, fmt.Sprintf("%d pods, %d running and adopted", len(pods.Items), owned)
	})

	snap := filepath.Join(dir, "snap.json")
	out := capstanOK(t, "simulate", "snapshot", "--kubeconfig", kubeconfig, "-o", snap)
	if !strings.Contains(out, "not served by the cluster") {
		t.Errorf("the snapshot does not say what the cluster does not serve: %s", out)
	}
	s, err := simulate.Load(snap, mustRead(t, snap))
	if err != nil {
		t.Fatal(err)
	}
	for key := range s.Objects {
		if strings.Contains(key, "openshift.io") {
			t.Errorf("the snapshot of a cluster without the OpenShift APIs holds %s", key)
		}
	}
	if n := len(s.Objects["v1/nodes"]); n != 3 {
		t.Errorf("the snapshot holds %d nodes, want 3", n)
	}

	rep := testenv.SimulateRun(t, "--snapshot", snap, "--change", "drain=worker-0", "--control=false", "--speed", "20", "--quiet", "3m")
	var removed []string
	for _, r := range rep.Removed {
		removed = append(removed, r.Pod+" from "+r.Node+" by "+r.Reason)
	}
	sort.Strings(removed)
	want := "shop/web-0 from worker-0 by EvictionByEvictionAPI shop/web-1 from worker-0 by EvictionByEvictionAPI"
	if got := strings.Join(removed, " "); got != want {
		t.Errorf("removed %s; want %s", got, want)
	}
	if len(rep.Placed) != 2 || len(rep.Pending) != 0 || len(rep.BlockedDrains) != 0 {
		t.Errorf("placed %+v, pending %+v, blocked %+v; want both replacements placed", rep.Placed, rep.Pending, rep.BlockedDrains)
	}
	for _, p := range rep.Placed {
		if p.Node == "worker-0" || p.Workload != "ReplicaSet shop/web" {
			t.Errorf("placed %+v; want the ReplicaSet's replacement off the drained node", p)
		}
	}
}

// The quickstart of docs/simulate.md runs as written, on this cluster:
// its snapshot and run commands, read from the page, and an output of
// the shape the page shows (the verdict first, then the run, the change
// applied, and the zone's nodes NotReady).
func TestTheSimulateQuickstartRuns(t *testing.T) {
	raw := string(mustRead(t, filepath.Join("..", "..", "docs", "simulate.md")))
	start := strings.Index(raw, "## Quickstart")
	if start < 0 {
		t.Fatal("docs/simulate.md has no Quickstart")
	}
	var commands [][]string
	for _, l := range strings.Split(raw[start:], "\n") {
		if cmd, ok := strings.CutPrefix(l, "    capstan simulate "); ok {
			commands = append(commands, append([]string{"simulate"}, strings.Fields(cmd)...))
		}
		if strings.HasPrefix(l, "## ") && !strings.HasPrefix(l, "## Quickstart") {
			break
		}
	}
	if len(commands) != 2 || commands[0][1] != "snapshot" || commands[1][1] != "run" {
		t.Fatalf("the Quickstart's commands: %v, want a snapshot and a run", commands)
	}
	dir := t.TempDir()
	for _, cmd := range commands {
		for i, a := range cmd {
			switch a {
			case ".capstan/kubeconfig":
				cmd[i] = env.Kubeconfig
			case "snapshot.json":
				cmd[i] = filepath.Join(dir, a)
			}
		}
	}
	capstanOK(t, commands[0]...)
	proc := testenv.CapstanProcess(commands[1]...)
	var stdout, stderr bytes.Buffer
	proc.Stdout, proc.Stderr = &stdout, &stderr
	if err := proc.Run(); err != nil {
		t.Fatalf("capstan %s: %v\n%s", strings.Join(commands[1], " "), err, stderr.String())
	}
	out := stdout.String()
	t.Logf("capstan %s:\n%s", strings.Join(commands[1], " "), out)
	norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	lines := strings.Split(out, "\n")
	if !regexp.MustCompile(`^(OK|FAIL): `).MatchString(lines[0]) {
		t.Errorf("the output does not open with a verdict:\n%s", out)
	}
	var flat []string
	for _, l := range lines {
		flat = append(flat, norm(l))
	}
	all := strings.Join(flat, "\n")
	for _, want := range []string{"\nSimulated ", "\nScheduled by capstan (the snapshot is of a cluster capstan runs).\nBoot: new instances become Ready nodes after ", "\nRestore: ", "\nControl: the snapshot without the changes, for ", "\nCHANGE AT RESULT\nzone-outage=sim-zone-a 0s applied\n", "\nNODES ZONE MACHINESET COUNT FIRST AT LAST AT\nNotReady sim-zone-a - "} {
		if !strings.Contains(all, want) {
			t.Errorf("the output has no %q, as the Quickstart shows:\n%s", want, out)
		}
	}
}
