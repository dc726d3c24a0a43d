package release

import (
	"archive/tar"
	"bytes"
	"sort"
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/fuzzseed"
)

// tarFiles writes files as one layer, in name order.
func tarFiles(t testing.TB, files map[string][]byte) []byte {
	t.Helper()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o444, Size: int64(len(files[n]))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(files[n]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// checkPayload holds a payload read from layers to what Read promises:
// valid metadata, image-references named for its version and naming
// images by digest, and a payload that builds into an image which reads
// back the same.
func checkPayload(t *testing.T, p *Payload) {
	t.Helper()
	if err := p.Metadata.Validate(); err != nil {
		t.Fatalf("accepted invalid metadata: %v", err)
	}
	if p.ImageReferences == nil || p.ImageReferences.Name != p.Metadata.Version {
		t.Fatalf("accepted image-references that do not name version %s", p.Metadata.Version)
	}
	if err := validTags(p.ImageReferences); err != nil {
		t.Fatalf("accepted %v", err)
	}
	files, err := p.files()
	if err != nil {
		t.Fatalf("an accepted payload cannot be written back: %v", err)
	}
	again, err := ParseLayers([][]byte{tarFiles(t, files)})
	if err != nil {
		t.Fatalf("an accepted payload does not read back: %v", err)
	}
	if again.Metadata.Version != p.Metadata.Version || len(again.Manifests) != len(p.Manifests) || len(again.CVOManifests) != len(p.CVOManifests) {
		t.Fatalf("the payload read back differs: %s with %d+%d manifests, then %s with %d+%d",
			p.Metadata.Version, len(p.Manifests), len(p.CVOManifests), again.Metadata.Version, len(again.Manifests), len(again.CVOManifests))
	}
}

// FuzzReleaseLayer reads arbitrary layer archives as a release payload.
func FuzzReleaseLayer(f *testing.F) {
	p := demoPayload(f)
	files, err := p.files()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(tarFiles(f, files))
	delete(files, ReleaseManifestsDir+"/"+ImageReferencesFile)
	f.Add(tarFiles(f, files))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, layer []byte) {
		p, err := ParseLayers([][]byte{layer})
		if err != nil {
			if p != nil {
				t.Fatalf("ParseLayers returned a payload with its error %v", err)
			}
			return
		}
		checkPayload(t, p)
	})
}

// FuzzImageReferences reads arbitrary image-references in an otherwise
// valid release layer.
func FuzzImageReferences(f *testing.F) {
	fuzzseed.Files(f, "testdata/image-references")
	p := demoPayload(f)
	base, err := p.files()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, refs []byte) {
		files := make(map[string][]byte, len(base))
		for n, raw := range base {
			files[n] = raw
		}
		files[ReleaseManifestsDir+"/"+ImageReferencesFile] = refs
		p, err := ParseLayers([][]byte{tarFiles(t, files)})
		if err != nil {
			if p != nil {
				t.Fatalf("ParseLayers returned a payload with its error %v", err)
			}
			return
		}
		checkPayload(t, p)
	})
}

// FuzzParseRef: a reference ParseRef takes (spec.desiredUpdate.image, a
// release flag) prints as text that parses back to the same reference,
// naming the same digest; ParseRef never panics.
func FuzzParseRef(f *testing.F) {
	for _, s := range []string{
		"quay.io/openshift-release-dev/ocp-release:4.10.26-x86_64",
		"quay.io/openshift-release-dev/ocp-release@sha256:" + strings.Repeat("a", 64),
		"oci:/var/releases:4.10.26", "oci:/var/rel:eases@sha256:" + strings.Repeat("0", 64), "oci:relative/dir",
		"oci:", "oci:@sha256:12", "localhost:5000/r:t", "UPPER/case", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ref, err := ParseRef(s)
		if err != nil {
			return
		}
		again, err := ParseRef(ref.String())
		if err != nil {
			t.Fatalf("%q parsed as %s, which does not parse: %v", s, ref, err)
		}
		if again.String() != ref.String() || again.Digest() != ref.Digest() {
			t.Fatalf("%q parsed as %s (digest %q), printed and parsed again as %s (digest %q)", s, ref, ref.Digest(), again, again.Digest())
		}
		if d := ref.Digest(); d != "" && !strings.HasPrefix(d, "sha256:") {
			t.Fatalf("%q names digest %q", s, d)
		}
	})
}

// FuzzDocuments: splitting a manifest file into documents keeps every
// byte of every document that holds more than comments, in order, and
// the documents split again the same when joined with separators.
func FuzzDocuments(f *testing.F) {
	for _, s := range []string{
		"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: b\n",
		"--- # a comment after the separator\napiVersion: v1\n", "# only a comment\n---\n", "---\n---\n", "a: '---'\n---x\n", "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		docs := Documents(raw)
		last := -1
		for _, d := range docs {
			if d.Index <= last {
				t.Fatalf("document indexes out of order: %v", docs)
			}
			last = d.Index
			if !bytes.Contains(raw, d.Raw) {
				t.Fatalf("document %d is not part of the file: %q", d.Index, d.Raw)
			}
			if strings.TrimSpace(stripComments(string(d.Raw))) == "" {
				t.Fatalf("document %d holds nothing but comments: %q", d.Index, d.Raw)
			}
		}
		var joined []string
		for _, d := range docs {
			joined = append(joined, string(d.Raw))
		}
		again := Documents([]byte(strings.Join(joined, "\n---\n")))
		if len(again) != len(docs) {
			t.Fatalf("%d documents, joined and split again: %d", len(docs), len(again))
		}
	})
}
