package signature

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"

	"github.com/capstan-dev/capstan/internal/fuzzseed"
)

// memStore is a store holding given signatures for every digest.
type memStore [][]byte

func (s memStore) Signatures(context.Context, string) ([][]byte, error) { return s, nil }
func (s memStore) String() string                                       { return "memory" }

// FuzzVerify verifies arbitrary signature bytes against a fixed keyring:
// only the seed signed by the trusted key for the digest verifies, and
// nothing panics or reads without bound.
func FuzzVerify(f *testing.F) {
	fuzzseed.Files(f, "testdata/signatures")
	raw, err := os.ReadFile("testdata/keyrings/trusted.asc")
	if err != nil {
		f.Fatal(err)
	}
	ring, err := ReadKeyring(raw)
	if err != nil {
		f.Fatal(err)
	}
	trusted, err := os.ReadFile("testdata/signatures/trusted")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, sig []byte) {
		v := &Verifier{Keyrings: map[string]openpgp.EntityList{"verifier-public-key-fuzz": ring}, Stores: []Store{memStore{sig}}}
		err := v.Verify(context.Background(), digest)
		if err == nil {
			c, cerr := verifyWith(sig, ring)
			if cerr != nil || c.Critical.Image.DockerManifestDigest != digest {
				t.Fatalf("verified a signature that does not vouch for %s: %v", digest, cerr)
			}
			return
		}
		if string(sig) == string(trusted) {
			t.Fatalf("the trusted signature does not verify: %v", err)
		}
		if !errors.Is(err, ErrUntrustedSignature) && !errors.Is(err, ErrDigestMismatch) {
			t.Fatalf("a bad signature fails with %v, want untrusted or a digest mismatch", err)
		}
	})
}

// FuzzContent reads arbitrary signed documents.
func FuzzContent(f *testing.F) {
	fuzzseed.Files(f, "testdata/contents")
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := ParseContent(body)
		if err != nil {
			if c != nil {
				t.Fatalf("ParseContent returned content with its error %v", err)
			}
			return
		}
		if c.Critical.Type != Type || c.Critical.Identity.DockerReference == "" {
			t.Fatalf("accepted %+v", c)
		}
	})
}

// FuzzKeyring reads arbitrary verifier-public-key-* values.
func FuzzKeyring(f *testing.F) {
	fuzzseed.Files(f, "testdata/keyrings")
	f.Fuzz(func(t *testing.T, raw []byte) {
		ring, err := ReadKeyring(raw)
		if err == nil && len(ring) == 0 {
			t.Fatalf("an empty keyring was read without an error")
		}
	})
}
