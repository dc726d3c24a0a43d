package cvo

import (
	"context"
	"errors"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/cvo/payload"
)

// FieldManager is the CVO's name in managedFields.
const FieldManager = "cluster-version-operator"

// Applier writes a payload's manifests into the cluster: a server-side
// apply of any kind the API serves (the CVO owns the fields its manifests
// set, and takes them back when someone edits them), creation only for
// create-only manifests, deletion for those marked so. A CRD is waited
// for until it is Established, so the custom resources after it apply.
type Applier struct {
	dynamic dynamic.Interface
	mapper  *restmapper.DeferredDiscoveryRESTMapper
	// EstablishTimeout bounds the wait for a CRD.
	EstablishTimeout time.Duration
}

// NewApplier returns an applier for the cluster of cfg.
func NewApplier(cfg *rest.Config) (*Applier, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Applier{dynamic: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc)), EstablishTimeout: time.Minute}, nil
}

// resource finds where a kind is served, learning new kinds (a CRD just
// applied) once when it does not know one.
func (a *Applier) resource(gvk schema.GroupVersionKind, namespace string) (dynamic.ResourceInterface, error) {
	mapping, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		a.mapper.Reset()
		mapping, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return nil, fmt.Errorf("the cluster does not serve %s: %w", gvk, err)
	}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		if namespace == "" {
			return nil, fmt.Errorf("%s is namespaced, and the manifest names no namespace", gvk.Kind)
		}
		return a.dynamic.Resource(mapping.Resource).Namespace(namespace), nil
	}
	return a.dynamic.Resource(mapping.Resource), nil
}

// Apply writes one manifest.
func (a *Applier) Apply(ctx context.Context, m *payload.Manifest) error {
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(m.Raw); err != nil {
		return fmt.Errorf("decoding: %w", err)
	}
	gvk := obj.GroupVersionKind()
	res, err := a.resource(gvk, obj.GetNamespace())
	if err != nil {
		return err
	}
	del, err := m.Deletion()
	if err != nil {
		return err
	}
	switch {
	case del:
		err := res.Delete(ctx, obj.GetName(), metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting: %w", err)
		}
		return nil
	case m.CreateOnly():
		if _, err := res.Create(ctx, obj, metav1.CreateOptions{FieldManager: FieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating: %w", err)
		}
	default:
		if _, err := res.Patch(ctx, obj.GetName(), types.ApplyPatchType, m.Raw, metav1.PatchOptions{FieldManager: FieldManager, Force: ptr.To(true)}); err != nil {
			return fmt.Errorf("applying: %w", err)
		}
	}
	if gvk.Group == apiextensionsv1.GroupName && gvk.Kind == "CustomResourceDefinition" {
		return a.waitEstablished(ctx, res, obj.GetName())
	}
	return nil
}

func (a *Applier) waitEstablished(ctx context.Context, res dynamic.ResourceInterface, name string) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, a.EstablishTimeout, true, func(ctx context.Context) (bool, error) {
		u, err := res.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, crd); err != nil {
			return false, err
		}
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("CustomResourceDefinition %s not Established: %w", name, errors.Join(err))
	}
	// The new kind is served: learn it.
	a.mapper.Reset()
	return nil
}
