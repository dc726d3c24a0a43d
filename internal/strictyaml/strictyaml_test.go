package strictyaml

import (
	"strings"
	"testing"
)

type doc struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
}

func TestDecode(t *testing.T) {
	cases := map[string]struct {
		in, err string
	}{
		"yaml":          {"name: a\ncount: 2\n", ""},
		"json":          {`{"name":"a","count":2}`, ""},
		"empty":         {" \n\t", "empty"},
		"unknown field": {"name: a\ncuont: 2\n", `unknown field "cuont"`},
		"duplicate key": {"name: a\nname: b\n", `key "name" already set`},
		"wrong type":    {"count: many\n", "count"},
		"not yaml":      {"name: [a", "not valid JSON or YAML"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var d doc
			err := Decode([]byte(tc.in), &d)
			if tc.err == "" {
				if err != nil || d.Name != "a" || d.Count != 2 {
					t.Fatalf("decoded %+v, err %v", d, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err %v, want it to mention %q", err, tc.err)
			}
		})
	}
}
