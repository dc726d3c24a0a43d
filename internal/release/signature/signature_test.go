package signature

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	digest      = "sha256:1f4bd1b7a1a1f3e9c6f9c43bbd0e4fd6de6a4c9a5cf3d0b7d4a1c1f2d3e4f5a6"
	otherDigest = "sha256:aaaabbbbccccddddeeeeffff00001111222233334444555566667777888899990"
	reference   = "registry.capstan.local/ocp/release:4.10.23-x86_64"
)

func newKey(t *testing.T, name string) *openpgp.Entity {
	t.Helper()
	e, err := openpgp.NewEntity(name, "", name+"@capstan.dev", nil)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func armoredPublic(t *testing.T, e *openpgp.Entity) string {
	t.Helper()
	var buf bytes.Buffer
	w, err := armor.Encode(&buf, openpgp.PublicKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Serialize(w); err != nil {
		t.Fatal(err)
	}
	w.Close()
	return buf.String()
}

func sign(t *testing.T, key *openpgp.Entity, d string) []byte {
	t.Helper()
	sig, err := Sign(key, d, reference, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return sig
}

func TestVerifyReleaseSignatures(t *testing.T) {
	ctx := context.Background()
	trusted, stranger := newKey(t, "capstan-release"), newKey(t, "stranger")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "release-verification", Namespace: Namespace},
		Data: map[string]string{KeyringPrefix + "capstan": armoredPublic(t, trusted)}}

	for name, tc := range map[string]struct {
		publish map[string][][]byte // digest directory -> signatures
		verify  string
		want    error
	}{
		"signed by the trusted key":           {map[string][][]byte{digest: {sign(t, trusted, digest)}}, digest, nil},
		"a stranger's signature first":        {map[string][][]byte{digest: {sign(t, stranger, digest), sign(t, trusted, digest)}}, digest, nil},
		"signed by another key":               {map[string][][]byte{digest: {sign(t, stranger, digest)}}, digest, ErrUntrustedSignature},
		"a signature of another digest":       {map[string][][]byte{digest: {sign(t, trusted, otherDigest)}}, digest, ErrDigestMismatch},
		"no signature":                        {map[string][][]byte{otherDigest: {sign(t, trusted, otherDigest)}}, digest, ErrNoSignatures},
		"garbage where a signature should be": {map[string][][]byte{digest: {[]byte("not a signature")}}, digest, ErrUntrustedSignature},
		"a tag instead of a digest":           {nil, "4.10.23", ErrNotByDigest},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			for d, sigs := range tc.publish {
				if err := WriteToDir(dir, d, sigs...); err != nil {
					t.Fatal(err)
				}
			}
			srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
			defer srv.Close()
			for _, store := range []string{srv.URL, "file://" + dir} {
				c := cm.DeepCopy()
				c.Data[StorePrefix+"local"] = store
				v, err := FromConfigMap(c)
				if err != nil {
					t.Fatal(err)
				}
				err = v.Verify(ctx, tc.verify)
				if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
					t.Errorf("store %s: Verify = %v, want %v", store, err, tc.want)
				}
				if err != nil && tc.want != ErrNotByDigest && !strings.Contains(err.Error(), "unable to verify "+tc.verify+" against keyrings: "+KeyringPrefix+"capstan") {
					t.Errorf("error %q does not name the digest and the keyring", err)
				}
			}
		})
	}
}

func TestEveryKeyringMustSign(t *testing.T) {
	a, b := newKey(t, "a"), newKey(t, "b")
	dir := t.TempDir()
	if err := WriteToDir(dir, digest, sign(t, a, digest)); err != nil {
		t.Fatal(err)
	}
	v, err := FromConfigMap(&corev1.ConfigMap{Data: map[string]string{
		KeyringPrefix + "a": armoredPublic(t, a), KeyringPrefix + "b": armoredPublic(t, b), StorePrefix + "dir": "file://" + dir}})
	if err != nil {
		t.Fatal(err)
	}
	err = v.Verify(context.Background(), digest)
	if !errors.Is(err, ErrUntrustedSignature) || !strings.Contains(err.Error(), "keyrings: "+KeyringPrefix+"b:") {
		t.Fatalf("with only a's signature: %v, want keyring b unsatisfied", err)
	}
	if err := WriteToDir(dir, digest, sign(t, b, digest)); err != nil {
		t.Fatal(err)
	}
	if err := v.Verify(context.Background(), digest); err != nil {
		t.Fatalf("signed by both: %v", err)
	}
}

func TestSignatureConfigMapAndBadConfiguration(t *testing.T) {
	key := newKey(t, "k")
	cm, err := ConfigMap(digest, sign(t, key, digest), sign(t, key, digest))
	if err != nil {
		t.Fatal(err)
	}
	name := "sha256-" + strings.TrimPrefix(digest, "sha256:")
	if cm.Name != name || cm.Namespace != Namespace || len(cm.BinaryData[name+"-1"]) == 0 || len(cm.BinaryData[name+"-2"]) == 0 {
		t.Errorf("signature ConfigMap %s/%s with keys %v", cm.Namespace, cm.Name, cm.BinaryData)
	}
	if _, ok := cm.Labels[SignaturesLabel]; !ok {
		t.Errorf("signature ConfigMap lacks the label %s", SignaturesLabel)
	}
	for data, want := range map[string]string{
		StorePrefix + "x=file:///tmp": "has no verifier-public-key-* keys",
		KeyringPrefix + "x=not a key": KeyringPrefix + "x",
	} {
		k, v, _ := strings.Cut(data, "=")
		c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "rv", Namespace: Namespace}, Data: map[string]string{k: v}}
		if _, err := FromConfigMap(c); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("FromConfigMap(%s): %v, want an error saying %q", data, err, want)
		}
	}
	if _, err := NewStore("ftp://example.com/sigs"); err == nil || !strings.Contains(err.Error(), "the scheme must be http, https or file") {
		t.Errorf("ftp store: %v", err)
	}
}
