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
	res := &ScaleResult{ControlPlaneNodes: 3, Rows: []ScaleRow{
		{Step: ScaleStep{1000, 30000}, Ready: 1000, NodesReady: 20 * time.Second, Running: 30000, PodsRunning: 100 * time.Second,
			PodsPerSecond: 300, CPUPerPod: 3 * time.Millisecond, PeakRSS: 2 << 30, RSS: 3 << 29, GetPods: 1500 * time.Millisecond, Charts: 250 * time.Millisecond,
			Processes: []Process{{Name: "capstan", PeakRSS: 3 << 29}, {Name: "capstan etcd member master-0", PeakRSS: 1 << 29}}},
		{Step: ScaleStep{2000, 60000}, Ready: 2000, Running: 41000, PodsRunning: 900 * time.Second, PodsPerSecond: 12, PeakRSS: 5 << 30, RSS: 4 << 30,
			Processes: []Process{{Name: "capstan", PeakRSS: 4 << 30}}, TimedOut: "timed out after 15m0s waiting for pods Running"},
	}}
	dir := t.TempDir()
	doc := filepath.Join(dir, "scale.md")
	if err := os.WriteFile(doc, []byte("# Scale\n\nbefore\n"+ScaleDocBegin+"\nold table\n"+ScaleDocEnd+"\nafter\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteScaleDoc(doc, res, "2 cores"); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(doc)
	text := string(raw)
	for _, want := range []string{
		"before\n" + ScaleDocBegin, ScaleDocEnd + "\nafter\n", "Measured on 2 cores, with 3 masters.",
		"| 1000 | 30000 | 1000 in 20.0 s | 30000 in 100.0 s | 300 | 3.0 ms | 1.50 GiB | 2.00 GiB | capstan, 1.50 GiB | 1.50 s | 0.25 s | done |",
		"| 2000 | 60000 | 2000 in 0.0 s | 41000 in 900.0 s | 12 | 0.0 ms | 4.00 GiB | 5.00 GiB | capstan, 4.00 GiB | 0.00 s | 0.00 s | timed out after 15m0s waiting for pods Running |",
		"![Peak memory and pods/s against the cluster's size](scale.svg)",
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
		t.Errorf("the plot has %d points, want 2 steps × 2 series", n)
	}
	// Written again, the section is replaced, not added to.
	if err := WriteScaleDoc(doc, res, "2 cores"); err != nil {
		t.Fatal(err)
	}
	again, _ := os.ReadFile(doc)
	if string(again) != text {
		t.Errorf("a second write changed the doc:\n%s", again)
	}

	if err := os.WriteFile(doc, []byte("# no markers\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteScaleDoc(doc, res, "2 cores"); err == nil || !strings.Contains(err.Error(), "has no "+ScaleDocBegin) {
		t.Errorf("a doc without markers: %v", err)
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
