package cvo

import (
	"testing"

	"github.com/blang/semver/v4"

	"github.com/capstan-dev/capstan/internal/fuzzseed"
)

// FuzzParseGraph feeds the CVO arbitrary update-service answers: it
// must answer each with updates or a ResponseInvalid/VersionNotFound
// error, never a panic, and what it returns must keep its promises.
func FuzzParseGraph(f *testing.F) {
	fuzzseed.Files(f, "testdata/graphs")
	current := semver.MustParse("4.10.22")
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := ParseGraph(body, current, "fast-4.11")
		if err != nil {
			ue, ok := err.(*UpdatesError)
			if !ok {
				t.Fatalf("error %T is not an *UpdatesError: %v", err, err)
			}
			if ue.Reason != "ResponseInvalid" && ue.Reason != "VersionNotFound" {
				t.Fatalf("reason %q for a parse failure", ue.Reason)
			}
			return
		}
		if got.Current.Version != current.String() {
			t.Fatalf("current node is %q, want %s", got.Current.Version, current)
		}
		conditional := map[string]bool{}
		for i, c := range got.Conditional {
			if conditional[c.Release.Image] {
				t.Fatalf("conditional target %s listed twice", c.Release.Image)
			}
			conditional[c.Release.Image] = true
			for _, r := range c.Risks {
				if len(r.MatchingRules) == 0 {
					t.Fatalf("risk %q of %s kept without a rule the CVO can evaluate", r.Name, c.Release.Version)
				}
			}
			if i > 0 && versionGreater(c.Release.Version, got.Conditional[i-1].Release.Version) {
				t.Fatalf("conditional updates out of order: %s after %s", c.Release.Version, got.Conditional[i-1].Release.Version)
			}
		}
		for i, r := range got.Recommended {
			if conditional[r.Image] {
				t.Fatalf("%s is both recommended and conditional", r.Image)
			}
			if i > 0 && versionGreater(r.Version, got.Recommended[i-1].Version) {
				t.Fatalf("recommended updates out of order: %s after %s", r.Version, got.Recommended[i-1].Version)
			}
		}
	})
}
