package etcd

import (
	"maps"
	"slices"
	"testing"
	"time"
)

func TestParsePeerFaults(t *testing.T) {
	cut, links, delayed := parsePeerFaults("m-0\nm-1 delay 200ms\n\nm-2 delay soon\nm-3 delay -1s\n  m-4  \nm-2 cut m-1\nm-3 cut m-3\n")
	if want := map[[2]string]bool{{"m-1", "m-2"}: true}; !maps.Equal(links, want) {
		t.Errorf("links cut %v, want %v (a member is never cut from itself)", links, want)
	}
	if want := []string{"m-0", "m-4"}; !slices.Equal(cut, want) {
		t.Errorf("cut %v, want %v", cut, want)
	}
	if want := map[string]time.Duration{"m-1": 200 * time.Millisecond}; !maps.Equal(delayed, want) {
		t.Errorf("delayed %v, want %v (a delay that is no positive duration delays nothing)", delayed, want)
	}
}
