package planted

import (
	"strings"
	"testing"
)

// A bug is on only once the binary allows planting and the environment
// names it; a name that is no bug is refused.
func TestOnlyAnAllowedBinaryPlants(t *testing.T) {
	defer func() { allowed.Store(false); planted = map[string]bool{} }()
	planted = map[string]bool{ScaleUpTwice: true}
	if On(ScaleUpTwice) {
		t.Fatal("a bug was on in a binary that never allowed planting")
	}
	if err := Allow(); err != nil {
		t.Fatal(err)
	}
	if !On(ScaleUpTwice) || On(UpdateTwice) {
		t.Fatalf("allowed: %s on %v, %s on %v", ScaleUpTwice, On(ScaleUpTwice), UpdateTwice, On(UpdateTwice))
	}
	allowed.Store(false)
	planted = map[string]bool{"nope/bug": true}
	if err := Allow(); err == nil || !strings.Contains(err.Error(), `"nope/bug" is not a bug that can be planted`) {
		t.Fatalf("Allow with an unknown bug: %v", err)
	}
	if allowed.Load() {
		t.Error("a refused Allow allowed planting")
	}
}

// Every bug names the scenario and the invariant that show it.
func TestBugsAreDocumented(t *testing.T) {
	for _, b := range Bugs {
		if b.Doc == "" || b.Scenario == "" || b.Invariant == "" {
			t.Errorf("bug %s lacks its doc, scenario or invariant: %+v", b.Name, b)
		}
	}
}
