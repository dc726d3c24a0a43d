package simulate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/capstan-dev/capstan/internal/simclock"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/mco"
	"github.com/capstan-dev/capstan/internal/sim"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestChangesParse(t *testing.T) {
	deploy := writeFile(t, "d.yaml", `apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
---
apiVersion: autoscaling.openshift.io/v1
kind: ClusterAutoscaler
metadata: {name: default}
`)
	mcFile := writeFile(t, "mc.yaml", machineConfigYAML+`---
apiVersion: machineconfiguration.openshift.io/v1
kind: MachineConfigPool
metadata: {name: infra}
spec:
  machineConfigSelector: {matchLabels: {machineconfiguration.openshift.io/role: infra}}
  nodeSelector: {matchLabels: {node-role.kubernetes.io/infra: ""}}
`)
	pol := writeFile(t, "policy.json", `{"kind":"Policy","apiVersion":"v1","predicates":[{"name":"PodFitsResources"}],"priorities":[{"name":"LeastRequestedPriority","weight":1}]}`)
	for _, tc := range []struct {
		in    string
		check func(Change) bool
	}{
		{"cordon=a,b", func(c Change) bool {
			return c.Kind == ChangeCordon && strings.Join(c.Nodes, " ") == "a b" && c.Zone == ""
		}},
		{"drain=zone:us-east-1a", func(c Change) bool { return c.Kind == ChangeDrain && c.Zone == "us-east-1a" && c.Nodes == nil }},
		{"delete=worker-3", func(c Change) bool { return c.Kind == ChangeDelete && c.Nodes[0] == "worker-3" }},
		{"zone-outage=b", func(c Change) bool { return c.Kind == ChangeZoneOutage && c.Zone == "b" }},
		{"scale=workers-a=5", func(c Change) bool { return c.MachineSet == "openshift-machine-api/workers-a" && c.Replicas == 5 }},
		{"scale=ns/set=0", func(c Change) bool { return c.MachineSet == "ns/set" && c.Replicas == 0 }},
		{"apply=" + deploy, func(c Change) bool { return len(c.Objects) == 2 && c.Objects[1].GetKind() == "ClusterAutoscaler" }},
		{"policy=" + pol, func(c Change) bool { return c.Policy != nil }},
		{"wait=90s", func(c Change) bool { return c.Kind == ChangeWait && c.Wait == 90*time.Second }},
		{"machineconfig=" + mcFile, func(c Change) bool {
			return c.Kind == ChangeMachineConfig && len(c.Objects) == 2 && c.Objects[0].GetKind() == "MachineConfig"
		}},
	} {
		c, err := ParseChange(tc.in)
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if !tc.check(c) || c.String() != tc.in {
			t.Errorf("%s parsed as %+v (%s)", tc.in, c, c)
		}
	}
}

func TestBadChangesAreRefusedNamingWhatIsWrong(t *testing.T) {
	secret := writeFile(t, "s.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n")
	nameless := writeFile(t, "n.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {}\n")
	empty := writeFile(t, "e.yaml", "---\n")
	badIgnition := writeFile(t, "i.yaml", strings.Replace(machineConfigYAML, "3.4.0", "9.9.9", 1))
	badKernel := writeFile(t, "k.yaml", machineConfigYAML+"  kernelType: rt\n")
	for in, want := range map[string]string{
		"zone-outage":                  "want KIND=ARGUMENT",
		"reboot=a":                     `unknown kind "reboot"`,
		"cordon=a,,b":                  "an empty node name",
		"drain=zone:":                  "names no zone",
		"scale=set":                    "want scale=",
		"scale=set=-1":                 `replicas "-1"`,
		"scale=set=many":               `replicas "many"`,
		"apply=" + secret:              `v1/Secret "s" cannot be applied`,
		"apply=" + nameless:            "has no metadata.name",
		"apply=" + empty:               "no objects",
		"apply=/no/such/file":          "no such file",
		"policy=/no/such/file":         "no such file",
		"policy=" + nameless:           "policy",
		"apply=" + nameless + "":       "document 1",
		"machineconfig=" + nameless:    `apps/v1/Deployment "" cannot be applied by this change`,
		"machineconfig=" + badIgnition: "document 1: MachineConfig 99-worker-chrony: MachineConfig 99-worker-chrony: parsing Ignition config failed",
		"machineconfig=" + badKernel:   `kernelType "rt" is not one of`,
	} {
		_, err := ParseChange(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one saying %q", in, err, want)
		}
	}
	pol := Change{Kind: ChangePolicy, Arg: "p.json"}
	cordon := Change{Kind: ChangeCordon, Arg: "a"}
	if err := CheckOrder([]Change{pol, cordon}); err != nil {
		t.Errorf("a policy first: %v", err)
	}
	if err := CheckOrder([]Change{cordon, pol}); err == nil || !strings.Contains(err.Error(), "must be the first change") {
		t.Errorf("a policy second: %v", err)
	}
	if err := CheckOrder([]Change{pol, pol}); err == nil {
		t.Error("two policies accepted")
	}
}

// machineConfigYAML is a MachineConfig for the worker pool.
const machineConfigYAML = `apiVersion: machineconfiguration.openshift.io/v1
kind: MachineConfig
metadata:
  name: 99-worker-chrony
  labels: {machineconfiguration.openshift.io/role: worker}
spec:
  config:
    ignition: {version: 3.4.0}
    storage:
      files:
      - path: /etc/chrony.conf
        mode: 420
        contents: {source: "data:,server%20ntp.example.com"}
`

// poolSnapshot is a snapshot with a worker pool and its node running the
// pool's configuration.
func poolSnapshot(t *testing.T) *Snapshot {
	t.Helper()
	pool := object("machineconfiguration.openshift.io/v1", "MachineConfigPool", "", "worker")
	pool.Object["spec"] = map[string]any{
		"machineConfigSelector": map[string]any{"matchLabels": map[string]any{"machineconfiguration.openshift.io/role": "worker"}},
		"nodeSelector":          map[string]any{"matchLabels": map[string]any{"node-role.kubernetes.io/worker": ""}},
		"configuration":         map[string]any{"name": "rendered-worker-new"}}
	pool.Object["status"] = map[string]any{"configuration": map[string]any{"name": "rendered-worker-old"}}
	rendered := object("machineconfiguration.openshift.io/v1", "MachineConfig", "", "rendered-worker-old")
	rendered.SetAnnotations(map[string]string{"machineconfiguration.openshift.io/release-image-version": "4.16.3"})
	rendered.Object["spec"] = map[string]any{"osImageURL": "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:0123"}
	snap, _, err := SnapshotOf([]unstructured.Unstructured{object("v1", "Node", "", "n"), pool, rendered}, time.Now(), "test")
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func TestAMachineConfigChangeNeedsAPoolThatSelectsIt(t *testing.T) {
	mc, err := ParseChange("machineconfig=" + writeFile(t, "mc.yaml", machineConfigYAML))
	if err != nil {
		t.Fatal(err)
	}
	if err := checkAgainst(poolSnapshot(t), []Change{mc}); err != nil {
		t.Errorf("a worker MachineConfig on a snapshot with a worker pool: %v", err)
	}
	plain, _, err := SnapshotOf([]unstructured.Unstructured{object("v1", "Node", "", "n")}, time.Now(), "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := checkAgainst(plain, []Change{mc}); err == nil || !strings.Contains(err.Error(), "the snapshot has no MachineConfigPools") {
		t.Errorf("on a plain Kubernetes snapshot: %v", err)
	}
	infra, err := ParseChange("machineconfig=" + writeFile(t, "infra.yaml", strings.ReplaceAll(machineConfigYAML, "worker", "infra")))
	if err != nil {
		t.Fatal(err)
	}
	if err := checkAgainst(poolSnapshot(t), []Change{infra}); err == nil || !strings.Contains(err.Error(), "99-infra-chrony (labels map[machineconfiguration.openshift.io/role:infra]) is selected by no MachineConfigPool") {
		t.Errorf("an infra MachineConfig without an infra pool: %v", err)
	}
	withPool, err := ParseChange("machineconfig=" + writeFile(t, "both.yaml", strings.ReplaceAll(machineConfigYAML, "worker", "infra")+`---
apiVersion: machineconfiguration.openshift.io/v1
kind: MachineConfigPool
metadata: {name: infra}
spec:
  machineConfigSelector: {matchExpressions: [{key: machineconfiguration.openshift.io/role, operator: In, values: [worker, infra]}]}
  nodeSelector: {matchLabels: {node-role.kubernetes.io/infra: ""}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := checkAgainst(poolSnapshot(t), []Change{withPool}); err != nil {
		t.Errorf("an infra MachineConfig with the infra pool it makes: %v", err)
	}
}

func TestTheSimulationsMCORendersWithTheSnapshotsImageAndRebootsOnItsClock(t *testing.T) {
	o, err := mcoOptions(poolSnapshot(t), 10, 3*time.Minute)
	if err != nil || o == nil {
		t.Fatalf("options %+v, %v", o, err)
	}
	if o.OSImageURL != "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:0123" || o.ReleaseVersion != "4.16.3" || o.FromRelease {
		t.Errorf("the MCO renders with %+v, want the image and version of what the nodes run", o)
	}
	// The daemon keeps the cluster's timings on the simulation's clock.
	if o.Daemon.RebootDuration != 3*time.Minute || o.Daemon.ApplyDuration != 30*time.Second || o.Daemon.DrainRetry != time.Minute ||
		o.Daemon.Clock != (simclock.Scaled{Speed: 10}) {
		t.Errorf("daemon timings %+v, want the cluster's on a clock at 10x", o.Daemon)
	}
	plain, _, _ := SnapshotOf([]unstructured.Unstructured{object("v1", "Node", "", "n")}, time.Now(), "test")
	if o, err := mcoOptions(plain, 10, time.Minute); o != nil || err != nil {
		t.Errorf("a snapshot without pools runs an MCO: %+v, %v", o, err)
	}
}

func TestARestoredNodeRunsTheSimulationsRenderingOfItsConfiguration(t *testing.T) {
	r := &restorer{configName: map[string]string{"rendered-worker-new": "rendered-worker-sim"}}
	for _, tc := range []struct {
		in, want map[string]string
	}{
		{map[string]string{"machineconfiguration.openshift.io/currentConfig": "rendered-worker-new", "machineconfiguration.openshift.io/desiredConfig": "rendered-worker-new",
			"machineconfiguration.openshift.io/state": "Done"},
			map[string]string{"machineconfiguration.openshift.io/currentConfig": "rendered-worker-sim", "machineconfiguration.openshift.io/desiredConfig": "rendered-worker-sim",
				"machineconfiguration.openshift.io/state": "Done"}},
		// Half-way through a rollout: it carries on.
		{map[string]string{"machineconfiguration.openshift.io/currentConfig": "rendered-worker-old", "machineconfiguration.openshift.io/desiredConfig": "rendered-worker-new",
			"machineconfiguration.openshift.io/state": "Working"},
			map[string]string{"machineconfiguration.openshift.io/currentConfig": "rendered-worker-old", "machineconfiguration.openshift.io/desiredConfig": "rendered-worker-sim",
				"machineconfiguration.openshift.io/state": "Working"}},
		{map[string]string{"machineconfiguration.openshift.io/currentConfig": "rendered-worker-old", "machineconfiguration.openshift.io/desiredConfig": "rendered-worker-new",
			"machineconfiguration.openshift.io/state": "Degraded", "machineconfiguration.openshift.io/reason": "failed to drain"},
			map[string]string{"machineconfiguration.openshift.io/currentConfig": "rendered-worker-old", "machineconfiguration.openshift.io/desiredConfig": "rendered-worker-sim",
				"machineconfiguration.openshift.io/state": "Degraded", "machineconfiguration.openshift.io/reason": "failed to drain", "sim.capstan.dev/mcd-fail": "failed to drain"}},
		// Never managed: the MCO gives it its pool's configuration.
		{map[string]string{}, nil},
	} {
		got := r.configAnnotations(tc.in)
		if len(got) != len(tc.want) {
			t.Errorf("%v: %v, want %v", tc.in, got, tc.want)
			continue
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%v: %v, want %v", tc.in, got, tc.want)
				break
			}
		}
	}
}

func TestScalingKeepsSomeTimeOfEveryDuration(t *testing.T) {
	if got := scaled(10*time.Minute, 60); got != 10*time.Second {
		t.Errorf("10m at 60x: %s", got)
	}
	if got := scaled(time.Nanosecond, 60); got != time.Millisecond {
		t.Errorf("1ns at 60x: %s, want the floor of 1ms", got)
	}
	if got := scaled(0, 60); got != 0 {
		t.Errorf("0 at 60x: %s", got)
	}
	for in, want := range map[int64]int64{300: 5, 301: 6, 1: 1, 0: 0, 30: 1} {
		if got := scaledSeconds(in, 60); got != want {
			t.Errorf("%ds at 60x: %d, want %d", in, got, want)
		}
	}
	if s := MaxSpeed(); s != 100 {
		t.Errorf("MaxSpeed() = %g, want 100 (one taint a zone every 100 ms at 0.1 nodes a second)", s)
	}
	for n, want := range map[int][2]time.Duration{
		10:     {40 * time.Second, 80 * time.Second},
		2000:   {40 * time.Second, 80 * time.Second},
		5000:   {100 * time.Second, 200 * time.Second},
		100000: {2000 * time.Second, 4000 * time.Second},
	} {
		if lease, grace := nodeLeases(n); lease != want[0] || grace != want[1] {
			t.Errorf("nodeLeases(%d) = %s, %s; want %s, %s", n, lease, grace, want[0], want[1])
		}
	}
}

func toUnstructured(t *testing.T, obj runtime.Object) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

func TestARestoredPodIsBoundWhereItRanWithItsTimesScaled(t *testing.T) {
	p := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop", UID: "u1", ResourceVersion: "7",
			Annotations:     map[string]string{"kubernetes.io/config.mirror": "x", "team": "a"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-1a", UID: "rs"}}},
		Spec: corev1.PodSpec{NodeName: "worker-2", Priority: new(int32(1000)), PriorityClassName: "high",
			ServiceAccountName: "web", TerminationGracePeriodSeconds: new(int64(30)),
			Tolerations: []corev1.Toleration{{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists,
				Effect: corev1.TaintEffectNoExecute, TolerationSeconds: new(int64(300))}},
			Volumes: []corev1.Volume{{Name: "kube-api-access-x1", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}},
				{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			Containers: []corev1.Container{{Name: "c", VolumeMounts: []corev1.VolumeMount{{Name: "kube-api-access-x1"}, {Name: "data"}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	out, err := restorePod(toUnstructured(t, p), 10, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case out.Spec.NodeName != "worker-2":
		t.Errorf("bound to %q", out.Spec.NodeName)
	case out.UID != "" || out.ResourceVersion != "" || out.OwnerReferences != nil:
		t.Errorf("kept server fields or owners: %+v", out.ObjectMeta)
	case out.Annotations["kubernetes.io/config.mirror"] != "" || out.Annotations["team"] != "a":
		t.Errorf("annotations %v", out.Annotations)
	case out.Spec.Priority != nil || out.Spec.PriorityClassName != "high":
		t.Errorf("priority %v class %q: admission must set it from the class", out.Spec.Priority, out.Spec.PriorityClassName)
	case *out.Spec.TerminationGracePeriodSeconds != 3 || *out.Spec.Tolerations[0].TolerationSeconds != 30:
		t.Errorf("grace %d toleration %d, want 3 and 30 at 10x", *out.Spec.TerminationGracePeriodSeconds, *out.Spec.Tolerations[0].TolerationSeconds)
	case len(out.Spec.Volumes) != 1 || len(out.Spec.Containers[0].VolumeMounts) != 1 || out.Spec.Volumes[0].Name != "data":
		t.Errorf("volumes %v mounts %v: the token volume is admission's to add", out.Spec.Volumes, out.Spec.Containers[0].VolumeMounts)
	}
	defaulted := p.DeepCopy()
	defaulted.Spec.TerminationGracePeriodSeconds = nil
	if out, err := restorePod(toUnstructured(t, defaulted), 10, time.Now(), nil); err != nil || *out.Spec.TerminationGracePeriodSeconds != 3 {
		t.Errorf("a pod without a grace period: %v %v, want the default 30 s at 10x", out.Spec.TerminationGracePeriodSeconds, err)
	}
	if *p.Spec.Tolerations[0].TolerationSeconds != 300 {
		t.Error("the snapshot's pod was changed")
	}
	// Its kubelet keeps what its status was: started 100 minutes before
	// the snapshot (10 at 10x), restarted twice, not ready.
	taken := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	unready := p.DeepCopy()
	unready.Status.StartTime = &metav1.Time{Time: taken.Add(-100 * time.Minute)}
	unready.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", RestartCount: 2}}
	unready.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	out, err = restorePod(toUnstructured(t, unready), 10, taken, nil)
	if err != nil {
		t.Fatal(err)
	}
	var rs sim.RestoredStatus
	if err := json.Unmarshal([]byte(out.Annotations[sim.RestoredStatusAnnotation]), &rs); err != nil || rs.StartedAgoSeconds != 600 || rs.Restarts["c"] != 2 || !rs.NotReady {
		t.Errorf("restored status %+v (%v); want started 600 s ago, 2 restarts of c, not ready", rs, err)
	}
	for _, phase := range []corev1.PodPhase{corev1.PodSucceeded, corev1.PodFailed} {
		done := p.DeepCopy()
		done.Status.Phase = phase
		if out, err := restorePod(toUnstructured(t, done), 10, time.Now(), nil); err != nil || out != nil {
			t.Errorf("a %s pod restored: %v %v", phase, out, err)
		}
	}
}

func TestARestoredNodeHasTheSnapshotsCapacityLabelsAndOwnTaints(t *testing.T) {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "ip-10-0-1-5", Labels: map[string]string{
			sim.LabelZone: "us-east-1a", sim.LabelInstanceType: "m6i.xlarge", "node-role.kubernetes.io/worker": "", "team": "db"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule},
			{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("3500m"), corev1.ResourceMemory: resource.MustParse("15Gi"),
			corev1.ResourcePods: resource.MustParse("250"), "hugepages-2Mi": resource.MustParse("0"),
			"example.com/fpga": resource.MustParse("2")}},
	}
	spec, err := instanceSpecOf(n, "ip-10-0-1-5")
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case spec.CPU.String() != "3500m" || spec.Memory.String() != "15Gi" || spec.Pods != 250:
		t.Errorf("capacity %s %s %d", spec.CPU.String(), spec.Memory.String(), spec.Pods)
	case spec.Zone != "us-east-1a" || spec.InstanceType != "m6i.xlarge" || spec.Role != "worker" || spec.Labels["team"] != "db":
		t.Errorf("placement or labels %+v", spec)
	case len(spec.Taints) != 1 || spec.Taints[0].Key != "dedicated":
		t.Errorf("taints %v: the controllers' taints come from the private cluster's own conditions", spec.Taints)
	case len(spec.ExtendedResources) != 1 || fpga(spec.ExtendedResources) != 2:
		t.Errorf("extended resources %v", spec.ExtendedResources)
	case spec.Annotations[machine.MachineAnnotation] != "openshift-machine-api/ip-10-0-1-5":
		t.Errorf("annotations %v", spec.Annotations)
	}
	delete(n.Status.Allocatable, corev1.ResourceCPU)
	if _, err := instanceSpecOf(n, ""); err == nil || !strings.Contains(err.Error(), "ip-10-0-1-5") {
		t.Errorf("a node without cpu: %v", err)
	}
}

func TestAMachineSetsSizeComesFromANodeOrItsAnnotations(t *testing.T) {
	aws := &runtime.RawExtension{Raw: []byte(`{"kind":"AWSMachineProviderConfig","instanceType":"m6i.xlarge","placement":{"availabilityZone":"us-east-1b","region":"us-east-1"}}`)}
	raw, err := providerSpecOf("MachineSet a", map[string]string{"machine.openshift.io/vCPU": "4", "machine.openshift.io/memoryMb": "16384"}, nil, aws, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ps machine.ProviderSpec
	if err := json.Unmarshal(raw.Raw, &ps); err != nil {
		t.Fatal(err)
	}
	if ps.Zone != "us-east-1b" || ps.Region != "us-east-1" || ps.InstanceType != "m6i.xlarge" || ps.CPU.String() != "4" || ps.Memory.String() != "16Gi" {
		t.Errorf("from annotations and an AWS spec: %+v cpu %v memory %v", ps, ps.CPU, ps.Memory)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{sim.LabelZone: "z"}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi")}}}
	raw, err = providerSpecOf("MachineSet b", nil, nil, nil, node)
	if err != nil {
		t.Fatal(err)
	}
	ps = machine.ProviderSpec{}
	_ = json.Unmarshal(raw.Raw, &ps)
	if ps.Zone != "z" || ps.CPU.String() != "2" || ps.Memory.String() != "8Gi" {
		t.Errorf("from a node: %+v", ps)
	}
	// A node of the MachineSet is what its nodes offer: less than the
	// instance type its annotations describe (system-reserved).
	raw, err = providerSpecOf("MachineSet a", map[string]string{"machine.openshift.io/vCPU": "4", "machine.openshift.io/memoryMb": "16384"}, nil, aws, node)
	if err != nil {
		t.Fatal(err)
	}
	ps = machine.ProviderSpec{}
	_ = json.Unmarshal(raw.Raw, &ps)
	if ps.Zone != "us-east-1b" || ps.CPU.String() != "2" || ps.Memory.String() != "8Gi" || ps.InstanceType != "m6i.xlarge" {
		t.Errorf("from annotations and a node: %+v cpu %v memory %v; want the node's size", ps, ps.CPU, ps.Memory)
	}
	capstan := machine.RawProviderSpec(machine.ProviderSpec{InstanceType: "capstan.large", Zone: "sim-zone-b"})
	if raw, err := providerSpecOf("MachineSet c", nil, nil, capstan, node); err != nil || !bytes.Equal(raw.Raw, capstan.Raw) {
		t.Errorf("a capstan spec is not kept as it is: %s %v", raw.Raw, err)
	}
	if _, err := providerSpecOf("MachineSet d", nil, nil, aws, nil); err == nil || !strings.Contains(err.Error(), "MachineSet d") {
		t.Errorf("a MachineSet of unknown size: %v", err)
	}
	if _, err := providerSpecOf("MachineSet e", map[string]string{"machine.openshift.io/vCPU": "x", "machine.openshift.io/memoryMb": "1"}, nil, nil, nil); err == nil || !strings.Contains(err.Error(), "vCPU") {
		t.Errorf("a bad vCPU annotation: %v", err)
	}
}

// The ClusterAutoscaler's delays stay the cluster's: the autoscaler runs
// them on a scaled clock (simclock).
func TestAClusterAutoscalerKeepsTheClustersDelays(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "autoscaling.openshift.io/v1", "kind": "ClusterAutoscaler",
		"metadata": map[string]any{"name": "default"},
		"spec":     map[string]any{"scaleDown": map[string]any{"enabled": true, "unneededTime": "5m"}, "maxPodGracePeriod": int64(600)}}}
	want := u.DeepCopy()
	if err := prepareApply(u, 10); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(u, want) {
		t.Errorf("prepareApply changed a ClusterAutoscaler: %v, want %v", u.Object, want.Object)
	}
	bare := &unstructured.Unstructured{Object: map[string]any{"kind": "ClusterAutoscaler", "metadata": map[string]any{"name": "default"}}}
	if err := prepareApply(bare, 10); err != nil {
		t.Fatal(err)
	}
	if on, _, _ := unstructured.NestedBool(bare.Object, "spec", "scaleDown", "enabled"); !on {
		t.Error("a ClusterAutoscaler without scaleDown scales down; in the simulation, it must still")
	}
	o := RunOptions{Speed: 20, Snapshot: &Snapshot{Objects: map[string][]unstructured.Unstructured{}}}
	if c, ok := clusterOptions(t.TempDir(), &o).Autoscaler.Clock.(simclock.Scaled); !ok || c.Speed != 20 {
		t.Errorf("the autoscaler's clock is %#v, want simclock.Scaled at 20x", c)
	}
}

func TestTheTableSumsUpEachWorkload(t *testing.T) {
	r := &Report{Speed: 10, Nodes: 6, Pods: 20, Settled: true, Duration: Duration(6 * time.Minute),
		Changes: []AppliedChange{{Change: "zone-outage=a"}},
		Removed: []PodRemoval{{Pod: "d/web-1", Workload: "Deployment d/web", Node: "a-1", Reason: "DeletionByTaintManager"},
			{Pod: "d/web-2", Workload: "Deployment d/web", Node: "a-1", Reason: "DeletionByTaintManager"}},
		Placed:  []PodPlacement{{Pod: "d/web-3", Workload: "Deployment d/web", Node: "b-1"}, {Pod: "d/web-4", Workload: "Deployment d/web", Node: "b-1"}},
		Pending: []PendingPod{{Pod: "d/db-0", Workload: "StatefulSet d/db", Scheduler: "0/3 nodes are available"}},
		Rollouts: []PoolRollout{{Pool: "worker", Config: "rendered-worker-2", Nodes: 2, Updated: 1, MaxUnavailable: 1, Started: Duration(time.Second),
			Longest: "b-1 (5m0s)", Order: []NodeUpdate{
				{Node: "a-1", Zone: "a", Targeted: Duration(time.Second), Updated: ptr.To(Duration(4 * time.Minute)), State: "Done"},
				{Node: "b-1", Zone: "b", Targeted: Duration(4 * time.Minute), State: "Degraded", Reason: "failed to drain"}}}},
	}
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"settled after 6m0s", "Deployment d/web", "b-1 x2", "DeletionByTaintManager 2", "StatefulSet d/db  1     the changes", "0/3 nodes are available",
		"FAIL: 1 pod pending because of the changes (StatefulSet d/db); pool worker updated 1 of 2 nodes; settled after 6m0s, 2 pods removed, 2 placed\n",
		"Pool worker rolled out rendered-worker-2 from 1s, maxUnavailable 1: 1 of 2 nodes updated at the end; longest b-1 (5m0s).",
		"a-1   a     1s        4m0s     Done", "b-1   b     4m0s      -        Degraded: failed to drain"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table has no %q:\n%s", want, out)
		}
	}
}

func fpga(rl map[corev1.ResourceName]resource.Quantity) int64 {
	q := rl["example.com/fpga"]
	return q.Value()
}

// A pool is rendered once it targets the rendering of its MachineConfigs
// as they are now: one of the same names rendered before the snapshot's
// content replaced the installer's is not (the MCO will render again and
// roll every node).
func TestAPoolIsRenderedFromItsConfigurationsAsTheyAreNow(t *testing.T) {
	mc := func(content string) mcfgv1.MachineConfig {
		return mcfgv1.MachineConfig{ObjectMeta: metav1.ObjectMeta{Name: "00-worker", Labels: map[string]string{mco.RoleLabel: "worker"}},
			Spec: mcfgv1.MachineConfigSpec{Config: runtime.RawExtension{Raw: []byte(`{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/x","contents":{"source":"data:,` + content + `"}}]}}`)}}}
	}
	rendering := func(c mcfgv1.MachineConfig) string {
		spec, err := mco.Merge("worker", []*mcfgv1.MachineConfig{&c}, "quay.io/os@sha256:1", "")
		if err != nil {
			t.Fatal(err)
		}
		name, err := mco.RenderedName("worker", spec)
		if err != nil {
			t.Fatal(err)
		}
		return name
	}
	installer, snapshot := mc("installer"), mc("snapshot")
	pool := &mcfgv1.MachineConfigPool{ObjectMeta: metav1.ObjectMeta{Name: "worker"}, Spec: mcfgv1.MachineConfigPoolSpec{
		MachineConfigSelector: &metav1.LabelSelector{MatchLabels: map[string]string{mco.RoleLabel: "worker"}}}}
	pool.Spec.Configuration.Name = rendering(installer)
	pool.Spec.Configuration.Source = []corev1.ObjectReference{{Name: "00-worker"}}
	all := []mcfgv1.MachineConfig{snapshot, {ObjectMeta: metav1.ObjectMeta{Name: pool.Spec.Configuration.Name}}}
	if why := renderedFrom(pool, all, "quay.io/os@sha256:1", ""); !strings.Contains(why, "not \""+rendering(snapshot)+"\"") {
		t.Errorf("a pool rendered from the installer's content: %q", why)
	}
	pool.Spec.Configuration.Name = rendering(snapshot)
	if why := renderedFrom(pool, all, "quay.io/os@sha256:1", ""); why != "" {
		t.Errorf("a pool rendered from the snapshot's content: %q", why)
	}
	if why := renderedFrom(pool, all, "quay.io/os@sha256:2", ""); why == "" {
		t.Error("a rendering with another machine OS image counts as rendered")
	}
}

// The verdict is the report in one line: OK when the changes left
// nothing pending, blocked, unfinished or unsettled (pods removed and
// placed again are what a change does), FAIL naming each finding
// otherwise; pods pending before the changes are not theirs. Node rows
// are grouped by zone and MachineSet.
func TestTheVerdictSumsTheRunUpInOneLine(t *testing.T) {
	ok := &Report{Settled: true, Duration: Duration(4 * time.Minute), Changes: []AppliedChange{{Change: "zone-outage=a"}},
		Removed: []PodRemoval{{Pod: "d/web-1", Workload: "Deployment d/web"}},
		Placed:  []PodPlacement{{Pod: "d/web-2", Workload: "Deployment d/web"}},
		NodesAdded: []NodeChange{{Node: "b-2", Zone: "b", MachineSet: "ms-b", At: Duration(time.Minute), For: []string{"d/web-2"}},
			{Node: "b-3", Zone: "b", MachineSet: "ms-b", At: Duration(2 * time.Minute), For: []string{"d/web-2"}}},
		Pending: []PendingPod{{Pod: "d/big-0", Workload: "StatefulSet d/big", AlreadyPending: true}}}
	v := ok.verdict()
	if v.Outcome != "OK" || !slices.Equal(v.Findings, []string{FindingRemoved}) ||
		v.Line != "OK: settled after 4m0s, 1 pod removed, 1 placed, 2 nodes added (MachineSet ms-b x2), 1 pod pending before the changes still pending" {
		t.Errorf("a run that recovered: %+v", v)
	}
	bad := &Report{Settled: false, Duration: Duration(time.Hour), Changes: []AppliedChange{{Change: "drain=a-1"}, {Change: "scale=ms-x=3", Error: "no MachineSet"}},
		Pending:       []PendingPod{{Pod: "d/web-3", Workload: "Deployment d/web"}, {Pod: "d/web-4", Workload: "Deployment d/web"}},
		BlockedDrains: []BlockedDrain{{Node: "a-1"}}}
	v = bad.verdict()
	want := []string{FindingError, FindingPending, FindingBlocked, FindingUnsettled}
	if v.Outcome != "FAIL" || !slices.Equal(v.Findings, want) ||
		v.Line != "FAIL: 1 change not applied (scale=ms-x=3); 2 pods pending because of the changes (Deployment d/web x2); 1 drain blocked (a-1); still changing at --for (1h0m0s)" {
		t.Errorf("a run that failed: %+v", v)
	}
	if got := v.FailsOn([]string{FindingBlocked, FindingRemoved}); !slices.Equal(got, []string{FindingBlocked}) {
		t.Errorf("--fail-on blocked,removed: %v", got)
	}
	if got, err := ParseFailOn("any"); err != nil || len(got) != 6 || slices.Contains(got, FindingRemoved) {
		t.Errorf("--fail-on any: %v %v", got, err)
	}
	if _, err := ParseFailOn("pending,late"); err == nil || !strings.Contains(err.Error(), `"late" is not a finding`) {
		t.Errorf("--fail-on late: %v", err)
	}
	var b bytes.Buffer
	if err := ok.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "added  b     ms-b        2      1m0s      2m0s") || !strings.Contains(b.String(), "ms-b       2            Deployment d/web") ||
		!strings.HasPrefix(b.String(), "OK: ") {
		t.Errorf("the table:\n%s", b.String())
	}
}

// The MachineSets a TriggeredScaleUp message names, as the autoscaler
// writes it.
func TestTheScaleUpsOfAPodAreReadFromItsEvent(t *testing.T) {
	msg := "pod triggered scale-up: [{MachineSet/openshift-machine-api/prod-worker-b 1->2 (max: 3)} {MachineSet/openshift-machine-api/prod-worker-c 0->1 (max: 3)}]"
	var got []string
	for _, m := range scaledUpSet.FindAllStringSubmatch(msg, -1) {
		got = append(got, m[1])
	}
	if !slices.Equal(got, []string{"prod-worker-b", "prod-worker-c"}) {
		t.Errorf("MachineSets of %q: %v", msg, got)
	}
}

// Availability counts each workload's Ready pods from the changes'
// beginning (its lowest, against what it wants) and the time each
// budget spends below its desired healthy pods, in simulated time.
func TestAvailabilityFollowsReadyPodsAndBudgets(t *testing.T) {
	pod := func(name string, ready bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "d", Name: name}, Spec: corev1.PodSpec{NodeName: "n"}}
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
		return p
	}
	a := newAvailability(func(*corev1.Pod) string { return "Deployment d/web" })
	for _, n := range []string{"web-1", "web-2", "web-3"} {
		a.pod(pod(n, true), false)
	}
	budget := func(healthy int32) *policyv1.PodDisruptionBudget {
		return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "d", Name: "web"},
			Status: policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 1, DesiredHealthy: 2, CurrentHealthy: healthy}}
	}
	a.budget(budget(3)) // before the beginning: not counted
	a.begin(time.Now(), func(string) *corev1.Pod { return nil })
	a.pod(pod("web-1", false), false) // NotReady
	a.pod(pod("web-2", true), true)   // deleted
	a.budget(budget(1))
	a.pod(pod("web-4", true), false)
	a.budget(budget(2))
	desired := func(w string) (int32, bool) { return 3, w == "Deployment d/web" }
	ws, bs := a.report(desired, func(d time.Duration) time.Duration { return d * 10 })
	if len(ws) != 1 || ws[0] != (WorkloadAvailability{Workload: "Deployment d/web", Desired: 3, ReadyAtStart: 3, LowestReady: 1, ReadyAtEnd: 2}) {
		t.Errorf("workloads: %+v", ws)
	}
	if len(bs) != 1 || bs[0].Budget != "d/web" || bs[0].LowestHealthy != 1 || bs[0].DesiredHealthy != 2 || bs[0].Below <= 0 {
		t.Errorf("budgets: %+v", bs)
	}
	r := &Report{Settled: true, Availability: ws, Budgets: bs}
	if v := r.verdict(); v.Outcome != "OK" || !slices.Contains(v.Findings, FindingBudget) || !strings.Contains(v.Line, "lowest availability Deployment d/web 1 of 3 Ready") ||
		!strings.Contains(v.Line, "PodDisruptionBudget d/web below 2 healthy for") {
		t.Errorf("the verdict: %+v", v)
	}
}

// A pod on a node that was lost at the snapshot has been tolerating its
// taint since the taint came: what is left of the toleration runs on.
func TestARestoredTolerationGoesOnFromItsTaint(t *testing.T) {
	taken := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	taints := []corev1.Taint{{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute, TimeAdded: &metav1.Time{Time: taken.Add(-100 * time.Second)}},
		{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule}}
	tolerate := func(key string, seconds int64) corev1.Toleration {
		return corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: new(seconds)}
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "d"},
		Spec: corev1.PodSpec{NodeName: "worker-2", Tolerations: []corev1.Toleration{
			tolerate(corev1.TaintNodeUnreachable, 300), tolerate(corev1.TaintNodeUnreachable, 60), tolerate(corev1.TaintNodeNotReady, 300)}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	out, err := restorePod(toUnstructured(t, p), 10, taken, taints)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{20, 0, 30} {
		if got := *out.Spec.Tolerations[i].TolerationSeconds; got != want {
			t.Errorf("toleration %d (%s for %ds) restored with %ds at 10x, want %ds: the taint came 100 s before the snapshot", i,
				p.Spec.Tolerations[i].Key, *p.Spec.Tolerations[i].TolerationSeconds, got, want)
		}
	}
}

// The restore finds the revision a StatefulSet or DaemonSet was rolling
// out to at the snapshot; an anonymized snapshot keeps which it was and
// drops the pod template it holds.
func TestTheUpdateRevisionOfTheSnapshot(t *testing.T) {
	sts := object("apps/v1", "StatefulSet", "d", "db")
	_ = unstructured.SetNestedField(sts.Object, "db-7f00d1e5", "status", "updateRevision")
	ds := object("apps/v1", "DaemonSet", "d", "agent")
	ds.SetUID("ds-uid")
	rev := func(name string, n int64, hash string) unstructured.Unstructured {
		cr := object("apps/v1", "ControllerRevision", "d", name)
		cr.SetOwnerReferences([]metav1.OwnerReference{{Kind: "DaemonSet", Name: "agent", UID: "ds-uid"}})
		cr.SetLabels(map[string]string{appsv1.DefaultDaemonSetUniqueLabelKey: hash})
		cr.Object["revision"] = n
		cr.Object["data"] = map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"containers": []any{map[string]any{"name": "c", "image": "registry.example/agent:2", "env": []any{map[string]any{"name": "TOKEN", "value": "t0ken"}}}}}}}}
		return cr
	}
	snap := validSnapshot()
	snap.Objects["apps/v1/statefulsets"] = []unstructured.Unstructured{sts}
	snap.Objects["apps/v1/daemonsets"] = []unstructured.Unstructured{ds}
	snap.Objects["apps/v1/controllerrevisions"] = []unstructured.Unstructured{rev("agent-5b9c", 1, "5b9c"), rev("agent-6d8f", 3, "6d8f"), rev("agent-77aa", 2, "77aa")}
	r := &restorer{snap: snap}
	if got := r.updateRevision("StatefulSet", &sts); got != "7f00d1e5" {
		t.Errorf("StatefulSet: update revision %q, want the hash of its status.updateRevision", got)
	}
	if got := r.updateRevision("DaemonSet", &ds); got != "6d8f" {
		t.Errorf("DaemonSet: update revision %q, want the hash of its newest ControllerRevision", got)
	}
	if got := revisionHash("db-7f00d1e5"); got != revisionHash("x1y2z3-7f00d1e5") {
		t.Errorf("a renamed StatefulSet's revision hash %q differs", got)
	}
	if err := snap.Anonymize(); err != nil {
		t.Fatal(err)
	}
	for _, cr := range snap.Objects["apps/v1/controllerrevisions"] {
		if _, ok := cr.Object["data"]; ok {
			t.Errorf("anonymized ControllerRevision %s keeps its data (a pod template)", cr.GetName())
		}
		if n, _, _ := unstructured.NestedInt64(cr.Object, "revision"); n == 0 || cr.GetLabels()[appsv1.DefaultDaemonSetUniqueLabelKey] == "" {
			t.Errorf("anonymized ControllerRevision %s lost its revision number or hash: %v", cr.GetName(), cr.Object)
		}
	}
	anonDS := snap.Objects["apps/v1/daemonsets"][0]
	if got := (&restorer{snap: snap}).updateRevision("DaemonSet", &anonDS); got != "6d8f" {
		t.Errorf("anonymized DaemonSet: update revision %q, want 6d8f", got)
	}
}

func TestTheMonitorPeriodLeavesTheControllerTimeForEachNode(t *testing.T) {
	for _, c := range []struct {
		speed float64
		nodes int
		want  time.Duration
	}{
		{10, 100, 50 * time.Millisecond},
		{100, 100, 50 * time.Millisecond},
		{10, 1000, 100 * time.Millisecond},
		{100, 5000, 500 * time.Millisecond},
		{1, 100000, 10 * time.Second},
	} {
		if got := monitorPeriod(5*time.Second, c.speed, c.nodes); got != c.want {
			t.Errorf("%d nodes at %gx: monitor period %s, want %s", c.nodes, c.speed, got, c.want)
		}
	}
}

func TestTheReportSaysWhenTheTaintsFellBehindTheSpeed(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	zoneOf := map[string]string{"a-0": "a", "a-1": "a", "a-2": "a", "a-3": "a", "b-0": "b"}
	down := map[string]bool{"a-0": true, "a-1": true, "a-2": true, "a-3": true}
	every := func(gap time.Duration) map[string]time.Time {
		return map[string]time.Time{"a-0": t0, "a-1": t0.Add(gap), "a-2": t0.Add(2 * gap), "a-3": t0.Add(3 * gap)}
	}
	// At 100x, 0.1 a second asks 10 a real second: one every 100 ms.
	if got := taintPace(every(100*time.Millisecond), zoneOf, down, 0.1, 100); len(got) != 0 {
		t.Errorf("taints at the pace the speed asks: %q", got)
	}
	got := taintPace(every(400*time.Millisecond), zoneOf, down, 0.1, 100)
	if len(got) != 1 || !strings.Contains(got[0], "zone a's nodes at 2.5 a real second, where 100x asks 10.0") {
		t.Errorf("taints at a quarter of the pace: %q, want a caveat naming zone a's 2.5 a second against 10", got)
	}
	// A zone not wholly down is tainted at the secondary rate.
	partly := map[string]bool{"a-0": true, "a-1": true, "a-2": true}
	if got := taintPace(every(time.Second), zoneOf, partly, 0.1, 100); len(got) != 0 {
		t.Errorf("a zone not fully disrupted: %q", got)
	}
}

func TestAnAWSClustersPodsSplitIntoDeployments(t *testing.T) {
	c := AWSCluster{Zones: []string{"a", "b"}, WorkersPerZone: 2, PodsPerWorker: []int{3, 2}, Created: time.Now(), PodsPerDeployment: 4}
	objs, err := c.Objects()
	if err != nil {
		t.Fatal(err)
	}
	replicas := map[string]int64{}
	owned := map[string]int{}
	budgets := 0
	for _, o := range objs {
		switch o.GetKind() {
		case "Deployment":
			replicas[o.GetName()], _, _ = unstructured.NestedInt64(o.Object, "spec", "replicas")
		case "Pod":
			owned[o.GetOwnerReferences()[0].Name]++
		case "PodDisruptionBudget":
			budgets++
		}
	}
	want := map[string]int64{"web-000": 4, "web-001": 4, "web-002": 2}
	if fmt.Sprint(replicas) != fmt.Sprint(want) || budgets != 3 {
		t.Errorf("10 pods in Deployments of 4: %v and %d budgets, want %v and 3", replicas, budgets, want)
	}
	if owned["web-000-7d9f8"] != 4 || owned["web-002-7d9f8"] != 2 {
		t.Errorf("pods by ReplicaSet: %v", owned)
	}
}
