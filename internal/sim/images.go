package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"hash/fnv"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// maxReportedImages is how many images a kubelet reports in node status
// (its nodeStatusMaxImages), the largest first.
const maxReportedImages = 50

// ImageSize is the size of an image in the simulated registry: derived
// from its name, between 100 MiB and 1 GiB, so that every node and every
// restart agree on it.
func ImageSize(image string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(image))
	const mib = 1 << 20
	return 100*mib + int64(h.Sum64()%(924*mib))
}

// imageNames are the names a kubelet reports for an image pulled by
// reference ref: the repository with its digest, and the reference with
// its tag (":latest" when it has none).
func imageNames(ref string) []string {
	if strings.Contains(ref, "@") {
		return []string{ref}
	}
	tagged := ref
	repo := ref
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		repo = ref[:i]
	} else {
		tagged = ref + ":latest"
	}
	sum := sha256.Sum256([]byte(tagged))
	return []string{repo + "@sha256:" + hex.EncodeToString(sum[:]), tagged}
}

// recordImages remembers that the pod's images are now on its node, and
// reports whether any is new there.
func (s *Simulator) recordImages(pod *corev1.Pod) bool {
	s.imageMu.Lock()
	defer s.imageMu.Unlock()
	have := s.images[pod.Spec.NodeName]
	if have == nil {
		have = map[string]bool{}
		s.images[pod.Spec.NodeName] = have
	}
	added := false
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			if c.Image != "" && !have[c.Image] {
				have[c.Image] = true
				added = true
			}
		}
	}
	return added
}

// nodeImages is what the node's kubelet reports: the images of the pods
// that ran there (those it reported before a restart included), largest
// first, at most maxReportedImages.
func (s *Simulator) nodeImages(node *corev1.Node) []corev1.ContainerImage {
	byName := map[string]corev1.ContainerImage{}
	for _, img := range node.Status.Images {
		if len(img.Names) > 0 {
			byName[img.Names[len(img.Names)-1]] = img
		}
	}
	s.imageMu.Lock()
	for ref := range s.images[node.Name] {
		names := imageNames(ref)
		byName[names[len(names)-1]] = corev1.ContainerImage{Names: names, SizeBytes: ImageSize(names[len(names)-1])}
	}
	s.imageMu.Unlock()
	if len(byName) == 0 {
		return nil
	}
	out := make([]corev1.ContainerImage, 0, len(byName))
	for _, img := range byName {
		out = append(out, img)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].SizeBytes != out[j].SizeBytes {
			return out[i].SizeBytes > out[j].SizeBytes
		}
		return out[i].Names[len(out[i].Names)-1] < out[j].Names[len(out[j].Names)-1]
	})
	if len(out) > maxReportedImages {
		out = out[:maxReportedImages]
	}
	return out
}
