// Package docs holds the user documentation that is not the README; its
// test keeps the documents honest about the code.
package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every test and fuzz target the bad-input table names exists, and every
// row names at least one.
func TestBadInputTableNamesRealTests(t *testing.T) {
	raw, err := os.ReadFile("bad-input.md")
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	def := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz)[A-Za-z0-9_]+)\(`)
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != ".." {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range def.FindAllSubmatch(src, -1) {
			defined[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile("`((?:Test|Fuzz)[A-Za-z0-9_]+)`")
	rows := 0
	for i, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| Input ") {
			continue
		}
		rows++
		names := named.FindAllStringSubmatch(line, -1)
		if len(names) == 0 {
			t.Errorf("bad-input.md:%d names no test", i+1)
		}
		for _, n := range names {
			if !defined[n[1]] {
				t.Errorf("bad-input.md:%d names %s, which is not a test or fuzz target of the repository", i+1, n[1])
			}
		}
	}
	if rows < 30 {
		t.Errorf("the table has %d rows; it lost some", rows)
	}
}
