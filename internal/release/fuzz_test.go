package release

import (
	"archive/tar"
	"bytes"
	"sort"
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
