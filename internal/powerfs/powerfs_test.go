package powerfs

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func mount(t *testing.T) (fs *FS, backing, dir string) {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("this machine cannot mount a powerfs: %v", err)
	}
	backing, dir = t.TempDir(), t.TempDir()
	fs, err := Mount(backing, dir)
	if err != nil {
		t.Fatal(err)
	}
	// A test that failed midway leaves nothing mounted.
	t.Cleanup(func() { _ = fs.unmount() })
	return fs, backing, dir
}

func remount(t *testing.T, backing, dir string) *FS {
	t.Helper()
	fs, err := Mount(backing, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Unmount() })
	return fs
}

// What was written and synced survives the cut; what was written and
// not synced is read back until the cut, and is gone after it; a clean
// unmount keeps everything.
func TestACutLosesWhatWasNotSynced(t *testing.T) {
	fs, backing, dir := mount(t)
	synced := filepath.Join(dir, "synced")
	f, err := os.Create(synced)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("kept")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	// Written after the sync: held back.
	if _, err := f.WriteAt([]byte(" and more"), 4); err != nil {
		t.Fatal(err)
	}
	f.Close()
	unsynced := filepath.Join(dir, "unsynced")
	if err := os.WriteFile(unsynced, bytes.Repeat([]byte("x"), 10000), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(synced); err != nil || string(got) != "kept and more" {
		t.Fatalf("before the cut, synced reads %q, %v", got, err)
	}
	if got, err := os.ReadFile(unsynced); err != nil || len(got) != 10000 {
		t.Fatalf("before the cut, unsynced reads %d bytes, %v", len(got), err)
	}
	if st, err := os.Stat(unsynced); err != nil || st.Size() != 10000 {
		t.Fatalf("before the cut, unsynced's size is %v, %v", st, err)
	}
	if n := fs.Unsynced(); n < 10000 {
		t.Errorf("%d bytes unsynced, want at least the 10000 written", n)
	}
	if err := fs.Cut(); err != nil {
		t.Fatal(err)
	}
	remount(t, backing, dir)
	if got, err := os.ReadFile(synced); err != nil || string(got) != "kept" {
		t.Errorf("after the cut, synced reads %q, %v: want what was synced alone", got, err)
	}
	// The file's creation is metadata, kept; its data is gone.
	if got, err := os.ReadFile(unsynced); err != nil || len(got) != 0 {
		t.Errorf("after the cut, unsynced reads %d bytes, %v: want none", len(got), err)
	}
}

func TestACleanUnmountKeepsEverything(t *testing.T) {
	fs, backing, dir := mount(t)
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("all of it"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := fs.Unmount(); err != nil {
		t.Fatal(err)
	}
	remount(t, backing, dir)
	if got, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(got) != "all of it" {
		t.Errorf("after a clean unmount the file reads %q, %v", got, err)
	}
}

// Writes past the end, over held pages and across page boundaries read
// back as written; a truncation cuts what is held.
func TestHeldPagesReadBackAsWritten(t *testing.T) {
	_, _, dir := mount(t)
	path := filepath.Join(dir, "f")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := make([]byte, 3*pageSize+100)
	for i := range want {
		want[i] = byte(i % 251)
	}
	if _, err := f.WriteAt(want[:pageSize+10], 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(want[pageSize-5:], pageSize-5); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want)+50)
	n, _ := f.ReadAt(got, 0)
	if n != len(want) || !bytes.Equal(got[:n], want) {
		t.Fatalf("read %d bytes back, want the %d written (equal: %v)", n, len(want), bytes.Equal(got[:min(n, len(want))], want[:min(n, len(want))]))
	}
	if err := f.Truncate(pageSize + 3); err != nil {
		t.Fatal(err)
	}
	if st, _ := f.Stat(); st.Size() != pageSize+3 {
		t.Errorf("size %d after the truncation, want %d", st.Size(), pageSize+3)
	}
	n, _ = f.ReadAt(got, 0)
	if n != pageSize+3 || !bytes.Equal(got[:n], want[:n]) {
		t.Errorf("after the truncation read %d bytes", n)
	}
}
