package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A right is used when a request of the component's ServiceAccount that
// the authorizer allowed falls under it: the same verb, group and
// resource (with its subresource), the name it is limited to, inside the
// namespace its binding applies in. Refused requests, other users'
// requests and requests elsewhere use nothing.
func TestUnusedRights(t *testing.T) {
	console := "system:serviceaccount:openshift-console:console"
	us := "system:serviceaccount:openshift-update-service:update-service"
	log := strings.Join([]string{
		// The console has no right: its request was refused.
		`{"verb":"get","user":{"username":"` + console + `"},"objectRef":{"resource":"routes","name":"thanos-querier","namespace":"openshift-monitoring","apiGroup":"route.openshift.io"},"annotations":{"authorization.k8s.io/decision":"forbid"}}`,
		// The update service: a core event created, an events.k8s.io
		// one refused, a patch by someone else.
		`{"verb":"create","user":{"username":"` + us + `"},"objectRef":{"resource":"events","namespace":"openshift-cluster-version"},"annotations":{"authorization.k8s.io/decision":"allow"}}`,
		`{"verb":"create","user":{"username":"` + us + `"},"objectRef":{"resource":"events","namespace":"default","apiGroup":"events.k8s.io"},"annotations":{"authorization.k8s.io/decision":"forbid"}}`,
		`{"verb":"patch","user":{"username":"someone"},"objectRef":{"resource":"events","namespace":"default"},"annotations":{"authorization.k8s.io/decision":"allow"}}`,
	}, "\n") + "\n"
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	unused, total, err := Unused(path, "console", "update-service")
	if err != nil {
		t.Fatal(err)
	}
	if total["console"] != 0 || total["update-service"] != 6 {
		t.Errorf("rights counted %v, want console 0, update-service 6", total)
	}
	var got []string
	for _, r := range unused {
		got = append(got, r.Component+" "+r.Verb+" "+r.Group+"/"+r.Resource)
	}
	want := []string{"update-service create events.k8s.io/events", "update-service patch /events", "update-service patch events.k8s.io/events",
		"update-service update /events", "update-service update events.k8s.io/events"}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("unused rights:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, _, err := Unused(path, "no-such-component"); err == nil {
		t.Error("an unknown component was taken")
	}
}
