package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A write replaces the file whole, with the mode asked for, leaves no
// temporary file behind, and a write that cannot happen leaves the old
// file as it was.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "secret.json")
	if err := Write(path, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("two"), 0o640); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil || string(raw) != "two" {
		t.Fatalf("read %q, %v; want two", raw, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("the directory holds %v, want the file only", entries)
	}

	// A directory where the file should be: the rename fails, nothing
	// is left behind, and the error names the path.
	blocked := filepath.Join(dir, "blocked")
	if err := os.MkdirAll(filepath.Join(blocked, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	err = Write(blocked, []byte("three"), 0o600)
	if err == nil || !strings.Contains(err.Error(), blocked) {
		t.Errorf("writing over a directory: %v, want an error naming %s", err, blocked)
	}
	entries, _ = os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("a temporary file was left behind: %s", e.Name())
		}
	}
}

// A directory is written whole: a fill that fails leaves none (and no
// temporary one), one that succeeds leaves its files in place.
func TestWriteDir(t *testing.T) {
	parent := t.TempDir()
	path := filepath.Join(parent, "graph-data")
	if err := WriteDir(path, func(dir string) error {
		if err := os.WriteFile(filepath.Join(dir, "a"), []byte("x"), 0o644); err != nil {
			return err
		}
		return errors.New("the fill failed")
	}); err == nil {
		t.Fatal("a failed fill wrote the directory")
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 0 {
		t.Fatalf("a failed fill left %v", entries)
	}
	if err := WriteDir(path, func(dir string) error {
		if err := os.MkdirAll(filepath.Join(dir, "channels"), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, "channels", "stable.yaml"), []byte("name: stable\n"), 0o644)
	}); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(path, "channels", "stable.yaml")); err != nil || string(got) != "name: stable\n" {
		t.Errorf("the file reads %q, %v", got, err)
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 1 {
		t.Errorf("the parent holds %v, want the directory alone", entries)
	}
}
