package sim

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestANodeIsAsOldAsTheNodeItStandsFor(t *testing.T) {
	created := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	node := func(ann string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}}
		if ann != "" {
			n.Annotations = map[string]string{CreatedAnnotation: ann}
		}
		return n
	}
	for ann, want := range map[string]time.Time{
		"":                       created,
		"2026-11-01T08:00:00Z":   time.Date(2026, 11, 1, 8, 0, 0, 0, time.UTC),
		"2026-12-01T08:00:00Z":   created, // later than the node itself: not what it stands for
		"last week":              created,
		"2026-11-28T11:59:59.5Z": created.Add(-500 * time.Millisecond),
		// Within the second the API rounded the creation down to.
		"2026-11-28T12:00:00.5Z": created.Add(500 * time.Millisecond),
		"2026-11-28T12:00:01Z":   created,
	} {
		if got := NodeCreated(node(ann)); !got.Equal(want) {
			t.Errorf("annotation %q: created %v, want %v", ann, got, want)
		}
	}
}
