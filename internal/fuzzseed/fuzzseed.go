// Package fuzzseed adds the files of a seed corpus directory to a Go
// fuzz target, so that seeds are readable files beside the code they
// exercise and every `go test` runs them as regression cases.
package fuzzseed

import (
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// Files adds every regular file under dir (recursively, in name order)
// to f as one []byte argument. A missing or empty directory fails the
// target: a fuzz target without seeds starts blind.
func Files(f *testing.F, dir string) {
	f.Helper()
	for _, raw := range Read(f, dir) {
		f.Add(raw)
	}
}

// Read returns the contents of every regular file under dir, in name
// order, for targets that take more than one argument.
func Read(f *testing.F, dir string) [][]byte {
	f.Helper()
	var paths []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			paths = append(paths, path)
		}
		return nil
	})
	if err != nil {
		f.Fatalf("seed corpus %s: %v", dir, err)
	}
	if len(paths) == 0 {
		f.Fatalf("seed corpus %s has no files", dir)
	}
	sort.Strings(paths)
	out := make([][]byte, 0, len(paths))
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			f.Fatalf("seed corpus: %v", err)
		}
		out = append(out, raw)
	}
	return out
}
