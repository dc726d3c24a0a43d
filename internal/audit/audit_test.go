package audit

import (
	"os"
	"path/filepath"
	"testing"
)

func TestAuditLogIsReadWithItsBackupsAndRefusalsToldApart(t *testing.T) {
	dir := t.TempDir()
	// What the apiserver writes: a rotated backup, then the live file.
	backup := `{"verb":"list","user":{"username":"system:serviceaccount:a:b"},"objectRef":{"resource":"jobs","apiGroup":"batch"},"responseStatus":{"code":403},"annotations":{"authorization.k8s.io/decision":"forbid"}}
`
	live := `{"verb":"create","user":{"username":"system:serviceaccount:a:b"},"objectRef":{"resource":"events","namespace":"gone"},"responseStatus":{"code":403,"message":"namespace gone is being terminated"},"annotations":{"authorization.k8s.io/decision":"allow"}}
{"verb":"update","user":{"username":"x"},"objectRef":{"resource":"machines","subresource":"status","namespace":"openshift-machine-api","apiGroup":"machine.openshift.io"},"responseStatus":{"code":200}}
`
	if err := os.WriteFile(filepath.Join(dir, "audit-2026-11-26T09-00-00.000.log"), []byte(backup), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "audit.log")
	if err := os.WriteFile(path, []byte(live), 0o600); err != nil {
		t.Fatal(err)
	}
	var whats []string
	var denied []bool
	if err := Read(path, func(e *Event) {
		whats = append(whats, e.What())
		denied = append(denied, e.AuthorizationDenied())
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{"list jobs.batch", "create events in gone", "update machines/status.machine.openshift.io in openshift-machine-api"}
	if len(whats) != len(want) {
		t.Fatalf("read %v, want %v", whats, want)
	}
	for i := range want {
		if whats[i] != want[i] {
			t.Errorf("event %d: %q, want %q", i, whats[i], want[i])
		}
	}
	if !denied[0] || denied[1] || denied[2] {
		t.Errorf("denied by the authorizer: %v, want only the first (the second is admission's 403)", denied)
	}
	// A kill mid-write cuts the last line short: the rest is read.
	if err := os.WriteFile(path, []byte(live+`{"verb":"get","us`), 0o600); err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := Read(path, func(*Event) { n++ }); err != nil || n != 3 {
		t.Errorf("a log cut short: %d events, %v; want 3 and no error", n, err)
	}
	// A kill cuts a line short, and the next start appends to it: its
	// event is read, the cut one lost.
	full := `{"kind":"Event","apiVersion":"audit.k8s.io/v1","verb":"get","user":{"username":"x"},"objectRef":{"resource":"nodes"},"responseStatus":{"code":200}}`
	if err := os.WriteFile(path, []byte(live+full[:70]+full+"\n"+live), 0o600); err != nil {
		t.Fatal(err)
	}
	whats = nil
	if err := Read(path, func(e *Event) { whats = append(whats, e.What()) }); err != nil || len(whats) != 6 || whats[3] != "get nodes" {
		t.Errorf("a log with a cut line the next start appended to: %v, %v; want 6 events (the backup's among them), the fourth get nodes, and no error", whats, err)
	}
	if err := os.WriteFile(path, []byte("{not json\n"+live), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Read(path, func(*Event) {}); err == nil {
		t.Error("a line that is not JSON, followed by others, was read without an error")
	}
}
