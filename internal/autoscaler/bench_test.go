package autoscaler

import "testing"

// The benchmark's scenarios at a tenth of their size, checked for sense:
// the scale-up adds nodes no fewer than the lower bound and not wildly
// more, and the scale-down finds the underutilized nodes.
func TestBenchScenarios(t *testing.T) {
	cfg := DefaultConfig()
	up, err := NewBenchCluster(100, 30, 0, 300)
	if err != nil {
		t.Fatal(err)
	}
	res, err := up.RunScaleUpLoop(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.NodesAdded < res.LowerBound || res.NodesAdded > res.LowerBound+res.LowerBound/5+1 {
		t.Errorf("scale-up added %d nodes, lower bound %d", res.NodesAdded, res.LowerBound)
	}
	down, err := NewBenchCluster(100, 30, 30, 0)
	if err != nil {
		t.Fatal(err)
	}
	res, err = down.RunScaleDownLoop(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Unneeded != 30 {
		t.Errorf("scale-down found %d unneeded nodes, want the 30 underutilized", res.Unneeded)
	}
}

func BenchmarkScaleUpLoop(b *testing.B) {
	cfg := DefaultConfig()
	c, err := NewBenchCluster(1000, 30, 0, 3000)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := c.RunScaleUpLoop(&cfg); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkScaleDownLoop(b *testing.B) {
	cfg := DefaultConfig()
	c, err := NewBenchCluster(1000, 30, 300, 0)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := c.RunScaleDownLoop(&cfg); err != nil {
			b.Fatal(err)
		}
	}
}
