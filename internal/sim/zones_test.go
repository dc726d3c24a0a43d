package sim

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

// An exhausted zone refuses new instances, whichever process serves the
// cloud, and only that zone; restored, it launches them again.
func TestAnExhaustedZoneRefusesInstancesUntilRestored(t *testing.T) {
	ctx := context.Background()
	client := apiserverClient()
	// Two processes serve the cloud; the zone is exhausted through
	// neither, as `capstan sim zone exhaust` does.
	serving, other := NewAPICloud(client, CloudOptions{}), NewAPICloud(client, CloudOptions{})
	inZone := func(name, zone string) InstanceSpec {
		s := spec(name)
		s.Zone = zone
		return s
	}
	if err := ExhaustZone(ctx, client, "sim-zone-b"); err != nil {
		t.Fatal(err)
	}
	if err := ExhaustZone(ctx, client, "sim-zone-b"); err != nil {
		t.Fatalf("exhausting an exhausted zone: %v", err)
	}
	for i, c := range []*APICloud{serving, other} {
		_, err := c.CreateInstance(ctx, inZone("refused-"+string(rune('a'+i)), "sim-zone-b"))
		var ie *InstanceError
		if !errors.As(err, &ie) || ie.Reason != ReasonInsufficientCapacity || !strings.Contains(ie.Message, "zone sim-zone-b has no capacity left") {
			t.Errorf("an instance in the exhausted zone: %v, want %s", err, ReasonInsufficientCapacity)
		}
	}
	if _, err := serving.CreateInstance(ctx, inZone("elsewhere", "sim-zone-a")); err != nil {
		t.Errorf("another zone refused an instance: %v", err)
	}
	if zones, err := ExhaustedZones(ctx, client); err != nil || !slices.Equal(zones, []string{"sim-zone-b"}) {
		t.Errorf("exhausted zones %v (%v), want [sim-zone-b]", zones, err)
	}
	// A refused instance leaves nothing behind: no instance, no index.
	insts, err := serving.ListInstances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(insts) != 1 || insts[0].Name() != "elsewhere" {
		t.Errorf("instances %v, want only elsewhere", insts)
	}
	if err := RestoreZone(ctx, client, "sim-zone-b"); err != nil {
		t.Fatal(err)
	}
	if _, err := other.CreateInstance(ctx, inZone("back", "sim-zone-b")); err != nil {
		t.Errorf("the restored zone refused an instance: %v", err)
	}
	if zones, err := ExhaustedZones(ctx, client); err != nil || len(zones) != 0 {
		t.Errorf("exhausted zones %v (%v) after the restore, want none", zones, err)
	}
	for _, bad := range []string{"", "no spaces"} {
		if err := ExhaustZone(ctx, client, bad); err == nil || !strings.Contains(err.Error(), "zone") {
			t.Errorf("exhausting zone %q: %v, want an error naming the zone", bad, err)
		}
	}
}
