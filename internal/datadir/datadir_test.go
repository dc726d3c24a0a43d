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

// L8: a data dir others may read or enter (one made before, with a
// umask's 0755) is named in a warning; a new one is made 0700.
func TestOpenWarnsOfADataDirOthersMayRead(t *testing.T) {
	fresh := filepath.Join(t.TempDir(), "fresh")
	d, err := Open(fresh)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(fresh)
	if fi.Mode().Perm() != 0o700 || len(d.Warnings) != 0 {
		t.Errorf("a new data dir: mode %04o, warnings %q", fi.Mode().Perm(), d.Warnings)
	}
	d.Close()
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	d, err = Open(open)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], "may be read or entered by other users (mode 0755)") || !strings.Contains(d.Warnings[0], "chmod 700 "+open) {
		t.Errorf("a data dir of mode 0755: warnings %q", d.Warnings)
	}
}
