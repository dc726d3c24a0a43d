// Package image builds the container image of capstan itself: one layer
// holding the static binary, a passwd entry for its non-root user and a
// writable /tmp; no shell, no package manager, nothing else. The same
// binary always makes the same image, byte for byte (fixed timestamps,
// owners and order), so its digest can be checked by anyone who builds it.
package image

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// BinaryPath is where the binary sits in the image, its entrypoint.
	BinaryPath = "/usr/bin/capstan"
	// UID and GID are the non-root user the image runs as (distroless's
	// nonroot).
	UID, GID = 65532, 65532
)

// epoch is every timestamp in the image: the build leaves no trace of
// when it ran.
var epoch = time.Unix(0, 0).UTC()

// Build makes the image of the static Linux binary at path.
func Build(path string) (v1.Image, error) {
	arch, err := checkStatic(path)
	if err != nil {
		return nil, err
	}
	bin, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	raw, err := layerTar(bin)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(raw)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: epoch}, CreatedBy: "capstan adm image build", Comment: "the capstan binary, its user and /tmp",
	}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: epoch}
	cf.OS, cf.Architecture = "linux", arch
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", UID, GID),
		Entrypoint: []string{BinaryPath},
		WorkingDir: "/home/nonroot",
		Env:        []string{"PATH=/usr/bin", "HOME=/home/nonroot", "CAPSTAN_DATA_DIR=/home/nonroot/.capstan"},
		Labels: map[string]string{
			"org.opencontainers.image.title":  "capstan",
			"org.opencontainers.image.source": "https://github.com/capstan-dev/capstan",
		},
	}
	return mutate.ConfigFile(img, cf)
}

// checkStatic refuses anything but a statically linked Linux ELF binary
// (a dynamic one would need a libc the image does not have), and returns
// its architecture in OCI's words.
func checkStatic(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("%s is not a Linux executable: %w", path, err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return "", fmt.Errorf("%s is not an executable (ELF type %s)", path, f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			interp, _ := io.ReadAll(p.Open())
			return "", fmt.Errorf("%s is dynamically linked (it needs %s), and the image has no libc: build it with CGO_ENABLED=0 go build -o capstan ./cmd/capstan",
				path, string(bytes.TrimRight(interp, "\x00")))
		}
	}
	switch f.Machine {
	case elf.EM_X86_64:
		return "amd64", nil
	case elf.EM_AARCH64:
		return "arm64", nil
	case elf.EM_PPC64:
		return "ppc64le", nil
	case elf.EM_S390:
		return "s390x", nil
	}
	return "", fmt.Errorf("%s is built for %s, which capstan's image does not support", path, f.Machine)
}

// layerTar is the image's one layer, its entries in a fixed order with
// fixed owners, modes and times.
func layerTar(bin []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	entries := []struct {
		name     string
		mode     int64
		uid, gid int
		body     []byte
		dir      bool
	}{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, body: []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", GID))},
		{name: "etc/passwd", mode: 0o644, body: []byte(fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", UID, GID))},
		{name: "home/", mode: 0o755, dir: true},
		{name: "home/nonroot/", mode: 0o700, uid: UID, gid: GID, dir: true},
		{name: "tmp/", mode: 0o1777, dir: true},
		{name: "usr/", mode: 0o755, dir: true},
		{name: "usr/bin/", mode: 0o755, dir: true},
		{name: BinaryPath[1:], mode: 0o755, body: bin},
	}
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.gid, ModTime: epoch, Format: tar.FormatUSTAR}
		if e.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteDir writes img as an OCI image layout in dir (created if need
// be; an existing layout gets the image added to its index).
func WriteDir(img v1.Image, dir string) error {
	p, err := layout.FromPath(dir)
	if err != nil {
		if p, err = layout.Write(dir, empty.Index); err != nil {
			return fmt.Errorf("writing an OCI layout in %s: %w", dir, err)
		}
	}
	if err := p.AppendImage(img); err != nil {
		return fmt.Errorf("writing the image into %s: %w", dir, err)
	}
	return nil
}

// Push pushes img to ref with the credentials of kc. A registry on
// localhost or a loopback address is reached over plain HTTP, as
// go-containerregistry does.
func Push(ctx context.Context, img v1.Image, ref string, kc authn.Keychain) (name.Digest, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return name.Digest{}, fmt.Errorf("image reference %q: %w", ref, err)
	}
	if err := remote.Write(r, img, remote.WithAuthFromKeychain(kc), remote.WithContext(ctx)); err != nil {
		return name.Digest{}, fmt.Errorf("pushing to %s: %w", r, err)
	}
	d, err := img.Digest()
	if err != nil {
		return name.Digest{}, err
	}
	return r.Context().Digest(d.String()), nil
}
