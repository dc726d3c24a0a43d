package demo

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/capstan-dev/capstan/internal/release/signature"
)

// VerificationFile is the release manifest that carries the verification
// ConfigMap, named as openshift/cluster-update-keys ships it in every
// OpenShift release.
const VerificationFile = "0000_90_cluster-update-keys_configmap.yaml"

// Verification is what a release trusts to verify the releases after it:
// the CVO running that release takes its keys and stores from this
// manifest, and from nowhere else.
type Verification struct {
	// Keys are armored OpenPGP public keyrings by name: each becomes
	// verifier-public-key-<name>, and each must have signed a release.
	Keys map[string][]byte
	// Stores are signature store URLs by name: store-<name>.
	Stores map[string]string
}

// Manifest is the release-verification ConfigMap in
// openshift-config-managed, annotated release.openshift.io/verification-config-map.
func (v *Verification) Manifest() ([]byte, error) {
	if len(v.Keys) == 0 {
		return nil, fmt.Errorf("a verification manifest needs at least one key")
	}
	cm := &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: signature.VerificationConfigMapName, Namespace: signature.Namespace,
			Annotations: map[string]string{
				signature.VerificationConfigMapAnnotation:                     "",
				"include.release.openshift.io/self-managed-high-availability": "true",
			}},
		Data: map[string]string{},
	}
	names := make([]string, 0, len(v.Keys))
	for n := range v.Keys {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		cm.Data[signature.KeyringPrefix+n] = string(v.Keys[n])
	}
	for n, url := range v.Stores {
		cm.Data[signature.StorePrefix+n] = url
	}
	raw, err := yaml.Marshal(cm)
	if err != nil {
		return nil, err
	}
	return append([]byte("# Release verification: the keys and stores this release trusts for the next one.\n"), raw...), nil
}
