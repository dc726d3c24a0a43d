package etcd

import (
	"maps"
	"slices"
	"testing"
	"time"
)

func TestParsePeerFaults(t *testing.T) {
	cut, delayed := parsePeerFaults("m-0\nm-1 delay 200ms\n\nm-2 delay soon\nm-3 delay -1s\n  m-4  \n")
	if want := []string{"m-0", "m-4"}; !slices.Equal(cut, want) {
		t.Errorf("cut %v, want %v", cut, want)
	}
	if want := map[string]time.Duration{"m-1": 200 * time.Millisecond}; !maps.Equal(delayed, want) {
		t.Errorf("delayed %v, want %v (a delay that is no positive duration delays nothing)", delayed, want)
	}
}
