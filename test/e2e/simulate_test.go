package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/capstan-dev/capstan/deploy"
	"github.com/capstan-dev/capstan/internal/simulate"
)

// A snapshot holds the cluster's nodes, pods, machines and update state as
// the API server has them, without Secrets or managed fields, in a file
// only its owner reads.
func TestSnapshotHoldsWhatTheClusterHas(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, "snapshot")
	pod := env.CreatePod(t, ns, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{SchedulerName: "nobody", Containers: []corev1.Container{{Name: "c", Image: "registry.example/web:1"}}},
	})
	// An OpenShift object: this cluster runs no CVO, so nothing else
	// writes ClusterOperators here.
	coGVR := schema.GroupVersionResource{Group: "config.openshift.io", Version: "v1", Resource: "clusteroperators"}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	co, err := dyn.Resource(coGVR).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "config.openshift.io/v1", "kind": "ClusterOperator", "metadata": map[string]any{"name": "snapshot-e2e"}, "spec": map[string]any{}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dyn.Resource(coGVR).Delete(context.Background(), co.GetName(), metav1.DeleteOptions{}) })
	// Taken as deploy/simulate's identity, which may list and nothing
	// else: any other request would be refused and fail the command.
	if err := deploy.ApplyRBAC(ctx, dyn, "simulate"); err != nil {
		t.Fatal(err)
	}
	reader, err := deploy.Lookup("simulate")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "snap.json")
	out := capstanOK(t, "simulate", "snapshot", "--kubeconfig", kubeconfigAs(t, reader.Username(), reader.Groups()...), "-o", file)
	if !strings.Contains(out, "written to "+file) {
		t.Errorf("capstan simulate snapshot printed %q", out)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("snapshot file: %v, mode %v; want 0600", err, fi.Mode())
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := simulate.Load(file, data)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), `"managedFields"`) {
		t.Error("the snapshot keeps managedFields")
	}
	if strings.Contains(string(data), `"kind":"Secret"`) {
		t.Error("the snapshot holds a Secret")
	}

	names := func(key string) map[string]bool {
		t.Helper()
		out := map[string]bool{}
		for _, o := range snap.Objects[key] {
			out[o.GetNamespace()+"/"+o.GetName()] = true
		}
		return out
	}
	nodes, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := names("v1/nodes")
	for _, n := range nodes.Items {
		if !got["/"+n.Name] {
			t.Errorf("node %s is not in the snapshot (%d nodes there)", n.Name, len(got))
		}
	}
	if !names("v1/pods")[ns+"/"+pod.Name] {
		t.Errorf("pod %s/%s is not in the snapshot", ns, pod.Name)
	}
	for _, p := range snap.Objects["v1/pods"] {
		if p.GetNamespace() == ns && p.GetName() == pod.Name {
			if p.GetLabels()["app"] != "web" || p.GetUID() != pod.UID {
				t.Errorf("the snapshot's pod: labels %v, uid %s; want app=web and uid %s", p.GetLabels(), p.GetUID(), pod.UID)
			}
		}
	}
	// capstan serves the OpenShift APIs: every resource is in the file,
	// with every object the API server lists both before and after it.
	list := func(r simulate.Resource) map[string]bool {
		t.Helper()
		l, err := dyn.Resource(r.GVR).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("listing %s: %v", r.Key(), err)
		}
		out := map[string]bool{}
		for _, o := range l.Items {
			out[o.GetNamespace()+"/"+o.GetName()] = true
		}
		return out
	}
	for _, r := range simulate.Resources {
		if _, ok := snap.Objects[r.Key()]; !ok {
			t.Errorf("no %s in the snapshot: capstan serves it", r.Key())
			continue
		}
		if r.GVR.Resource == "pods" || r.GVR.Resource == "namespaces" {
			continue // other tests' come and go; checked above
		}
		got := names(r.Key())
		for name := range list(r) {
			if !got[name] && !strings.HasPrefix(name, ns+"/") {
				t.Errorf("%s %s is not in the snapshot", r.Kind, name)
			}
		}
	}
	if !names("config.openshift.io/v1/clusteroperators")["/"+co.GetName()] {
		t.Errorf("ClusterOperator %s is not in the snapshot", co.GetName())
	}
}

// Whoever may not list a resource gets an error naming it, and no file.
func TestSnapshotWithoutTheRightToListNamesWhatItCouldNotRead(t *testing.T) {
	file := filepath.Join(t.TempDir(), "snap.json")
	out, err := capstan(t, "simulate", "snapshot", "--kubeconfig", kubeconfigAs(t, "capstan-e2e-nobody"), "-o", file)
	if err == nil || !strings.Contains(err.Error(), "listing namespaces (v1/namespaces)") || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("capstan simulate snapshot as a user without rights: %v (%s), want a forbidden error naming namespaces", err, out)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("a failed snapshot left %s: %v", file, err)
	}
}

// kubeconfigAs writes a kubeconfig of the admin impersonating user (and
// groups), and returns its path.
func kubeconfigAs(t *testing.T, user string, groups ...string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate, a.ImpersonateGroups = user, groups
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}
