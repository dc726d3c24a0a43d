package deploy

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
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
var deployed = map[string]bool{"scheduler": true, "machine-api": true, "autoscaler": true, "cvo": true, "mco": true, "console": false}

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
			continue
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
	if len(deployments) != len(deployed) {
		t.Errorf("%d Deployments, want %d", len(deployments), len(deployed))
	}
	for _, kind := range []string{"Service", "PodDisruptionBudget"} {
		if byKind[kind] != len(deployed) {
			t.Errorf("%d %ss, want one per Deployment", byKind[kind], kind)
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
