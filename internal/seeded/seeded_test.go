package seeded

import (
	"slices"
	"testing"
)

// A seed draws the same names and orders again; another seed others.
func TestASeedReplays(t *testing.T) {
	defer func() { mu.Lock(); rnd = nil; mu.Unlock() }()
	draw := func(seed uint64) []string {
		Seed(seed)
		out := []string{String(5, "abcdefghij"), String(5, "abcdefghij")}
		order := []string{"a", "b", "c", "d", "e"}
		Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		return append(out, order...)
	}
	a, b, c := draw(7), draw(7), draw(8)
	if !slices.Equal(a, b) {
		t.Fatalf("seed 7 drew %v, then %v", a, b)
	}
	if slices.Equal(a, c) {
		t.Fatalf("seeds 7 and 8 drew the same %v", a)
	}
}
