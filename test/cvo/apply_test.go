package cvo

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	configv1 "github.com/openshift/api/config/v1"
	configclient "github.com/openshift/client-go/config/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/cvo"
	"github.com/capstan-dev/capstan/internal/cvo/payload"
	"github.com/capstan-dev/capstan/internal/release"
	"github.com/capstan-dev/capstan/internal/testenv"
)

const applyPayloadHA = `  annotations:
    include.release.openshift.io/self-managed-high-availability: "true"
`

// A payload applied by run level through the real apiserver: a CRD and,
// in a later run level, a resource of it; a Deployment; a create-only
// ConfigMap; a manifest that deletes an object. Applied again (the CVO
// reconciling), a hand edit of a manifest's field is put back, while the
// create-only object keeps its edit.
func TestPayloadAppliesByRunLevel(t *testing.T) {
	ctx := context.Background()
	if _, err := env.Client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cvo-e2e-obsolete"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	p := &release.Payload{Manifests: map[string][]byte{
		"0000_10_widgets_00_crd.yaml": []byte(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.e2e.capstan.dev
` + applyPayloadHA + `spec:
  group: e2e.capstan.dev
  scope: Cluster
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
`),
		"0000_20_widgets_00_cr.yaml": []byte(`apiVersion: e2e.capstan.dev/v1
kind: Widget
metadata:
  name: cluster
` + applyPayloadHA + `spec:
  size: 3
`),
		"0000_30_web_00_ns.yaml": []byte(`apiVersion: v1
kind: Namespace
metadata:
  name: cvo-e2e-web
` + applyPayloadHA),
		"0000_30_web_01_deployment.yaml": []byte(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: cvo-e2e-web
` + applyPayloadHA + `spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 0
      containers: [{name: web, image: registry.k8s.io/pause:3.10}]
`),
		"0000_30_web_02_settings.yaml": []byte(`apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: cvo-e2e-web
  annotations:
    include.release.openshift.io/self-managed-high-availability: "true"
    release.openshift.io/create-only: "true"
data: {mode: default}
`),
		"0000_90_cleanup_00_obsolete.yaml": []byte(`apiVersion: v1
kind: ConfigMap
metadata:
  name: cvo-e2e-obsolete
  namespace: default
  annotations:
    include.release.openshift.io/self-managed-high-availability: "true"
    release.openshift.io/delete: "true"
`),
		"0000_90_cleanup_01_other-profile.yaml": []byte(`apiVersion: v1
kind: ConfigMap
metadata:
  name: cvo-e2e-hypershift-only
  namespace: default
  annotations:
    include.release.openshift.io/hypershift: "true"
`),
	}}
	crds := env.Dynamic.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	t.Cleanup(func() {
		ctx := context.Background()
		_ = env.Client.CoreV1().Namespaces().Delete(ctx, "cvo-e2e-web", metav1.DeleteOptions{})
		_ = crds.Delete(ctx, "widgets.e2e.capstan.dev", metav1.DeleteOptions{})
		// Gone, not just going: a next run would find them terminating.
		testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
			_, nsErr := env.Client.CoreV1().Namespaces().Get(ctx, "cvo-e2e-web", metav1.GetOptions{})
			_, crdErr := crds.Get(ctx, "widgets.e2e.capstan.dev", metav1.GetOptions{})
			return apierrors.IsNotFound(nsErr) && apierrors.IsNotFound(crdErr), "namespace cvo-e2e-web or the widgets CRD still there"
		})
	})
	ms, err := payload.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	var included []*payload.Manifest
	for _, m := range ms {
		if err := (payload.Filter{}).Include(m); err == nil {
			included = append(included, m)
		}
	}
	if len(included) != 6 {
		t.Fatalf("%d manifests included, want 6 (the hypershift-only one left out)", len(included))
	}
	applier, err := cvo.NewApplier(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	apply := func(ctx context.Context, m *payload.Manifest) error {
		if err := applier.Apply(ctx, m); err != nil {
			return err
		}
		mu.Lock()
		order = append(order, m.File)
		mu.Unlock()
		return nil
	}
	if err := payload.Run(ctx, payload.ByRunLevel(included), 16, apply); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(order, " "); !strings.HasPrefix(got, "0000_10_widgets_00_crd.yaml 0000_20_widgets_00_cr.yaml 0000_30_web_00_ns.yaml 0000_30_web_01_deployment.yaml 0000_30_web_02_settings.yaml") {
		t.Errorf("applied in the order %s", got)
	}
	widget, err := env.Dynamic.Resource(schema.GroupVersionResource{Group: "e2e.capstan.dev", Version: "v1", Resource: "widgets"}).Get(ctx, "cluster", metav1.GetOptions{})
	if err != nil || widget.Object["spec"].(map[string]any)["size"] != int64(3) {
		t.Fatalf("the custom resource after its CRD: %v %v", widget, err)
	}
	if _, err := env.Client.CoreV1().ConfigMaps("default").Get(ctx, "cvo-e2e-obsolete", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the object marked for deletion is still there: %v", err)
	}
	if _, err := env.Client.CoreV1().ConfigMaps("default").Get(ctx, "cvo-e2e-hypershift-only", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a manifest of another profile was applied: %v", err)
	}

	// Hand edits, then reconciling.
	if _, err := env.Client.AppsV1().Deployments("cvo-e2e-web").Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":5}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.CoreV1().ConfigMaps("cvo-e2e-web").Patch(ctx, "settings", types.MergePatchType, []byte(`{"data":{"mode":"tuned"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := payload.Run(ctx, payload.Flatten(included), 2, applier.Apply); err != nil {
		t.Fatal(err)
	}
	d, err := env.Client.AppsV1().Deployments("cvo-e2e-web").Get(ctx, "web", metav1.GetOptions{})
	if err != nil || ptr.Deref(d.Spec.Replicas, 0) != 2 {
		t.Errorf("drift not corrected: replicas %v (%v)", d.Spec.Replicas, err)
	}
	cm, err := env.Client.CoreV1().ConfigMaps("cvo-e2e-web").Get(ctx, "settings", metav1.GetOptions{})
	if err != nil || cm.Data["mode"] != "tuned" {
		t.Errorf("a create-only object was overwritten: %v %v", cm.Data, err)
	}
}

// A ClusterOperator of the payload that does not exist yet is created
// from its manifest's metadata, with the empty spec the CRD requires, so
// it shows before its operator reports.
func TestOperatorStubCreatesAMissingClusterOperator(t *testing.T) {
	ctx := context.Background()
	const name = "cvo-e2e-stub"
	p := &release.Payload{Manifests: map[string][]byte{"0000_50_stub_00_clusteroperator.yaml": []byte(`apiVersion: config.openshift.io/v1
kind: ClusterOperator
metadata:
  name: ` + name + `
` + applyPayloadHA + `status:
  versions: [{name: operator, version: 4.10.99}]
`)}}
	ms, err := payload.Load(p)
	if err != nil || len(ms) != 1 {
		t.Fatalf("%d manifests, %v", len(ms), err)
	}
	expected := &configv1.ClusterOperator{ObjectMeta: metav1.ObjectMeta{Name: name}}
	stub, err := cvo.OperatorStub(ms[0], expected)
	if err != nil {
		t.Fatal(err)
	}
	applier, err := cvo.NewApplier(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	cos := configclient.NewForConfigOrDie(env.Config).ConfigV1().ClusterOperators()
	t.Cleanup(func() { _ = cos.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	if err := applier.Apply(ctx, stub); err != nil {
		t.Fatalf("creating the missing ClusterOperator: %v", err)
	}
	co, err := cos.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(co.Status.Versions) != 0 {
		t.Errorf("the stub wrote the manifest's status %v; the operator reports it", co.Status.Versions)
	}
}
