package payload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
)

func manifest(file string, index int, kind string) *Manifest {
	api := "v1"
	if kind == "Job" {
		api = "batch/v1"
	}
	return &Manifest{File: file, Index: index, APIVersion: api, Kind: kind, Name: fmt.Sprintf("%s-%d", file, index)}
}

// randomPayload makes a payload of random run levels, components and
// files, with a few Jobs and a few files outside the naming pattern.
func randomPayload(r *rand.Rand) []*Manifest {
	var ms []*Manifest
	n := 5 + r.IntN(60)
	for i := 0; i < n; i++ {
		level := []string{"00", "03", "05", "10", "30", "50", "70", "90"}[r.IntN(8)]
		component := []string{"etcd", "kube-apiserver", "machine-api", "dns", "network-operator"}[r.IntN(5)]
		file := fmt.Sprintf("0000_%s_%s_%02d_%s.yaml", level, component, r.IntN(5), []string{"ns", "crd", "deployment", "rbac"}[r.IntN(4)])
		if r.IntN(20) == 0 {
			file = fmt.Sprintf("zz-extra-%d.yaml", r.IntN(3))
		}
		kind := "ConfigMap"
		if r.IntN(15) == 0 {
			kind = "Job"
		}
		ms = append(ms, manifest(file, r.IntN(3), kind))
	}
	return ms
}

type applied struct {
	m          *Manifest
	start, end int
}

// record runs the graph, numbering the start and end of every apply.
func record(t *testing.T, g *Graph, workers int, fail func(*Manifest) error) ([]applied, error) {
	t.Helper()
	var mu sync.Mutex
	clock := 0
	var out []applied
	err := Run(context.Background(), g, workers, func(ctx context.Context, m *Manifest) error {
		mu.Lock()
		clock++
		a := applied{m: m, start: clock}
		mu.Unlock()
		for range rand.IntN(50) { // let parallel nodes interleave
			runtime.Gosched()
		}
		mu.Lock()
		clock++
		a.end = clock
		out = append(out, a)
		mu.Unlock()
		if fail != nil {
			return fail(m)
		}
		return nil
	})
	return out, err
}

func levelOf(m *Manifest) string {
	if lvl, _, ok := strings.Cut(strings.TrimPrefix(m.File, "0000_"), "_"); ok && strings.HasPrefix(m.File, "0000_") {
		return lvl
	}
	return ""
}

// Property: over random payloads, the whole payload is applied once; no
// manifest starts before every manifest of a lower run level (earlier in
// file order, with no Job or odd file in between deciding otherwise) has
// ended; one component's manifests start in file order; and nothing
// crosses a Job.
func TestTaskGraphOrderProperty(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		r := rand.New(rand.NewPCG(seed, seed))
		ms := randomPayload(r)
		g := ByRunLevel(ms)
		if g.Tasks() != len(ms) {
			t.Fatalf("seed %d: graph holds %d of %d manifests", seed, g.Tasks(), len(ms))
		}
		got, err := record(t, g, 1+r.IntN(16), nil)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if len(got) != len(ms) {
			t.Fatalf("seed %d: %d applies for %d manifests", seed, len(got), len(ms))
		}
		sorted := append([]*Manifest(nil), ms...)
		Sort(sorted)
		pos := map[*Manifest]int{}
		for i, m := range sorted {
			pos[m] = i
		}
		for _, a := range got {
			for _, b := range got {
				if pos[b.m] >= pos[a.m] {
					continue
				}
				// b comes before a in file order.
				barrier := a.m.isJob() || b.m.isJob() || levelOf(a.m) == "" || levelOf(b.m) == ""
				lower := levelOf(b.m) < levelOf(a.m)
				sameComponent := nodeOf(a.m).Component == nodeOf(b.m).Component && levelOf(a.m) == levelOf(b.m)
				crossesJob := false
				for _, m := range sorted[pos[b.m]+1 : pos[a.m]] {
					crossesJob = crossesJob || m.isJob() || levelOf(m) == ""
				}
				if (barrier || lower || crossesJob) && b.end > a.start {
					t.Fatalf("seed %d: %s started (at %d) before %s ended (at %d)", seed, a.m, a.start, b.m, b.end)
				}
				if sameComponent && b.start > a.start {
					t.Fatalf("seed %d: %s started before %s of the same component", seed, a.m, b.m)
				}
			}
		}
	}
}

func TestByRunLevelShape(t *testing.T) {
	ms := []*Manifest{
		manifest("0000_50_dns_01_deployment.yaml", 0, "Deployment"),
		manifest("0000_10_etcd_00_ns.yaml", 0, "Namespace"),
		manifest("0000_50_network_01_ds.yaml", 0, "DaemonSet"),
		manifest("0000_50_dns_00_ns.yaml", 0, "Namespace"),
		manifest("0000_50_dns_00_ns.yaml", 1, "ServiceAccount"),
		manifest("0000_60_migrate_00_job.yaml", 0, "Job"),
		manifest("0000_70_console_00_ns.yaml", 0, "Namespace"),
	}
	var shape []string
	for _, level := range ByRunLevel(ms).Levels {
		var nodes []string
		for _, n := range level {
			var files []string
			for _, m := range n.Tasks {
				files = append(files, fmt.Sprintf("%s#%d", strings.TrimSuffix(m.File, ".yaml"), m.Index))
			}
			nodes = append(nodes, n.String()+"["+strings.Join(files, " ")+"]")
		}
		sort.Strings(nodes)
		shape = append(shape, strings.Join(nodes, " | "))
	}
	want := []string{
		"10_etcd[0000_10_etcd_00_ns#0]",
		"50_dns[0000_50_dns_00_ns#0 0000_50_dns_00_ns#1 0000_50_dns_01_deployment#0] | 50_network[0000_50_network_01_ds#0]",
		"60_migrate[0000_60_migrate_00_job#0]",
		"70_console[0000_70_console_00_ns#0]",
	}
	if strings.Join(shape, "\n") != strings.Join(want, "\n") {
		t.Errorf("graph:\n%s\nwant:\n%s", strings.Join(shape, "\n"), strings.Join(want, "\n"))
	}
	if f := Flatten(ms); len(f.Levels) != 3 || len(f.Levels[0]) != 3 {
		t.Errorf("flattened: %d levels, first of %d nodes; want 3 levels (before the Job, the Job, after), first of 3", len(f.Levels), len(f.Levels[0]))
	}
}

func TestRunStopsAtTheFirstFailure(t *testing.T) {
	ms := []*Manifest{
		manifest("0000_10_a_00.yaml", 0, "ConfigMap"),
		manifest("0000_20_b_00.yaml", 0, "ConfigMap"),
		manifest("0000_20_b_01.yaml", 0, "ConfigMap"),
		manifest("0000_30_c_00.yaml", 0, "ConfigMap"),
	}
	boom := errors.New("the server rejected it")
	got, err := record(t, ByRunLevel(ms), 4, func(m *Manifest) error {
		if m.File == "0000_20_b_00.yaml" {
			return boom
		}
		return nil
	})
	var inc *IncompleteError
	if !errors.As(err, &inc) || !errors.Is(err, boom) {
		t.Fatalf("error %v", err)
	}
	if !strings.HasPrefix(err.Error(), "2 incomplete task nodes, beginning with 20_b: ") {
		t.Errorf("error %q", err)
	}
	for _, a := range got {
		if a.m.File == "0000_20_b_01.yaml" || a.m.File == "0000_30_c_00.yaml" {
			t.Errorf("%s was applied after its component's earlier manifest failed", a.m)
		}
	}
}

// A failing component stops there, but the other components of its run
// level are applied all the same (with one worker, after it failed); the
// next level is not started, and every failure is reported.
func TestRunGoesOnWithTheFailingNodesSiblings(t *testing.T) {
	ms := []*Manifest{
		manifest("0000_20_a_00.yaml", 0, "ConfigMap"),
		manifest("0000_20_a_01.yaml", 0, "ConfigMap"),
		manifest("0000_20_b_00.yaml", 0, "ConfigMap"),
		manifest("0000_20_b_01.yaml", 0, "ConfigMap"),
		manifest("0000_20_c_00.yaml", 0, "ConfigMap"),
		manifest("0000_20_d_00.yaml", 0, "ConfigMap"),
		manifest("0000_30_e_00.yaml", 0, "ConfigMap"),
	}
	boomA, boomD := errors.New("a is refused"), errors.New("d is refused")
	got, err := record(t, ByRunLevel(ms), 1, func(m *Manifest) error {
		switch m.File {
		case "0000_20_a_00.yaml":
			return boomA
		case "0000_20_d_00.yaml":
			return boomD
		}
		return nil
	})
	var inc *IncompleteError
	if !errors.As(err, &inc) || !errors.Is(err, boomA) || !errors.Is(err, boomD) {
		t.Fatalf("error %v, want both failures", err)
	}
	applied := map[string]bool{}
	for _, a := range got {
		applied[a.m.File] = true
	}
	for _, f := range []string{"0000_20_b_00.yaml", "0000_20_b_01.yaml", "0000_20_c_00.yaml"} {
		if !applied[f] {
			t.Errorf("%s was not applied: a sibling's failure stopped it", f)
		}
	}
	for _, f := range []string{"0000_20_a_01.yaml", "0000_30_e_00.yaml"} {
		if applied[f] {
			t.Errorf("%s was applied after a failure before it", f)
		}
	}
	var names []string
	for _, n := range inc.Incomplete {
		names = append(names, n.String())
	}
	sort.Strings(names)
	if fmt.Sprint(names) != "[20_a 20_d 30_e]" {
		t.Errorf("incomplete %v, want [20_a 20_d 30_e]", names)
	}
}
