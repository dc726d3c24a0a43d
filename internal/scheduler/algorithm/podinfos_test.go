package algorithm

import "testing"

func TestPodInfosKeepAnObjectsFactsUntilItIsGone(t *testing.T) {
	c := NewPodInfos()
	a := withRequests(pod("a", nil), "500m", "1Gi")
	first := c.Get(a)
	if first.Requests.MilliCPU != 500 {
		t.Fatalf("requests of a: %d millicpu, want 500", first.Requests.MilliCPU)
	}
	if c.Get(a) != first {
		t.Fatal("a second Get of the same object in a round made its facts again")
	}
	c.NextRound()
	if c.Get(a) != first {
		t.Fatal("the next round made again the facts of an object it had seen")
	}

	// An informer hands out a new object when the pod changes: its facts
	// are the new object's.
	resized := withRequests(pod("a", nil), "2", "1Gi")
	c.NextRound()
	if got := c.Get(resized).Requests.MilliCPU; got != 2000 {
		t.Fatalf("requests of a's new object: %d millicpu, want 2000", got)
	}
	// The old object was not asked for in this round: one more round and
	// it is forgotten.
	if c.Len() != 2 {
		t.Fatalf("%d objects held, want the old and the new object of a", c.Len())
	}
	c.NextRound()
	c.Get(resized)
	if c.Len() != 1 {
		t.Fatalf("%d objects held after a round without the old object, want 1", c.Len())
	}
}

func TestNilPodInfosMakesFreshFacts(t *testing.T) {
	var c *PodInfos
	a := withRequests(pod("a", nil), "500m", "1Gi")
	if c.Get(a) == c.Get(a) {
		t.Fatal("a nil cache returned the same facts twice")
	}
	c.NextRound()
	if c.Len() != 0 {
		t.Fatalf("a nil cache holds %d objects", c.Len())
	}
}
