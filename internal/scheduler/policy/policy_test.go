package policy

import (
	"strings"
	"testing"
)

func TestParseBothShapes(t *testing.T) {
	jsonPolicy := `{ "apiVersion": "v1", "kind": "Policy", "predicates": [ { "name": "NoDiskConflict" },
	  { "argument": { "serviceAffinity": { "labels": [ "region" ] } }, "name": "Region" } ],
	  "priorities": [ { "name": "LeastRequestedPriority", "weight": 1 },
	  { "argument": { "serviceAntiAffinity": { "label": "zone" } }, "name": "Zone", "weight": "2" } ] }`
	p, err := Parse([]byte(jsonPolicy))
	if err != nil {
		t.Fatalf("JSON policy: %v", err)
	}
	if len(p.Predicates) != 2 || p.Priorities[1].Weight != 2 || p.Priorities[1].Argument.ServiceAntiAffinity.Label != "zone" {
		t.Errorf("parsed %+v", p)
	}
	yamlPolicy := `kind: "Policy"
version: "v1"
predicates:
- name: "RequireRegion"
  argument:
    labelsPresence:
      labels:
      - "region"
      presence: true
- name: "PodFitsPorts"
priorities:
- name: "ZonePreferred"
  weight: 1
  argument:
    labelPreference:
      label: "zone"
      presence: true
`
	p, err = Parse([]byte(yamlPolicy))
	if err != nil {
		t.Fatalf("YAML policy: %v", err)
	}
	if lp := p.Predicates[0].Argument.LabelsPresence; lp == nil || !lp.Presence || lp.Labels[0] != "region" {
		t.Errorf("labelsPresence %+v", p.Predicates[0].Argument)
	}
}

func TestDefaultPolicyIsValid(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestInvalidPoliciesNameTheEntry(t *testing.T) {
	cases := map[string]struct{ policy, want string }{
		"unknown predicate": {`{"kind":"Policy","apiVersion":"v1","predicates":[{"name":"NoSuchThing"}]}`,
			`predicate 1 ("NoSuchThing"): unknown predicate`},
		"case typo": {`{"kind":"Policy","apiVersion":"v1","predicates":[{"name":"hostname"}]}`,
			`did you mean "HostName"?`},
		"unknown priority": {`{"kind":"Policy","apiVersion":"v1","priorities":[{"name":"Fastest","weight":1}]}`,
			`priority 1 ("Fastest"): unknown priority`},
		"zero weight": {`{"kind":"Policy","apiVersion":"v1","priorities":[{"name":"EqualPriority","weight":0}]}`,
			`priority 1 ("EqualPriority"): weight 0 must be positive`},
		"negative weight": {`{"kind":"Policy","apiVersion":"v1","priorities":[{"name":"EqualPriority","weight":-3}]}`,
			`weight -3 must be positive`},
		"missing weight": {`{"kind":"Policy","apiVersion":"v1","priorities":[{"name":"EqualPriority"}]}`,
			`weight 0 must be positive`},
		"duplicate": {`{"kind":"Policy","apiVersion":"v1","predicates":[{"name":"HostName"},{"name":"HostName"}]}`,
			`predicate 2 ("HostName"): duplicate name, already used by predicate 1`},
		"bad argument": {`{"kind":"Policy","apiVersion":"v1","predicates":[{"name":"R","argument":{"serviceAffinity":{"labels":[]}}}]}`,
			`predicate 1 ("R"): serviceAffinity: no label given`},
		"bad label": {`{"kind":"Policy","apiVersion":"v1","priorities":[{"name":"Z","weight":1,"argument":{"serviceAntiAffinity":{"label":"no spaces allowed"}}}]}`,
			`label "no spaces allowed" is not a valid label key`},
		"two arguments": {`{"kind":"Policy","apiVersion":"v1","priorities":[{"name":"Z","weight":1,"argument":{"serviceAntiAffinity":{"label":"a"},"labelPreference":{"label":"b"}}}]}`,
			`sets both`},
		"empty argument": {`{"kind":"Policy","apiVersion":"v1","predicates":[{"name":"P","argument":{}}]}`,
			`argument is empty`},
		"needs argument": {`{"kind":"Policy","apiVersion":"v1","predicates":[{"name":"CheckNodeLabelPresence"}]}`,
			`needs an argument`},
		"unknown field": {`{"kind":"Policy","apiVersion":"v1","predicates":[{"name":"HostName","agument":{}}]}`,
			`unknown field "agument"`},
		"bad weight type": {`{"kind":"Policy","apiVersion":"v1","priorities":[{"name":"EqualPriority","weight":"heavy"}]}`,
			`weight "heavy" is not an integer`},
		"wrong kind": {`{"kind":"Config","apiVersion":"v1"}`, `kind is "Config"`},
		"no version": {`{"kind":"Policy"}`, `neither apiVersion nor version`},
		"not yaml":   {"kind: [Policy", "not valid JSON or YAML"},
		"empty":      {"  \n", "empty"},
	}
	for name, tc := range cases {
		_, err := Parse([]byte(tc.policy))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", name, err, tc.want)
		}
	}
}

func TestAllProblemsReported(t *testing.T) {
	_, err := Parse([]byte(`{"kind":"Policy","apiVersion":"v1","predicates":[{"name":"A"}],"priorities":[{"name":"B","weight":1}]}`))
	if err == nil || !strings.Contains(err.Error(), `predicate 1 ("A")`) || !strings.Contains(err.Error(), `priority 1 ("B")`) {
		t.Errorf("want both problems, got %v", err)
	}
}
