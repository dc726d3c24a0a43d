package cvo

import (
	"errors"
	"strings"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"

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
