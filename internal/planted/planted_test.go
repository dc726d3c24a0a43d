package planted

import (
	"strings"
	"testing"
)

// A bug is on only once the binary allows planting and the environment
// names it; a name that is no bug is refused.
func TestOnlyAnAllowedBinaryPlants(t *testing.T) {
	set := func(m map[string]bool) { planted.Store(&m) }
	defer func() { allowed.Store(false); set(map[string]bool{}) }()
	set(map[string]bool{ScaleUpTwice: true})
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
	set(map[string]bool{"nope/bug": true})
	if err := Allow(); err == nil || !strings.Contains(err.Error(), `"nope/bug" is not a bug that can be planted`) {
		t.Fatalf("Allow with an unknown bug: %v", err)
	}
	if allowed.Load() {
		t.Error("a refused Allow allowed planting")
	}
}

// A test plants a bug in its own process, and takes it out again.
func TestPlantAndUndo(t *testing.T) {
	undo, err := Plant(StaleReads)
	if err != nil {
		t.Fatal(err)
	}
	if !On(StaleReads) || On(ScaleUpTwice) {
		t.Fatalf("planted %s: on %v, %s on %v", StaleReads, On(StaleReads), ScaleUpTwice, On(ScaleUpTwice))
	}
	undo()
	if On(StaleReads) {
		t.Error("the bug is still on after undo")
	}
	if _, err := Plant("nope/bug"); err == nil {
		t.Error("an unknown bug was planted")
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
