package cvo

import (
	"context"
	"errors"
	"fmt"

	configv1 "github.com/openshift/api/config/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/capstan-dev/capstan/internal/cvo/payload"
	"github.com/capstan-dev/capstan/internal/release"
	"github.com/capstan-dev/capstan/internal/release/signature"
)

// ErrNoVerifier is a running release without a verification manifest:
// nothing it is asked to update to can be verified (upstream's
// verify.Reject), so every update from it must be forced.
var ErrNoVerifier = errors.New("the release the cluster runs carries no ConfigMap manifest annotated " +
	signature.VerificationConfigMapAnnotation + ": verification is not possible")

// VerifierOf builds the verifier a release trusts for the releases after
// it, as the CVO does from its own payload (library-go's
// NewFromManifests): the keys and stores of its first ConfigMap manifest
// annotated release.openshift.io/verification-config-map. The cluster's
// signature ConfigMaps in openshift-config-managed are one more store,
// never a source of keys. ErrNoVerifier when it has no such manifest.
func VerifierOf(p *release.Payload, signatures signature.Store) (*signature.Verifier, error) {
	manifests, err := payload.Load(p)
	if err != nil {
		return nil, err
	}
	for _, m := range manifests {
		if m.APIVersion != "v1" || m.Kind != "ConfigMap" {
			continue
		}
		if _, ok := m.Annotations[signature.VerificationConfigMapAnnotation]; !ok {
			continue
		}
		cm := &corev1.ConfigMap{}
		if err := yaml.Unmarshal(m.Raw, cm); err != nil {
			return nil, fmt.Errorf("the verification manifest %s: %w", m, err)
		}
		v, err := signature.FromConfigMap(cm)
		if err != nil {
			return nil, fmt.Errorf("the verification manifest %s: %w", m, err)
		}
		if signatures != nil {
			v.Stores = append([]signature.Store{signatures}, v.Stores...)
		}
		return v, nil
	}
	return nil, ErrNoVerifier
}

// verify checks the signatures of the release image names against the
// keys of the release the cluster runs (status.desired): never against
// anything an administrator of a namespace can edit. The digest verified
// is the one the reference names, as release.Read reads it.
func (o *Operator) verify(ctx context.Context, cv *configv1.ClusterVersion, image string) error {
	ref, err := release.ParseRef(image)
	if err != nil {
		return err
	}
	digest := ref.Digest()
	if digest == "" {
		return signature.ErrNotByDigest
	}
	running := cv.Status.Desired.Image
	if running == "" {
		return fmt.Errorf("the cluster has no running release to take verification keys from: %w", ErrNoVerifier)
	}
	img, err := o.loadAccepted(ctx, cv, target{Image: running})
	if err != nil {
		return fmt.Errorf("reading the running release %s for its verification keys: %w", running, err)
	}
	v, err := VerifierOf(img.Payload, &signature.ConfigMapStore{Client: o.kube})
	if err != nil {
		return fmt.Errorf("release %s: %w", running, err)
	}
	return v.Verify(ctx, digest)
}
