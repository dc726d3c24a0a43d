package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseScaleSteps(t *testing.T) {
	got, err := ParseScaleSteps("1000/30000, 2000/60000,5000/150000")
	if err != nil {
		t.Fatal(err)
	}
	want := []ScaleStep{{1000, 30000}, {2000, 60000}, {5000, 150000}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("step %d: got %v, want %v", i, got[i], want[i])
		}
	}
	for in, wantErr := range map[string]string{
		"1000":            `step "1000" is not NODES/PODS`,
		"0/10":            `step "0/10" is not NODES/PODS`,
		"10/x":            `step "10/x" is not NODES/PODS`,
		"2/600":           "600 pods do not fit on 2 nodes",
		"10/100,5/200":    "step 5/200 is smaller than the step 10/100 before it",
		"10/100,20/50":    "step 20/50 is smaller than the step 10/100 before it",
		"10/100,,20/200":  `step "" is not NODES/PODS`,
		"-1/0":            `step "-1/0" is not NODES/PODS`,
		"10/100, 10/100 ": "",
	} {
		_, err := ParseScaleSteps(in)
		switch {
		case wantErr == "" && err != nil:
			t.Errorf("%q: %v", in, err)
		case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
			t.Errorf("%q: got error %v, want one saying %q", in, err, wantErr)
		}
	}
}

func TestWriteScaleDoc(t *testing.T) {
	row := func(mode string, run int, step ScaleStep, pps float64, cpuMs int, heapPerPodKiB float64, timedOut string) ScaleRow {
		return ScaleRow{Mode: mode, Run: run, Step: step, Ready: step.Nodes, NodesReady: 20 * time.Second, Running: step.Pods,
			PodsRunning: time.Duration(float64(step.Pods)/pps) * time.Second, PodsPerSecond: pps, CPUPerPod: time.Duration(cpuMs) * time.Millisecond,
			IdleCores: 0.5, PSS: 3 << 30, HeapLive: 2 << 30, HeapPerPod: heapPerPodKiB * 1024, LeaseAgeP99: 10.2, GetPods: 1500 * time.Millisecond,
			Charts: 250 * time.Millisecond, TimedOut: timedOut}
	}
	small := ScaleStep{1000, 30000}
	res := &ScaleResult{ControlPlaneNodes: 3, Settings: ScaleSettings{Machine: "2 cores", Commit: "abc", GoVersion: "go1.26", GOGC: 300,
		GOMEMLIMIT: 12 << 30, MemberGOMEMLIMIT: "1536MiB", EtcdMembers: map[string]int{ModeFloor: 3, ModeFull: 3}, Seed: "1", Fsync: true},
		Rows: []ScaleRow{
			row(ModeFloor, 1, small, 100, 10, 20, ""), row(ModeFull, 1, small, 80, 16, 30, ""),
			row(ModeFloor, 2, small, 120, 12, 22, ""), row(ModeFull, 2, small, 70, 18, 26, ""),
			row(ModeFloor, 3, small, 110, 11, 21, ""), row(ModeFull, 3, small, 75, 17, 28, "timed out after 15m0s waiting for pods Running"),
		}}
	res.Rows[3].Hold = &IdleHold{For: 10 * time.Minute, Cores: 0.8, LeaseAgeP99: 10.3, MaxLeaseAge: 11, NotReady: 0}
	dir := t.TempDir()
	doc := filepath.Join(dir, "scale.md")
	if err := os.WriteFile(doc, []byte("# Scale\n\nbefore\n"+ScaleDocBegin+"\nold table\n"+ScaleDocEnd+"\nafter\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteScaleDoc(doc, res); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(doc)
	text := string(raw)
	for _, want := range []string{
		"before\n" + ScaleDocBegin, ScaleDocEnd + "\nafter\n",
		"Measured on 2 cores; commit abc, go1.26; GOGC=300, GOMEMLIMIT=12288MiB for the cluster's process and 1536MiB for each etcd member; etcd members: floor 3, full 3; etcd fsync on; CAPSTAN_RANDOM_SEED=1.",
		// Medians of three runs, their range beside them.
		"| 1000 | 30000 | floor | 3 | 20.0 s | 272.0 s (250.0 s–300.0 s) | 110 (100–120) | 11.0 ms (10.0 ms–12.0 ms) | 0.50 | 3.00 GiB | 2.00 GiB | 21.0 KiB (20.0 KiB–22.0 KiB) | 10.2 s | 0 | 1.5 s | 0.2 s | 3 of 3 done |",
		"| 1000 | 30000 | full | 3 |",
		"| 2 of 3 done; timed out after 15m0s waiting for pods Running |",
		// 17 / 11 and 28 / 21 and 75 / 110.
		"| 1000 | 30000 | full | 1.55 | 1.33 | 0.68 |",
		"| 1000 | full | 1 | 600.0 s | 0.80 | 10.3 s | 11.0 s | 0 |",
		"](scale.svg)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the doc lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "old table") {
		t.Errorf("the old table is still there:\n%s", text)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "scale.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(svg), "<circle"); n != 4 {
		t.Errorf("the plot has %d points, want 1 step × 2 modes × 2 series", n)
	}
	// Written again, the section is replaced, not added to.
	if err := WriteScaleDoc(doc, res); err != nil {
		t.Fatal(err)
	}
	again, _ := os.ReadFile(doc)
	if string(again) != text {
		t.Errorf("a second write changed the doc:\n%s", again)
	}

	if err := os.WriteFile(doc, []byte("# no markers\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteScaleDoc(doc, res); err == nil || !strings.Contains(err.Error(), "has no "+ScaleDocBegin) {
		t.Errorf("a doc without markers: %v", err)
	}
}

func TestParseScaleCluster(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "capstan-before")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for spec, want := range map[string]string{ModeFloor: "floor", " full ": "full", "full@" + bin: "full@capstan-before"} {
		c, err := ParseScaleCluster(spec)
		if err != nil || c.label != want {
			t.Errorf("ParseScaleCluster(%q) = %+v, %v; want the label %s", spec, c, err, want)
		}
	}
	for spec, wantErr := range map[string]string{"ful": `mode "ful": want floor or full`, "full@/no/such/capstan": "no such file",
		"full@" + filepath.Dir(bin): "is not an executable file"} {
		if _, err := ParseScaleCluster(spec); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("ParseScaleCluster(%q): %v; want an error saying %q", spec, err, wantErr)
		}
	}
}

// The quantile of what a histogram gained between two readings, as
// Prometheus' histogram_quantile interpolates it.
func TestQuantileOfAHistogramsGain(t *testing.T) {
	before := []Bucket{{5, 10}, {10, 10}, {15, 10}, {-1, 10}}
	after := []Bucket{{5, 10}, {10, 60}, {15, 110}, {-1, 110}}
	// 100 new observations: 50 in (5,10], 50 in (10,15].
	for q, want := range map[float64]float64{0.5: 10, 0.99: 14.9, 0.25: 7.5} {
		if got := quantile(q, before, after); got < want-1e-9 || got > want+1e-9 {
			t.Errorf("quantile(%v) = %v, want %v", q, got, want)
		}
	}
	if got := quantile(0.99, after, after); got != 0 {
		t.Errorf("no new observations: %v, want 0", got)
	}
	// Past the last finite bound, that bound is all that is known.
	if got := quantile(0.99, nil, []Bucket{{5, 1}, {-1, 100}}); got != 5 {
		t.Errorf("beyond the last bucket: %v, want 5", got)
	}
}

func TestNiceCeil(t *testing.T) {
	for in, want := range map[float64]float64{0.3: 0.5, 1: 1, 1.2: 2, 3: 5, 7.9: 10, 10: 10, 11: 20, 260: 500, 4100: 5000} {
		if got := niceCeil(in); got != want {
			t.Errorf("niceCeil(%v) = %v, want %v", in, got, want)
		}
	}
}

func TestProcessesNamesThisOne(t *testing.T) {
	ps, err := Processes()
	if err != nil {
		t.Fatal(err)
	}
	if ps[0].Name != "capstan" || ps[0].PeakRSS <= 0 || ps[0].RSS <= 0 {
		t.Errorf("this process: %+v", ps[0])
	}
}
