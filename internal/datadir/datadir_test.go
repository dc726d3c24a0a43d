package datadir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOpenLocks(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "in use by another capstan") {
		t.Errorf("second open: %v, want a lock error", err)
	}
	d.Close()
	d2, err := Open(dir)
	if err != nil {
		t.Fatalf("open after close: %v", err)
	}
	d2.Close()
}

func TestOpenRefusesOtherFormats(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "capstan.json"), []byte(`{"formatVersion":2}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "format version 2") {
		t.Errorf("got %v, want a format version error", err)
	}
	corrupt := t.TempDir()
	if err := os.WriteFile(filepath.Join(corrupt, "capstan.json"), []byte(`{`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(corrupt); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("got %v, want a corrupt-file error", err)
	}
}

func TestEtcdPortsPersist(t *testing.T) {
	d, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c1, p1, err := d.EtcdPorts()
	if err != nil {
		t.Fatal(err)
	}
	c2, p2, err := d.EtcdPorts()
	if err != nil {
		t.Fatal(err)
	}
	if c1 != c2 || p1 != p2 || c1 == p1 {
		t.Errorf("ports %d/%d then %d/%d, want the same distinct pair", c1, p1, c2, p2)
	}
}
