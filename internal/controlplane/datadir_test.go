package controlplane

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOpenDataDirLocks(t *testing.T) {
	dir := t.TempDir()
	d, err := OpenDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenDataDir(dir); err == nil || !strings.Contains(err.Error(), "in use by another capstan") {
		t.Errorf("second open: %v, want a lock error", err)
	}
	d.Close()
	d2, err := OpenDataDir(dir)
	if err != nil {
		t.Fatalf("open after close: %v", err)
	}
	d2.Close()
}

func TestOpenDataDirRefusesOtherFormats(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "capstan.json"), []byte(`{"formatVersion":2}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenDataDir(dir); err == nil || !strings.Contains(err.Error(), "format version 2") {
		t.Errorf("got %v, want a format version error", err)
	}
	corrupt := t.TempDir()
	if err := os.WriteFile(filepath.Join(corrupt, "capstan.json"), []byte(`{`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenDataDir(corrupt); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("got %v, want a corrupt-file error", err)
	}
}

func TestEtcdPortsPersist(t *testing.T) {
	d, err := OpenDataDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c1, p1, err := d.etcdPorts()
	if err != nil {
		t.Fatal(err)
	}
	c2, p2, err := d.etcdPorts()
	if err != nil {
		t.Fatal(err)
	}
	if c1 != c2 || p1 != p2 || c1 == p1 {
		t.Errorf("ports %d/%d then %d/%d, want the same distinct pair", c1, p1, c2, p2)
	}
}

func TestValidateConfig(t *testing.T) {
	good := DefaultConfig()
	if err := validateConfig(good); err != nil {
		t.Fatalf("default config invalid: %v", err)
	}
	bad := good
	bad.NodeMonitorPeriod = bad.NodeMonitorGracePeriod
	bad.UnhealthyZoneThreshold = 2
	bad.BindAddress = "nowhere"
	err := validateConfig(bad)
	for _, want := range []string{"--node-monitor-period", "--unhealthy-zone-threshold", "--bind-address"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
}
