package controlplane

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/deploy"
	"github.com/capstan-dev/capstan/internal/waitfor"

	"github.com/capstan-dev/capstan/internal/strictyaml"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// crdFiles hold the OpenShift CRD manifests, deploy/crds: in crds/,
// copied verbatim from the github.com/openshift/api module by
// hack/update-crds.sh; in crds/capstan/, capstan's own definitions of
// OpenShift APIs that module does not publish (the autoscaler
// operator's).
var crdFiles = deploy.Files()

// OpenShiftCRDs decodes the embedded CRD manifests, sorted by name.
func OpenShiftCRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var names []string
	for _, pattern := range []string{"crds/*.yaml", "crds/capstan/*.yaml"} {
		matched, err := fs.Glob(crdFiles, pattern)
		if err != nil {
			return nil, err
		}
		for _, m := range matched {
			if path.Base(m) != "kustomization.yaml" {
				names = append(names, m)
			}
		}
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, name := range names {
		raw, err := fs.ReadFile(crdFiles, name)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := strictyaml.Decode(raw, crd); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", name, err)
		}
		out = append(out, crd)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// InstallCRDs creates or updates the OpenShift CRDs and waits until every
// one is Established. It works against any cluster.
func InstallCRDs(ctx context.Context, cfg *rest.Config) error {
	crds, err := OpenShiftCRDs()
	if err != nil {
		return err
	}
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	api := client.ApiextensionsV1().CustomResourceDefinitions()
	for _, crd := range crds {
		existing, err := api.Get(ctx, crd.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			if _, err := api.Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating CRD %s: %w", crd.Name, err)
			}
		case err != nil:
			return fmt.Errorf("reading CRD %s: %w", crd.Name, err)
		default:
			crd.ResourceVersion = existing.ResourceVersion
			if _, err := api.Update(ctx, crd, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("updating CRD %s: %w", crd.Name, err)
			}
		}
	}
	err = waitfor.Poll(ctx, 100*time.Millisecond, time.Minute, waitfor.Simple(func(ctx context.Context) (bool, string) {
		var pending []string
		for _, crd := range crds {
			got, err := api.Get(ctx, crd.Name, metav1.GetOptions{})
			if err != nil || !crdEstablished(got) {
				pending = append(pending, crd.Name)
			}
		}
		return len(pending) == 0, "not established: " + strings.Join(pending, ", ")
	}))
	if err != nil {
		return fmt.Errorf("CRDs: %w", err)
	}
	return nil
}

func crdEstablished(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}
