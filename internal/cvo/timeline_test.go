package cvo

import (
	"reflect"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/cvo/payload"
)

func TestBreakdownSplitsWallTime(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var tl Timeline
	tl.accepted("4.10.91", at(0))
	tl.started("4.10.91", 5)
	// Two applies overlapping (100-300, 200-400), an operator waited for
	// 400-900 with an apply inside it (500-600), a gap (900-1000), then
	// a last apply (1000-1100).
	tl.task("4.10.91", TaskApply, manifest("0000_10_config-operator_00_namespace.yaml", "a"), at(100), at(300))
	tl.task("4.10.91", TaskApply, manifest("0000_10_config-operator_01_config.yaml", "b"), at(200), at(400))
	tl.task("4.10.91", TaskWait, manifest("0000_10_config-operator_10_clusteroperator.yaml", "config-operator"), at(400), at(900))
	tl.task("4.10.91", TaskApply, manifest("0000_20_kube-apiserver-operator_00_namespace.yaml", "c"), at(500), at(600))
	tl.task("4.10.91", TaskApply, manifest("0000_80_machine-config-operator_05_deployment.yaml", "d"), at(1000), at(1100))
	tl.completed("4.10.91", at(1200))
	tl.completed("4.10.91", at(5000)) // the first completion counts
	p := tl.Pass("4.10.91")
	if p.Tasks != 5 || !p.Completed.Equal(at(1200)) {
		t.Fatalf("pass %+v", p)
	}
	b := p.Breakdown(p.Accepted, p.Completed)
	want := Breakdown{Applying: 500 * time.Millisecond, Waiting: 400 * time.Millisecond, Between: 300 * time.Millisecond,
		ApplySum: 600 * time.Millisecond, Applies: 4, Waits: 1}
	if b != want {
		t.Errorf("breakdown %+v, want %+v", b, want)
	}
	if b.Applying+b.Waiting+b.Between != p.Completed.Sub(p.Accepted) {
		t.Errorf("the parts do not add up to the wall time")
	}
	// A nil timeline records nothing and does not fail.
	var none *Timeline
	none.task("x", TaskApply, manifest("0000_10_x_y.yaml", "x"), at(0), at(1))
}

func TestRunLevelsOfAPass(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	var tl Timeline
	// The CVO's own Deployment (no run level: run level 00), run level 10
	// with two operators waited for, run level 80 with one.
	tl.task("v", TaskApply, manifest("0000_80_machine-config-operator_05_deployment.yaml", "mco"), at(40), at(41))
	tl.task("v", TaskApply, &payload.Manifest{Dir: "manifests", File: "deployment.yaml", Name: "cluster-version-operator"}, at(0), at(1))
	tl.task("v", TaskApply, manifest("0000_10_a-operator_00_namespace.yaml", "a"), at(2), at(3))
	tl.task("v", TaskWait, manifest("0000_10_a-operator_10_clusteroperator.yaml", "a"), at(3), at(9))
	tl.task("v", TaskWait, manifest("0000_10_b-operator_10_clusteroperator.yaml", "b"), at(3), at(20))
	tl.task("v", TaskWait, manifest("0000_80_machine-config-operator_10_clusteroperator.yaml", "machine-config"), at(41), at(100))
	levels := tl.Pass("v").RunLevels()
	type got struct {
		level      string
		start, end int
		longest    string
	}
	var have []got
	for _, l := range levels {
		have = append(have, got{l.RunLevel, int(l.Start.Sub(t0).Seconds()), int(l.End.Sub(t0).Seconds()), l.Longest.Name})
	}
	want := []got{{"00", 0, 1, ""}, {"10", 2, 20, "b"}, {"80", 40, 100, "machine-config"}}
	if !reflect.DeepEqual(have, want) {
		t.Errorf("run levels %+v, want %+v", have, want)
	}
	if l := levels[1].Longest; l.Component != "b-operator" || l.Kind != TaskWait {
		t.Errorf("longest of run level 10 %+v", l)
	}
}

func manifest(file, name string) *payload.Manifest {
	return &payload.Manifest{Dir: "release-manifests", File: file, Kind: "ConfigMap", Name: name}
}
