// Package signature signs release image digests and verifies them as the
// Cluster Version Operator does: an OpenPGP-signed "atomic container
// signature" JSON document per signature, found in signature stores (an
// HTTP or file tree <store>/sha256=<hex>/signature-N, or ConfigMaps in
// openshift-config-managed), checked against every keyring of the
// verification ConfigMap.
package signature

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
)

// Type is the critical.type of a release signature.
const Type = "atomic container signature"

// Content is a signature's signed JSON document.
type Content struct {
	Critical Critical `json:"critical"`
	Optional Optional `json:"optional"`
}

// Critical is what a signature vouches for.
type Critical struct {
	Type     string   `json:"type"`
	Image    Image    `json:"image"`
	Identity Identity `json:"identity"`
}

// Image names the signed manifest.
type Image struct {
	DockerManifestDigest string `json:"docker-manifest-digest"`
}

// Identity names the reference the image was published as.
type Identity struct {
	DockerReference string `json:"docker-reference"`
}

// Optional says who signed and when.
type Optional struct {
	Creator   string `json:"creator,omitempty"`
	Timestamp int64  `json:"timestamp,omitempty"`
}

// Errors a verification fails with; each is distinct, and wrapped in an
// error that names the digest and the keyrings.
var (
	// ErrNoSignatures: no store holds a signature for the digest.
	ErrNoSignatures = errors.New("no signatures found")
	// ErrUntrustedSignature: signatures exist, but none is by a key of
	// a keyring (or none verifies).
	ErrUntrustedSignature = errors.New("no signature is by a trusted key")
	// ErrDigestMismatch: a trusted signature vouches for another digest.
	ErrDigestMismatch = errors.New("a trusted signature is for a different digest")
	// ErrNotByDigest: the release is not referenced by digest.
	ErrNotByDigest = errors.New("release images that are not accessed via digest cannot be verified")
)

var digestPattern = regexp.MustCompile(`^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$`)

// ValidDigest checks a digest's form (algorithm:hex).
func ValidDigest(d string) error {
	if !digestPattern.MatchString(d) {
		return fmt.Errorf("%q: %w", d, ErrNotByDigest)
	}
	return nil
}

// Sign makes a signature of digest, published as dockerReference, by
// signer: an OpenPGP signed message (binary) holding the JSON document.
func Sign(signer *openpgp.Entity, digest, dockerReference string, now time.Time) ([]byte, error) {
	if err := ValidDigest(digest); err != nil {
		return nil, err
	}
	if dockerReference == "" {
		return nil, errors.New("a signature needs the image's docker reference")
	}
	doc, err := json.Marshal(Content{
		Critical: Critical{Type: Type, Image: Image{DockerManifestDigest: digest}, Identity: Identity{DockerReference: dockerReference}},
		Optional: Optional{Creator: "capstan", Timestamp: now.Unix()},
	})
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	w, err := openpgp.Sign(&out, signer, nil, &packet.Config{Time: func() time.Time { return now }})
	if err != nil {
		return nil, fmt.Errorf("signing: %w", err)
	}
	if _, err := w.Write(doc); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// Store is somewhere signatures are published.
type Store interface {
	// Signatures returns every signature the store holds for digest.
	Signatures(ctx context.Context, digest string) ([][]byte, error)
	String() string
}

// Verifier checks release digests against keyrings; every keyring must
// have signed (as the CVO requires of each verifier-public-key-*).
type Verifier struct {
	Keyrings map[string]openpgp.EntityList
	Stores   []Store
}

// Verify finds a signature of digest by each keyring in the stores.
func (v *Verifier) Verify(ctx context.Context, digest string) error {
	if err := ValidDigest(digest); err != nil {
		return err
	}
	if len(v.Keyrings) == 0 {
		return errors.New("no verification keyrings are configured")
	}
	var sigs [][]byte
	var storeErrs []error
	for _, s := range v.Stores {
		found, err := s.Signatures(ctx, digest)
		if err != nil {
			storeErrs = append(storeErrs, fmt.Errorf("%s: %w", s, err))
			continue
		}
		sigs = append(sigs, found...)
	}
	names := make([]string, 0, len(v.Keyrings))
	for n := range v.Keyrings {
		names = append(names, n)
	}
	sort.Strings(names)
	fail := func(cause error, unsatisfied []string) error {
		err := fmt.Errorf("unable to verify %s against keyrings: %s: %w", digest, strings.Join(unsatisfied, ", "), cause)
		if len(storeErrs) > 0 {
			return errors.Join(err, errors.Join(storeErrs...))
		}
		return err
	}
	if len(sigs) == 0 {
		return fail(ErrNoSignatures, names)
	}
	var unsatisfied []string
	mismatch := false
	for _, name := range names {
		ok := false
		for _, sig := range sigs {
			content, err := verifyWith(sig, v.Keyrings[name])
			if err != nil {
				continue
			}
			if content.Critical.Image.DockerManifestDigest != digest {
				mismatch = true
				continue
			}
			ok = true
			break
		}
		if !ok {
			unsatisfied = append(unsatisfied, name)
		}
	}
	switch {
	case len(unsatisfied) == 0:
		return nil
	case mismatch:
		return fail(ErrDigestMismatch, unsatisfied)
	default:
		return fail(ErrUntrustedSignature, unsatisfied)
	}
}

// verifyWith checks one signature against a keyring and returns what it
// signed.
func verifyWith(sig []byte, keyring openpgp.EntityList) (*Content, error) {
	md, err := openpgp.ReadMessage(bytes.NewReader(sig), keyring, nil, nil)
	if err != nil {
		return nil, err
	}
	if !md.IsSigned || md.SignedBy == nil {
		return nil, errors.New("not signed by a key of the keyring")
	}
	// The body is read whole before its signature is checked; a
	// compressed message must not expand past what a document needs.
	body, err := io.ReadAll(io.LimitReader(md.UnverifiedBody, maxContent+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxContent {
		return nil, fmt.Errorf("signature content is larger than %d KiB", maxContent>>10)
	}
	if md.SignatureError != nil {
		return nil, md.SignatureError
	}
	return ParseContent(body)
}

// maxContent bounds a signed document: they are a few hundred bytes.
const maxContent = 64 << 10

// ParseContent reads a signature's signed JSON document: only the
// fields of an atomic container signature, of that type, naming a
// docker-reference.
func ParseContent(body []byte) (*Content, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var c Content
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("signature content: %w", err)
	}
	if c.Critical.Type != Type {
		return nil, fmt.Errorf("signature type %q, want %q", c.Critical.Type, Type)
	}
	if c.Critical.Identity.DockerReference == "" {
		return nil, errors.New("signature has no docker-reference")
	}
	return &c, nil
}
