package simulate

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/deploy"
)

func object(apiVersion, kind, ns, name string) unstructured.Unstructured {
	o := unstructured.Unstructured{Object: map[string]any{}}
	o.SetAPIVersion(apiVersion)
	o.SetKind(kind)
	o.SetNamespace(ns)
	o.SetName(name)
	return o
}

func validSnapshot() *Snapshot {
	return &Snapshot{APIVersion: SnapshotAPIVersion, Kind: SnapshotKind, Format: SnapshotFormat,
		TakenAt: metav1.NewTime(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)),
		Objects: map[string][]unstructured.Unstructured{
			"v1/namespaces":                         {object("v1", "Namespace", "", "default")},
			"v1/nodes":                              {object("v1", "Node", "", "worker-0")},
			"v1/pods":                               {object("v1", "Pod", "default", "web-0")},
			"machine.openshift.io/v1beta1/machines": {object("machine.openshift.io/v1beta1", "Machine", "openshift-machine-api", "worker-0")},
		}}
}

func encode(t *testing.T, s *Snapshot) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := s.Write(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestASnapshotLoadsAsItWasWritten(t *testing.T) {
	s, err := Load("snap.json", encode(t, validSnapshot()))
	if err != nil {
		t.Fatal(err)
	}
	pods, ok := s.Get(Resources[2])
	if !ok || len(pods) != 1 || pods[0].GetName() != "web-0" || pods[0].GetNamespace() != "default" {
		t.Errorf("pods loaded: %v (served %v), want default/web-0", pods, ok)
	}
	if _, ok := s.Get(Resources[len(Resources)-1]); ok {
		t.Errorf("%s, absent from the file, load as served", Resources[len(Resources)-1].GVR.Resource)
	}
	if !s.TakenAt.Equal(&validSnapshot().TakenAt) {
		t.Errorf("takenAt %v, want %v", s.TakenAt, validSnapshot().TakenAt)
	}
}

func TestLoadNamesWhatIsWrongWithAFile(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Snapshot)
		raw  string
		want string
	}{
		{name: "not JSON", raw: "apiVersion: v1\nkind: List\n", want: "snap.json is not a capstan snapshot"},
		{name: "another kind", raw: `{"apiVersion":"v1","kind":"List","items":[]}`, want: `its apiVersion and kind are "v1" and "List"`},
		{name: "newer format", edit: func(s *Snapshot) { s.Format = SnapshotFormat + 1 }, want: fmt.Sprintf("format %d, newer than this capstan reads (%d)", SnapshotFormat+1, SnapshotFormat)},
		{name: "no format", edit: func(s *Snapshot) { s.Format = 0 }, want: "format 0 is not a snapshot format"},
		{name: "unknown field", raw: `{"apiVersion":"capstan.dev/v1alpha1","kind":"ClusterSnapshot","format":1,"objects":{},"secrets":[]}`, want: `unknown field "secrets"`},
		{name: "unknown resource", edit: func(s *Snapshot) {
			s.Objects["v1/secrets"] = []unstructured.Unstructured{object("v1", "Secret", "default", "token")}
		}, want: `objects["v1/secrets"]: not a resource snapshots hold`},
		{name: "kind of another resource", edit: func(s *Snapshot) {
			s.Objects["v1/pods"] = append(s.Objects["v1/pods"], object("v1", "Node", "", "worker-1"))
		}, want: `objects["v1/pods"][1]: apiVersion "v1" and kind "Node", want "v1" and "Pod"`},
		{name: "no name", edit: func(s *Snapshot) {
			s.Objects["v1/nodes"] = []unstructured.Unstructured{object("v1", "Node", "", "")}
		}, want: `objects["v1/nodes"][0]: no metadata.name`},
		{name: "namespaced without namespace", edit: func(s *Snapshot) {
			s.Objects["v1/pods"][0].SetNamespace("")
		}, want: "Pod web-0 has no namespace"},
		{name: "cluster-scoped with namespace", edit: func(s *Snapshot) {
			s.Objects["v1/nodes"][0].SetNamespace("default")
		}, want: `Node worker-0 is cluster-scoped but has namespace "default"`},
		{name: "no nodes", edit: func(s *Snapshot) { delete(s.Objects, "v1/nodes") }, want: `objects: no "v1/nodes"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := []byte(tc.raw)
			if tc.edit != nil {
				s := validSnapshot()
				tc.edit(s)
				data = encode(t, s)
			}
			_, err := Load("snap.json", data)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load: %v, want an error with %q", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "snap.json") {
				t.Errorf("the error does not name the file first: %v", err)
			}
		})
	}
}

func TestEveryResourceHasItsOwnKey(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range Resources {
		if seen[r.Key()] {
			t.Errorf("two resources share the key %s", r.Key())
		}
		seen[r.Key()] = true
		if r.GVR.Resource == "secrets" || r.GVR.Resource == "configmaps" {
			t.Errorf("a snapshot reads %s", r.GVR.Resource)
		}
	}
}

// deploy/simulate's ClusterRole lets a snapshot list exactly what it
// reads: every resource of Resources, with list and nothing else.
func TestTheReadersClusterRoleIsWhatASnapshotLists(t *testing.T) {
	objs, err := deploy.RBAC("simulate")
	if err != nil {
		t.Fatal(err)
	}
	granted := map[string]bool{}
	for _, o := range objs {
		if o.GetKind() != "ClusterRole" {
			continue
		}
		var role rbacv1.ClusterRole
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
			t.Fatal(err)
		}
		for _, rule := range role.Rules {
			if !slices.Equal(rule.Verbs, []string{"list"}) || len(rule.ResourceNames) > 0 || len(rule.NonResourceURLs) > 0 {
				t.Errorf("rule %v grants more than list", rule)
			}
			for _, g := range rule.APIGroups {
				for _, r := range rule.Resources {
					granted[g+"/"+r] = true
				}
			}
		}
	}
	for _, r := range Resources {
		key := r.GVR.Group + "/" + r.GVR.Resource
		if !granted[key] {
			t.Errorf("deploy/simulate/rbac.yaml does not let a snapshot list %s", r.Key())
		}
		delete(granted, key)
	}
	for key := range granted {
		t.Errorf("deploy/simulate/rbac.yaml grants list of %s, which a snapshot does not read", key)
	}
}

func TestASnapshotKeepsNoMachineConfigContent(t *testing.T) {
	secret := "data:;base64,eyJhdXRocyI6eyJxdWF5LmlvIjp7ImF1dGgiOiJzZWNyZXQifX19"
	mc := object("machineconfiguration.openshift.io/v1", "MachineConfig", "", "rendered-worker-1")
	mc.Object["spec"] = map[string]any{"config": map[string]any{
		"storage": map[string]any{"files": []any{
			map[string]any{"path": "/var/lib/kubelet/config.json", "contents": map[string]any{"source": secret}},
			map[string]any{"path": "/etc/copy.json", "contents": map[string]any{"source": secret}},
			map[string]any{"path": "/etc/other", "contents": map[string]any{"source": "data:,other"}}}},
		"systemd": map[string]any{"units": []any{map[string]any{"name": "a.service", "contents": "[Service]\nExecStart=/bin/token abc",
			"dropins": []any{map[string]any{"name": "10.conf", "contents": "Environment=TOKEN=abc"}}}}},
		"passwd": map[string]any{"users": []any{map[string]any{"name": "core", "sshAuthorizedKeys": []any{"ssh-ed25519 AAAA key"}}}},
	}}
	snap, _, err := SnapshotOf([]unstructured.Unstructured{object("v1", "Node", "", "n"), mc}, time.Now(), "test")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := snap.Write(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, leak := range []string{"eyJhdXRocyI6", "ExecStart=/bin/token", "TOKEN=abc", "AAAA key", "data:,other"} {
		if strings.Contains(out, leak) {
			t.Errorf("the snapshot keeps %q", leak)
		}
	}
	files, _, _ := unstructured.NestedSlice(snap.Objects["machineconfiguration.openshift.io/v1/machineconfigs"][0].Object, "spec", "config", "storage", "files")
	src := func(i int) string {
		s, _, _ := unstructured.NestedString(files[i].(map[string]any), "contents", "source")
		return s
	}
	if src(0) != src(1) || src(0) == src(2) || !strings.HasPrefix(src(0), "data:,capstan-snapshot-hmac-sha256-") {
		t.Errorf("digests %q %q %q: equal contents must stay equal, different ones different", src(0), src(1), src(2))
	}
}

// M3: a snapshot carries no secret that is not a Secret object. A
// sentinel planted in every field that may hold one (a container's
// environment, command and arguments, a last-applied configuration, a
// MachineConfig's password hash, LUKS key file, appended file, HTTP
// header, merged and replaced Ignition config, proxy and CA, a
// PersistentVolume's driver options and attributes) appears in neither
// the snapshot nor its anonymized copy; and digests are keyed per
// snapshot, so that a guess cannot be checked against them.
func TestASnapshotLeaksNoSentinel(t *testing.T) {
	const sentinel = "S3CR3T"
	container := func() map[string]any {
		return map[string]any{"name": "c", "image": "quay.io/x", "command": []any{"/bin/" + sentinel}, "args": []any{"--token=" + sentinel},
			"env": []any{map[string]any{"name": "PASSWORD", "value": sentinel}}}
	}
	newPod := func() unstructured.Unstructured {
		pod := object("v1", "Pod", "app", "p")
		pod.SetAnnotations(map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"env":"` + sentinel + `"}`, "kept": "yes"})
		pod.Object["spec"] = map[string]any{"containers": []any{container()}, "initContainers": []any{container()}}
		return pod
	}
	deploy := object("apps/v1", "Deployment", "app", "d")
	deploy.Object["spec"] = map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{container()}}}}
	header := []any{map[string]any{"name": "Authorization", "value": "Bearer " + sentinel}}
	resource := func() map[string]any {
		return map[string]any{"source": "https://" + sentinel + "@example.com/x", "httpHeaders": header}
	}
	mc := object("machineconfiguration.openshift.io/v1", "MachineConfig", "", "rendered-worker-1")
	mc.Object["spec"] = map[string]any{"config": map[string]any{
		"ignition": map[string]any{
			"config":   map[string]any{"merge": []any{resource()}, "replace": resource()},
			"proxy":    map[string]any{"httpsProxy": "http://user:" + sentinel + "@proxy:3128"},
			"security": map[string]any{"tls": map[string]any{"certificateAuthorities": []any{resource()}}},
		},
		"storage": map[string]any{
			"files": []any{map[string]any{"path": "/etc/a", "contents": resource(), "append": []any{resource()}}},
			"luks":  []any{map[string]any{"name": "root", "device": "/dev/sda", "keyFile": resource()}},
		},
		"passwd": map[string]any{"users": []any{map[string]any{"name": "core", "passwordHash": "$6$" + sentinel}}},
	}}
	pv := object("v1", "PersistentVolume", "", "pv")
	pv.Object["spec"] = map[string]any{"capacity": map[string]any{"storage": "1Gi"},
		"flexVolume": map[string]any{"driver": "d", "options": map[string]any{"password": sentinel}},
		"csi":        map[string]any{"driver": "c", "volumeHandle": "h", "volumeAttributes": map[string]any{"token": sentinel}}}
	// A CronJob's pods are two templates deep.
	cron := object("batch/v1", "CronJob", "app", "report")
	cron.Object["spec"] = map[string]any{"schedule": "@daily", "jobTemplate": map[string]any{"spec": map[string]any{
		"template": map[string]any{"spec": map[string]any{"containers": []any{container()}}}}}}
	objs := []unstructured.Unstructured{object("v1", "Node", "", "n"), newPod(), deploy, mc, pv, cron}

	snap, _, err := SnapshotOf(objs, time.Now(), "test")
	if err != nil {
		t.Fatal(err)
	}
	var plain bytes.Buffer
	if err := snap.Write(&plain); err != nil {
		t.Fatal(err)
	}
	if err := snap.Anonymize(); err != nil {
		t.Fatal(err)
	}
	var anon bytes.Buffer
	if err := snap.Write(&anon); err != nil {
		t.Fatal(err)
	}
	for mode, out := range map[string]string{"default": plain.String(), "--anonymize": anon.String()} {
		if i := strings.Index(out, sentinel); i >= 0 {
			t.Errorf("the %s snapshot keeps the sentinel: ...%s...", mode, out[max(0, i-120):min(len(out), i+40)])
		}
	}
	if !strings.Contains(plain.String(), `"kept":"yes"`) {
		t.Error("the other annotations went too")
	}
	// The same content, in two snapshots, digests differently.
	again, _, err := SnapshotOf([]unstructured.Unstructured{object("v1", "Node", "", "n"), newPod()}, time.Now(), "test")
	if err != nil {
		t.Fatal(err)
	}
	value := func(s *Snapshot) string {
		v, _, _ := unstructured.NestedSlice(s.Objects["v1/pods"][0].Object, "spec", "containers")
		return v[0].(map[string]any)["env"].([]any)[0].(map[string]any)["value"].(string)
	}
	first, _, _ := SnapshotOf([]unstructured.Unstructured{object("v1", "Node", "", "n"), newPod()}, time.Now(), "test")
	if value(first) == value(again) || !strings.HasPrefix(value(again), "data:,capstan-snapshot-hmac-sha256-") {
		t.Errorf("an environment value digested %q in one snapshot and %q in another: want keyed digests", value(first), value(again))
	}
}

// The caveats name what the snapshot holds that the simulation does not
// play as the cluster would: pods of controllers it does not run, and of
// workloads the snapshot lacks, which are never replaced, and pods of
// schedulers it does not run, which stay pending.
func TestCaveatsNameWhatTheSimulationDoesNotReplace(t *testing.T) {
	owned := func(name, kind, owner string) unstructured.Unstructured {
		p := object("v1", "Pod", "app", name)
		p.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "x/v1", Kind: kind, Name: owner, UID: "u", Controller: ptr.To(true)}})
		return p
	}
	rs := object("apps/v1", "ReplicaSet", "app", "web-1")
	scheduled := func(name, scheduler string) unstructured.Unstructured {
		p := object("v1", "Pod", "app", name)
		p.Object["spec"] = map[string]any{"schedulerName": scheduler}
		return p
	}
	orphan := owned("agent-x", "DaemonSet", "agent")
	orphan.Object["spec"] = map[string]any{"nodeName": "gone"}
	old := object("v1", "Namespace", "", "old")
	old.SetDeletionTimestamp(&metav1.Time{Time: time.Now()})
	snap := &Snapshot{Objects: map[string][]unstructured.Unstructured{
		"autoscaling/v2/horizontalpodautoscalers": {object("autoscaling/v2", "HorizontalPodAutoscaler", "app", "web")},
		"batch/v1/cronjobs":                       {object("batch/v1", "CronJob", "app", "report"), object("batch/v1", "CronJob", "app", "backup")},
		"apps/v1/replicasets":                     {rs},
		"v1/pods": {owned("web-1-a", "ReplicaSet", "web-1"), owned("vm-a", "VirtualMachineInstance", "vm"), owned("vm-b", "VirtualMachineInstance", "vm2"),
			owned("gone-a", "StatefulSet", "gone"), owned("static", "Node", "n"), object("v1", "Pod", "app", "bare"),
			scheduled("batch-a", "volcano"), scheduled("batch-b", "volcano"), scheduled("gpu", "gpu-scheduler"), scheduled("plain", "default-scheduler"), orphan},
		"v1/nodes":      {object("v1", "Node", "", "n")},
		"v1/namespaces": {old, object("v1", "Namespace", "", "app")},
		"v1/services":   {object("v1", "Service", "old", "web"), object("v1", "Service", "app", "web")},
	}}
	got := caveats(snap)
	want := []string{
		"2 pods run by controllers the simulation does not run (VirtualMachineInstance 2): removed, they are not replaced, where the cluster would replace them",
		"1 pod run by workloads the snapshot does not hold: removed, they are not replaced",
		"1 object of 1 namespace being deleted: left out, as they go with it",
		"1 pod bound to nodes the snapshot does not have (gone while it was taken, or awaiting the pod garbage collector): left out, as the collector deletes them",
		"1 HorizontalPodAutoscaler: the simulation serves no pod metrics, so they keep their workloads' replicas between their minimum and maximum and do not scale on load",
		"2 CronJobs restored suspended: their schedules follow the cluster's clock, which a simulation faster than real time does not keep",
		"3 pods name schedulers the simulation does not run (gpu-scheduler 1, volcano 2): made again, they stay pending, where the cluster would place them",
	}
	if !slices.Equal(got, want) {
		t.Errorf("caveats:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
