package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/capstan-dev/capstan/internal/certs"
)

// M1: the console asks for alerts and charts only where it is told, or,
// in a pod, at the thanos-querier Service trusted by the service CA
// alone: never where a Route points (it reads no Route).
func TestTheConsolesPrometheusIsNeverARoutesHost(t *testing.T) {
	dir := t.TempDir()
	if _, err := certs.LoadOrCreateCA(filepath.Join(dir, "service-ca.crt"), filepath.Join(dir, "service-ca.key"), "service-ca"); err != nil {
		t.Fatal(err)
	}
	old := serviceCAFile
	t.Cleanup(func() { serviceCAFile = old })

	if u, tlsc, err := consolePrometheus("", &rest.Config{}, false); u != "" || tlsc != nil || err != nil {
		t.Errorf("out of a pod, no --prometheus-url: %q %v %v, want none", u, tlsc, err)
	}
	if u, _, err := consolePrometheus("https://thanos.example.com:9091/", &rest.Config{}, true); u != "https://thanos.example.com:9091" || err != nil {
		t.Errorf("--prometheus-url: %q %v", u, err)
	}
	if _, _, err := consolePrometheus("ftp://x", &rest.Config{}, false); err == nil || !strings.Contains(err.Error(), "want an http or https URL") {
		t.Errorf("an ftp URL: %v", err)
	}
	serviceCAFile = filepath.Join(dir, "service-ca.crt")
	u, tlsc, err := consolePrometheus("", &rest.Config{}, true)
	if err != nil || u != "https://thanos-querier.openshift-monitoring.svc:9091" || tlsc == nil || tlsc.RootCAs == nil {
		t.Fatalf("in a pod: %q %v %v, want the Service trusted by the service CA", u, tlsc, err)
	}
	// The service CA alone: not the system's roots too.
	if n := len(tlsc.RootCAs.Subjects()); n != 1 {
		t.Errorf("in a pod the console trusts %d CAs, want the service CA alone", n)
	}
	serviceCAFile = filepath.Join(dir, "missing.crt")
	if _, _, err := consolePrometheus("", &rest.Config{}, true); err == nil || !strings.Contains(err.Error(), "the service CA") {
		t.Errorf("in a pod without the service CA: %v", err)
	}
}
