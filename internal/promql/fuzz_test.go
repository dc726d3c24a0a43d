package promql

import (
	"testing"

	"github.com/capstan-dev/capstan/internal/fuzzseed"
)

// FuzzQuery parses and evaluates arbitrary risk expressions over the
// same facts as the query tests: each is a result or an error, never a
// panic or a hang, and a parsed query evaluates the same twice.
func FuzzQuery(f *testing.F) {
	fuzzseed.Files(f, "testdata/queries")
	f.Fuzz(func(t *testing.T, q []byte) {
		n, err := Parse(string(q))
		if err != nil {
			if n != nil {
				t.Fatalf("Parse returned a node with its error %v", err)
			}
			return
		}
		first, err1 := Eval(n, facts)
		second, err2 := Eval(n, facts)
		if (err1 == nil) != (err2 == nil) || (err1 == nil && render(first) != render(second)) {
			t.Fatalf("%q evaluates differently twice: %v %q, then %v %q", q, err1, render(first), err2, render(second))
		}
	})
}
