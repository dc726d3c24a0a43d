package release

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Describe prints a release image as `oc adm release info` does.
func Describe(w io.Writer, img *Image) error {
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	p := img.Payload
	fmt.Fprintf(tw, "Name:\t%s\n", p.Metadata.Version)
	fmt.Fprintf(tw, "Digest:\t%s\n", img.Digest)
	fmt.Fprintf(tw, "Created:\t%s\n", img.Config.Created.UTC().Truncate(time.Second).Format(time.RFC3339))
	fmt.Fprintf(tw, "OS/Arch:\t%s/%s\n", img.Config.OS, img.Config.Architecture)
	fmt.Fprintf(tw, "Manifests:\t%d\n", len(p.Manifests))
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "Pull From:\t%s\n", img.PullSpec)
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "Release Metadata:\n")
	fmt.Fprintf(tw, "  Version:\t%s\n", p.Metadata.Version)
	if len(p.Metadata.Previous) > 0 {
		fmt.Fprintf(tw, "  Upgrades:\t%s\n", strings.Join(p.Metadata.Previous, ", "))
	} else {
		fmt.Fprintf(tw, "  Upgrades:\t<none>\n")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	section := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	fmt.Fprintf(section, "  Metadata:\n")
	keys := make([]string, 0, len(p.Metadata.Metadata))
	for k, v := range p.Metadata.Metadata {
		if v != "" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(section, "    %s:\t%v\n", k, p.Metadata.Metadata[k])
	}
	if err := section.Flush(); err != nil {
		return err
	}
	tw = tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	if versions := componentVersions(p); len(versions) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintf(tw, "Component Versions:\n")
		for _, c := range versions {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", c.name, c.version, c.display)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	images := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	fmt.Fprintln(images)
	fmt.Fprintf(images, "Images:\n")
	fmt.Fprintf(images, "  NAME\tDIGEST\n")
	for _, tag := range p.ImageReferences.Spec.Tags {
		if tag.From == nil || tag.From.Kind != "DockerImage" {
			continue
		}
		id := tag.From.Name
		if _, digest, ok := strings.Cut(id, "@"); ok {
			id = digest
		}
		fmt.Fprintf(images, "  %s\t%s\n", tag.Name, id)
	}
	if err := images.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w)
	return err
}

type componentVersion struct{ name, version, display string }

// componentVersions reads the io.openshift.build.versions annotation of
// the image references ("kubernetes=1.29.6,machine-os=416.94") with the
// display names of io.openshift.build.version-display-names.
func componentVersions(p *Payload) []componentVersion {
	ann := p.ImageReferences.Annotations
	display := map[string]string{}
	for _, kv := range strings.Split(ann[DisplayNamesAnnotation], ",") {
		if k, v, ok := strings.Cut(strings.TrimSpace(kv), "="); ok {
			display[k] = v
		}
	}
	var out []componentVersion
	for _, kv := range strings.Split(ann[BuildVersionsAnnotation], ",") {
		if k, v, ok := strings.Cut(strings.TrimSpace(kv), "="); ok {
			out = append(out, componentVersion{name: k, version: v, display: display[k]})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// Extract writes a release's release-manifests/ into dir (image-references
// and release-metadata included) and says so as `oc adm release extract`.
func Extract(w io.Writer, img *Image, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	files, err := img.Payload.files()
	if err != nil {
		return err
	}
	for n, raw := range files {
		rel, ok := strings.CutPrefix(n, ReleaseManifestsDir+"/")
		if !ok {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, rel), raw, 0o644); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintf(w, "Extracted release payload from digest %s created at %s\n", img.Digest, img.Config.Created.UTC().Format(time.RFC3339))
	return err
}

// File returns one file of release-manifests/, as `oc adm release extract
// --file` prints it.
func File(img *Image, name string) ([]byte, error) {
	files, err := img.Payload.files()
	if err != nil {
		return nil, err
	}
	raw, ok := files[ReleaseManifestsDir+"/"+name]
	if !ok {
		return nil, fmt.Errorf("image did not contain %s", name)
	}
	return raw, nil
}
