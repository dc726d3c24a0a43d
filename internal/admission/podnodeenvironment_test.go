package admission

import (
	"fmt"
	"strings"
	"testing"
)

func TestParseNodeSelector(t *testing.T) {
	for in, want := range map[string]string{
		"":                               "map[]",
		" ":                              "map[]",
		"region=east":                    "map[region:east]",
		"region=east, type=infra":        "map[region:east type:infra]",
		"node-role.kubernetes.io/infra=": "map[node-role.kubernetes.io/infra:]",
		"region":                         `"region": "region" is not key=value`,
		"region=east,region=west":        `"region=east,region=west": region given twice`,
		"bad key!=x":                     `label key "bad key!"`,
		"k=" + strings.Repeat("v", 64):   "label value",
	} {
		m, err := ParseNodeSelector(in)
		got := fmt.Sprint(m)
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, want) {
			t.Errorf("ParseNodeSelector(%q) = %s, want %s", in, got, want)
		}
	}
	if !SelectorsConflict(map[string]string{"a": "1"}, map[string]string{"a": "2"}) || SelectorsConflict(map[string]string{"a": "1"}, map[string]string{"a": "1", "b": "2"}) {
		t.Error("SelectorsConflict")
	}
}
