package cvo

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	configv1 "github.com/openshift/api/config/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/capstan-dev/capstan/internal/release"
	"github.com/capstan-dev/capstan/internal/release/signature"
	"github.com/capstan-dev/capstan/internal/updateservice/demo"
)

func armoredPublicKey(t *testing.T) []byte {
	t.Helper()
	key, err := openpgp.NewEntity("verify test", "", "verify@capstan.dev", nil)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := signature.ArmorPublicKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// A release's verifier comes from its own annotated ConfigMap manifest,
// and from nothing else: without one, nothing can be verified.
func TestVerifierOfARelease(t *testing.T) {
	key := armoredPublicKey(t)
	payload := func(v *demo.Verification, edit func(p *release.Payload)) *release.Payload {
		t.Helper()
		dir := t.TempDir()
		if err := demo.WriteSource(dir, "4.10.27", demo.Operators, v); err != nil {
			t.Fatal(err)
		}
		p, err := release.LoadDir(dir, release.Metadata{Version: "4.10.27"})
		if err != nil {
			t.Fatal(err)
		}
		if edit != nil {
			edit(p)
		}
		return p
	}
	cluster := &signature.ConfigMapStore{}

	v, err := VerifierOf(payload(&demo.Verification{Keys: map[string][]byte{"a": key, "b": key}, Stores: map[string]string{"s": "https://store.example.com/sigs"}}, nil), cluster)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Keyrings) != 2 || v.Keyrings[signature.KeyringPrefix+"a"] == nil || v.Keyrings[signature.KeyringPrefix+"b"] == nil {
		t.Errorf("keyrings %v, want verifier-public-key-a and -b", v.Keyrings)
	}
	if len(v.Stores) != 2 || v.Stores[0] != signature.Store(cluster) || v.Stores[1].String() != "https://store.example.com/sigs" {
		t.Errorf("stores %v, want the cluster's signature ConfigMaps, then the manifest's store", v.Stores)
	}

	if _, err := VerifierOf(payload(nil, nil), cluster); !errors.Is(err, ErrNoVerifier) {
		t.Errorf("a release without the manifest: %v, want ErrNoVerifier", err)
	}
	// The same ConfigMap without the annotation is any other manifest.
	unannotated := payload(&demo.Verification{Keys: map[string][]byte{"a": key}}, func(p *release.Payload) {
		raw := string(p.Manifests[demo.VerificationFile])
		p.Manifests[demo.VerificationFile] = []byte(strings.Replace(raw, signature.VerificationConfigMapAnnotation, "example.com/not-it", 1))
	})
	if _, err := VerifierOf(unannotated, cluster); !errors.Is(err, ErrNoVerifier) {
		t.Errorf("an unannotated ConfigMap: %v, want ErrNoVerifier", err)
	}
	broken := payload(&demo.Verification{Keys: map[string][]byte{"a": key}}, func(p *release.Payload) {
		raw := string(p.Manifests[demo.VerificationFile])
		p.Manifests[demo.VerificationFile] = []byte(strings.Replace(raw, "-----BEGIN PGP PUBLIC KEY BLOCK-----", "-----BEGIN PGP PUBLIC KEY BLOCK-----\n    garbage", 1))
	})
	if _, err := VerifierOf(broken, cluster); err == nil || !strings.Contains(err.Error(), "the verification manifest configmap openshift-config-managed/release-verification") {
		t.Errorf("a manifest whose key does not parse: %v", err)
	}
	if _, err := (&demo.Verification{}).Manifest(); err == nil {
		t.Error("a verification manifest without keys was written")
	}
}

// A release accepted by tag (a forced update) is read again by the digest
// it was accepted at: a tag moved since, to another release, is not what
// the cluster applies or takes its verification keys from.
func TestAReleaseAcceptedByTagIsReadAgainByItsDigest(t *testing.T) {
	ctx := context.Background()
	layout := filepath.Join(t.TempDir(), "releases")
	build := func(version string) v1.Image {
		dir := t.TempDir()
		if err := demo.WriteSource(dir, version, demo.Operators, nil); err != nil {
			t.Fatal(err)
		}
		p, err := release.LoadDir(dir, release.Metadata{Version: version})
		if err != nil {
			t.Fatal(err)
		}
		img, err := release.Build(p, release.BuildOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	image := "oci:" + layout + ":next"
	ref, err := release.ParseRef(image)
	if err != nil {
		t.Fatal(err)
	}
	first := build("4.10.27")
	accepted, err := release.Write(ctx, ref, first)
	if err != nil {
		t.Fatal(err)
	}
	// The layout keeps the accepted image under another name, as a
	// registry keeps a manifest by digest when its tag moves.
	if _, err := release.Write(ctx, release.Ref{Layout: layout, Tag: "kept"}, first); err != nil {
		t.Fatal(err)
	}
	// Whoever may edit the ClusterVersion writes what the pin once was,
	// an annotation, naming the release the tag moves to next.
	o := &Operator{loaded: map[string]*release.Image{}, kube: fake.NewClientset()}
	if err := o.pinDigest(ctx, image, accepted); err != nil {
		t.Fatal(err)
	}
	moved, err := release.Write(ctx, ref, build("4.10.28"))
	if err != nil {
		t.Fatal(err)
	}
	cv := &configv1.ClusterVersion{ObjectMeta: metav1.ObjectMeta{Name: Name,
		Annotations: map[string]string{"release.capstan.dev/accepted-digest": moved.String() + " " + image}}}
	img, err := o.loadAccepted(ctx, cv, target{Image: image})
	if err != nil {
		t.Fatal(err)
	}
	if img.Digest != accepted || img.Payload.Metadata.Version != "4.10.27" {
		t.Errorf("read %s (%s), want the accepted %s (4.10.27)", img.Digest, img.Payload.Metadata.Version, accepted)
	}
	// Without a pin, or with another image's, the tag is not read; a bad
	// pin is an error too.
	cms := o.kube.CoreV1().ConfigMaps(Namespace)
	for what, pin := range map[string]string{"no pin": "", "another image's pin": accepted.String() + " oci:" + layout + ":other", "a bad pin": "sha256:nothex " + image} {
		cm, err := cms.Get(ctx, PinsConfigMap, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data[pinKey(image)] = pin
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if ref, err := o.acceptedRef(ctx, image); err == nil {
			t.Errorf("%s: read by %v, want an error", what, ref)
		}
	}
	if err := cms.Delete(ctx, PinsConfigMap, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := o.acceptedRef(ctx, image); err == nil || !strings.Contains(err.Error(), "holds no digest") {
		t.Errorf("no pins at all: %v", err)
	}

}
