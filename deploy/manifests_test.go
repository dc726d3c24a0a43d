package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/capstan-dev/capstan/internal/updateservice"
)

// build runs kustomize on a directory of deploy/, as kubectl apply -k does.
func build(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize %s: %v", dir, err)
	}
	raw, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// deployed are the components deploy/kustomization.yaml runs, and
// whether they are leader-elected (a server's every replica serves).
var deployed = map[string]bool{"scheduler": true, "machine-api": true, "autoscaler": true, "cvo": true, "mco": true,
	"hooks": true, "update-service": false, "console": false}

func TestEveryDeploymentRunsAsItsComponentLeaderElectedAndLocked(t *testing.T) {
	objs := build(t, ".")
	byKind := map[string]int{}
	deployments := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		byKind[o.GetKind()]++
		if o.GetKind() == "Deployment" {
			deployments[o.GetNamespace()+"/"+o.GetName()] = o
		}
	}
	if byKind["CustomResourceDefinition"] < 10 || byKind["Namespace"] == 0 {
		t.Errorf("the full install has %v", byKind)
	}
	for name, elected := range deployed {
		checkDeployment(t, name, elected, deployments)
	}
	if len(deployments) != len(deployed) {
		t.Errorf("%d Deployments, want %d", len(deployments), len(deployed))
	}
	for _, kind := range []string{"Service", "PodDisruptionBudget"} {
		if byKind[kind] != len(deployed) {
			t.Errorf("%d %ss, want one per Deployment", byKind[kind], kind)
		}
	}
}

// checkDeployment checks that the component's Deployment runs as its
// ServiceAccount, two replicas, leader-elected or not, health-probed and
// locked down.
func checkDeployment(t *testing.T, name string, elected bool, deployments map[string]*unstructured.Unstructured) {
	t.Helper()
	comp, err := Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	var d *unstructured.Unstructured
	for _, o := range deployments {
		sa, _, _ := unstructured.NestedString(o.Object, "spec", "template", "spec", "serviceAccountName")
		if o.GetNamespace() == comp.Namespace && sa == comp.ServiceAccount {
			d = o
		}
	}
	if d == nil {
		t.Errorf("%s: no Deployment runs as %s", name, comp.Username())
		return
	}
	spec := d.Object["spec"].(map[string]any)
	if r, _, _ := unstructured.NestedFieldNoCopy(spec, "replicas"); r != float64(2) {
		t.Errorf("%s: %v replicas; two stand by for each other", name, r)
	}
	pod, _, _ := unstructured.NestedMap(spec, "template", "spec")
	if pc, _, _ := unstructured.NestedString(pod, "priorityClassName"); pc != "system-cluster-critical" {
		t.Errorf("%s: priority class %q", name, pc)
	}
	if nonRoot, _, _ := unstructured.NestedBool(pod, "securityContext", "runAsNonRoot"); !nonRoot {
		t.Errorf("%s: may run as root", name)
	}
	containers, _, _ := unstructured.NestedSlice(pod, "containers")
	if len(containers) != 1 {
		t.Fatalf("%s: %d containers", name, len(containers))
	}
	c := containers[0].(map[string]any)
	args, _, _ := unstructured.NestedStringSlice(c, "args")
	if len(args) == 0 || args[0] != name || slices.Contains(args, "--leader-elect") != elected {
		t.Errorf("%s: args %v, want `%s ...`, leader-elected: %v", name, args, name, elected)
	}
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--health-address=:") }) {
		t.Errorf("%s: args %v serve no health endpoint", name, args)
	}
	for _, probe := range []string{"livenessProbe", "readinessProbe"} {
		if p, _, _ := unstructured.NestedString(c, probe, "httpGet", "path"); p == "" {
			t.Errorf("%s: no %s", name, probe)
		}
	}
	if ro, _, _ := unstructured.NestedBool(c, "securityContext", "readOnlyRootFilesystem"); !ro {
		t.Errorf("%s: writable root filesystem", name)
	}
	if esc, found, _ := unstructured.NestedBool(c, "securityContext", "allowPrivilegeEscalation"); !found || esc {
		t.Errorf("%s: privilege escalation allowed", name)
	}
}

// The etcd operator, which needs the cluster's etcd client certificate
// and endpoints first, is a base of its own.
func TestTheEtcdOperatorsBaseRunsItLeaderElected(t *testing.T) {
	deployments := map[string]*unstructured.Unstructured{}
	kinds := map[string]int{}
	for _, o := range build(t, "etcd-operator") {
		kinds[o.GetKind()]++
		if o.GetKind() == "Deployment" {
			deployments[o.GetNamespace()+"/"+o.GetName()] = o
		}
	}
	checkDeployment(t, "etcd-operator", true, deployments)
	if kinds["ConfigMap"] != 1 || kinds["Service"] != 1 || kinds["PodDisruptionBudget"] != 1 {
		t.Errorf("the etcd operator's base has %v", kinds)
	}
	for _, o := range build(t, ".") {
		if o.GetKind() == "Deployment" && o.GetNamespace() == "openshift-etcd-operator" {
			t.Errorf("the full install runs %s, which needs etcd's client certificate first", o.GetName())
		}
	}
}

func TestTheOpenShiftOverlayLeavesOpenShiftsOwnAndItsUsers(t *testing.T) {
	for _, o := range build(t, "openshift") {
		switch o.GetKind() {
		case "Namespace", "CustomResourceDefinition":
			t.Errorf("the overlay makes %s %s, which OpenShift has", o.GetKind(), o.GetName())
		case "Deployment":
			sc, _, _ := unstructured.NestedMap(o.Object, "spec", "template", "spec", "securityContext")
			if _, fixed := sc["runAsUser"]; fixed {
				t.Errorf("%s: a fixed user, which restricted-v2 refuses outside the namespace's range", o.GetName())
			}
			if scc := o.GetAnnotations(); scc != nil {
				t.Errorf("%s: annotations on the Deployment rather than its pods: %v", o.GetName(), scc)
			}
			ann, _, _ := unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "annotations")
			if ann["openshift.io/required-scc"] != "restricted-v2" {
				t.Errorf("%s: pods do not ask for restricted-v2: %v", o.GetName(), ann)
			}
		}
	}
}

// The update service's graph data, mounted from its ConfigMaps as the
// kubelet mounts them (a file per key under channels/ and
// blocked-edges/), is graph data the service loads.
func TestTheUpdateServicesConfigMapsAreGraphData(t *testing.T) {
	dir := t.TempDir()
	mounts := map[string]string{"update-service-channels": "channels", "update-service-blocked-edges": "blocked-edges"}
	found := 0
	for _, o := range build(t, "update-service") {
		if o.GetKind() != "ConfigMap" {
			continue
		}
		var sub string
		for prefix, s := range mounts {
			if strings.HasPrefix(o.GetName(), prefix+"-") {
				sub = s
			}
		}
		if sub == "" {
			t.Errorf("ConfigMap %s is mounted nowhere", o.GetName())
			continue
		}
		found++
		data, _, _ := unstructured.NestedStringMap(o.Object, "data")
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
		for k, v := range data {
			if err := os.WriteFile(filepath.Join(dir, sub, k), []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if found != len(mounts) {
		t.Fatalf("%d of the %d graph-data ConfigMaps", found, len(mounts))
	}
	g, err := updateservice.LoadGraphData(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Channels) == 0 || len(g.Blocked) == 0 {
		t.Errorf("graph data of %d channels, %d blocked edges", len(g.Channels), len(g.Blocked))
	}
}
