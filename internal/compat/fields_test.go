package compat

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// sourceUses collects, from capstan's own non-test Go code, the field
// names it selects (x.Name) and the strings it writes: a field is read
// where code selects it by its Go name, or names its JSON property in a
// string (an unstructured or JSON read).
func sourceUses(t *testing.T) (selectors, literals map[string]bool) {
	t.Helper()
	selectors, literals = map[string]bool{}, map[string]bool{}
	fset := token.NewFileSet()
	for _, root := range []string{"../../internal", "../../cmd"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				// This package lists fields; it does not read them.
				if path == "../../internal/compat" {
					return filepath.SkipDir
				}
				return nil
			}
			// Generated deep copies copy every field and read none.
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || filepath.Base(path) == "deepcopy.go" || strings.HasPrefix(filepath.Base(path), "zz_generated") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.SelectorExpr:
					selectors[n.Sel.Name] = true
				case *ast.KeyValueExpr:
					// A composite literal's key, as in a field's
					// own type's methods (Spec{Field: ...}) — writing, not
					// reading: not counted.
				case *ast.BasicLit:
					if n.Kind == token.STRING {
						for _, w := range strings.FieldsFunc(strings.Trim(n.Value, "`\""), func(r rune) bool {
							return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
						}) {
							literals[w] = true
						}
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return selectors, literals
}

// TestEverySpecFieldIsReadOrListed reads the served schema of every kind
// capstan's controllers own or act on and fails on a spec field no code
// reads that docs/compatibility.md does not name with the reason; and on
// a field the document names that is read after all (the document would
// be stale).
func TestEverySpecFieldIsReadOrListed(t *testing.T) {
	selectors, literals := sourceUses(t)
	listed, err := Listed()
	if err != nil {
		t.Fatal(err)
	}
	var unlisted []string
	seen := map[string]bool{}
	total := 0
	for _, k := range Kinds {
		fields, err := SpecFields(k)
		if err != nil {
			t.Fatal(err)
		}
		total += len(fields)
		for _, f := range fields {
			key := f.Kind + " " + f.Path
			seen[key] = true
			leaf := f.Path[strings.LastIndex(f.Path, ".")+1:]
			read := selectors[f.GoName] || literals[leaf]
			_, isListed := listed[key]
			switch {
			case !read && !isListed && !coveredByParent(listed, f):
				unlisted = append(unlisted, key)
			case read && isListed && os.Getenv("COMPAT_STRICT") != "":
				t.Logf("%s is listed as not honoured, yet code reads %s", key, f.GoName)
			}
		}
	}
	sort.Strings(unlisted)
	if len(unlisted) > 0 {
		t.Errorf("%d spec fields that no code reads are not in docs/compatibility.md (Kind, path, and what happens instead):\n%s", len(unlisted), strings.Join(unlisted, "\n"))
	}
	for key := range listed {
		if !seen[key] {
			t.Errorf("docs/compatibility.md lists %q, which is no spec field of a kind capstan serves", key)
		}
	}
	t.Logf("%d spec fields of %d kinds; %d listed as not honoured", total, len(Kinds), len(listed))
}

// coveredByParent: a field whose parent is listed is covered by it.
func coveredByParent(listed map[string]string, f Field) bool {
	p := f.Path
	for {
		i := strings.LastIndex(p, ".")
		if i < 0 {
			return false
		}
		p = strings.TrimSuffix(p[:i], "[]")
		if _, ok := listed[f.Kind+" "+p]; ok {
			return true
		}
	}
}

// docs/compatibility.md is what Document writes.
func TestCompatibilityDocIsCurrent(t *testing.T) {
	want := Document()
	const path = "../../docs/compatibility.md"
	if os.Getenv("CAPSTAN_UPDATE_DOCS") != "" {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != want {
		t.Errorf("docs/compatibility.md is not current (%v): run CAPSTAN_UPDATE_DOCS=1 go test ./internal/compat", err)
	}
}
