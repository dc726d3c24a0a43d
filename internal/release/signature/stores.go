package signature

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Where the cluster keeps signatures and the verification configuration.
const (
	// Namespace holds signature ConfigMaps and the verification
	// ConfigMap.
	Namespace = "openshift-config-managed"
	// SignaturesLabel marks a ConfigMap of signatures.
	SignaturesLabel = "release.openshift.io/verification-signatures"
	// VerificationConfigMapAnnotation marks the payload's verification
	// ConfigMap manifest: the one source of the keys a CVO verifies the
	// next release with.
	VerificationConfigMapAnnotation = "release.openshift.io/verification-config-map"
	// VerificationConfigMapName is that ConfigMap's name in OpenShift's
	// releases (applied to openshift-config-managed, where the copy in
	// the cluster is never read for keys).
	VerificationConfigMapName = "release-verification"
	// KeyringPrefix and StorePrefix start its data keys.
	KeyringPrefix = "verifier-public-key-"
	StorePrefix   = "store-"
	// maxSignatures is how many signature-N a store is asked for.
	maxSignatures = 10
)

// storeName is the directory of a digest in a store: sha256=<hex>.
func storeName(digest string) string { return strings.Replace(digest, ":", "=", 1) }

// configMapName is a digest's signature ConfigMap: sha256-<hex>.
func configMapName(digest string) string { return strings.Replace(digest, ":", "-", 1) }

// HTTPStore is a signature store served over HTTP(S) or from a file://
// tree: <url>/sha256=<hex>/signature-1, -2, ... up to the first missing.
type HTTPStore struct {
	URL    *url.URL
	Client *http.Client
}

// NewStore parses a store URL (http, https or file).
func NewStore(raw string) (*HTTPStore, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("signature store %q: %w", raw, err)
	}
	switch u.Scheme {
	case "http", "https", "file":
	default:
		return nil, fmt.Errorf("signature store %q: the scheme must be http, https or file", raw)
	}
	return &HTTPStore{URL: u, Client: http.DefaultClient}, nil
}

func (s *HTTPStore) String() string { return s.URL.String() }

// Signatures fetches signature-1, signature-2, ... until one is missing.
func (s *HTTPStore) Signatures(ctx context.Context, digest string) ([][]byte, error) {
	var out [][]byte
	for i := 1; i < maxSignatures; i++ {
		u := *s.URL
		u.Path = strings.TrimSuffix(u.Path, "/") + "/" + storeName(digest) + "/signature-" + strconv.Itoa(i)
		raw, found, err := s.get(ctx, &u)
		if err != nil {
			return out, err
		}
		if !found {
			break
		}
		out = append(out, raw)
	}
	return out, nil
}

func (s *HTTPStore) get(ctx context.Context, u *url.URL) ([]byte, bool, error) {
	if u.Scheme == "file" {
		raw, err := os.ReadFile(u.Path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, false, nil
		}
		return raw, err == nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, false, err
	}
	resp, err := s.Client.Do(req)
	if err != nil {
		return nil, false, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, false, nil
	case resp.StatusCode != http.StatusOK:
		return nil, false, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return raw, err == nil, err
}

// WriteToDir publishes signatures in a store tree rooted at dir (served
// over HTTP, or read as file://), after those already there.
func WriteToDir(dir, digest string, sigs ...[]byte) error {
	if err := ValidDigest(digest); err != nil {
		return err
	}
	d := filepath.Join(dir, storeName(digest))
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	n := 1
	for ; n < maxSignatures; n++ {
		if _, err := os.Stat(filepath.Join(d, "signature-"+strconv.Itoa(n))); errors.Is(err, fs.ErrNotExist) {
			break
		}
	}
	for _, sig := range sigs {
		if n >= maxSignatures {
			return fmt.Errorf("%s already holds %d signatures", d, maxSignatures-1)
		}
		if err := os.WriteFile(filepath.Join(d, "signature-"+strconv.Itoa(n)), sig, 0o644); err != nil {
			return err
		}
		n++
	}
	return nil
}

// ConfigMapStore reads the signature ConfigMaps the cluster keeps in
// openshift-config-managed.
type ConfigMapStore struct {
	Client kubernetes.Interface
}

func (s *ConfigMapStore) String() string {
	return "configmaps in " + Namespace + " labelled " + SignaturesLabel
}

// Signatures reads binaryData sha256-<hex>-1, -2, ... of the labelled
// ConfigMaps named sha256-<hex>.
func (s *ConfigMapStore) Signatures(ctx context.Context, digest string) ([][]byte, error) {
	list, err := s.Client.CoreV1().ConfigMaps(Namespace).List(ctx, metav1.ListOptions{LabelSelector: SignaturesLabel})
	if err != nil {
		return nil, err
	}
	prefix := configMapName(digest) + "-"
	var out [][]byte
	for _, cm := range list.Items {
		if cm.Name != configMapName(digest) {
			continue
		}
		keys := make([]string, 0, len(cm.BinaryData))
		for k := range cm.BinaryData {
			if _, err := strconv.Atoi(strings.TrimPrefix(k, prefix)); err == nil && strings.HasPrefix(k, prefix) {
				keys = append(keys, k)
			}
		}
		sort.Slice(keys, func(i, j int) bool {
			a, _ := strconv.Atoi(strings.TrimPrefix(keys[i], prefix))
			b, _ := strconv.Atoi(strings.TrimPrefix(keys[j], prefix))
			return a < b
		})
		for _, k := range keys {
			out = append(out, cm.BinaryData[k])
		}
	}
	return out, nil
}

// ConfigMap is the signature ConfigMap of a digest.
func ConfigMap(digest string, sigs ...[]byte) (*corev1.ConfigMap, error) {
	if err := ValidDigest(digest); err != nil {
		return nil, err
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: configMapName(digest), Namespace: Namespace, Labels: map[string]string{SignaturesLabel: "capstan"}},
		BinaryData: map[string][]byte{},
	}
	for i, sig := range sigs {
		cm.BinaryData[fmt.Sprintf("%s-%d", configMapName(digest), i+1)] = sig
	}
	return cm, nil
}

// FromConfigMap builds a verifier from a verification ConfigMap: every
// verifier-public-key-* is a keyring that must sign (armored or binary),
// every store-* a store URL.
func FromConfigMap(cm *corev1.ConfigMap) (*Verifier, error) {
	v := &Verifier{Keyrings: map[string]openpgp.EntityList{}}
	keys := make([]string, 0, len(cm.Data))
	for k := range cm.Data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		val := cm.Data[k]
		switch {
		case strings.HasPrefix(k, KeyringPrefix):
			ring, err := ReadKeyring([]byte(val))
			if err != nil {
				return nil, fmt.Errorf("%s/%s %s: %w", cm.Namespace, cm.Name, k, err)
			}
			v.Keyrings[k] = ring
		case strings.HasPrefix(k, StorePrefix):
			s, err := NewStore(strings.TrimSpace(val))
			if err != nil {
				return nil, fmt.Errorf("%s/%s %s: %w", cm.Namespace, cm.Name, k, err)
			}
			v.Stores = append(v.Stores, s)
		}
	}
	if len(v.Keyrings) == 0 {
		return nil, fmt.Errorf("%s/%s has no %s* keys", cm.Namespace, cm.Name, KeyringPrefix)
	}
	return v, nil
}

// ArmorPublicKey writes the public part of key as an armored keyring, as
// a verifier-public-key-* holds it.
func ArmorPublicKey(key *openpgp.Entity) ([]byte, error) {
	var pub bytes.Buffer
	w, err := armor.Encode(&pub, openpgp.PublicKeyType, nil)
	if err != nil {
		return nil, err
	}
	if err := key.Serialize(w); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return pub.Bytes(), nil
}

// ReadKeyring reads an armored or binary OpenPGP public keyring; one
// without a key is an error, as it could never verify anything.
func ReadKeyring(raw []byte) (openpgp.EntityList, error) {
	var ring openpgp.EntityList
	var err error
	if bytes.Contains(raw, []byte("-----BEGIN PGP")) {
		ring, err = openpgp.ReadArmoredKeyRing(bytes.NewReader(raw))
	} else {
		ring, err = openpgp.ReadKeyRing(bytes.NewReader(raw))
	}
	if err == nil && len(ring) == 0 {
		err = errors.New("the keyring holds no key")
	}
	if err != nil {
		return nil, err
	}
	return ring, nil
}
