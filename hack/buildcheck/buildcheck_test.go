// Package buildcheck holds tests of what the build links, which keep a
// cold build and the test steps of make test from growing unnoticed.
package buildcheck

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// The capstan binary holds none of Prometheus's service discovery
// mechanisms but the file one: capstan scrapes targets it names itself,
// and each mechanism pulls in a cloud's SDK (Prometheus's plugins
// package, or a discovery/<cloud> package, imported anywhere, would
// compile those SDKs into every build). The SDK parts left are those
// prometheus/config imports for remote write's authentication (sigv4,
// azuread, googleiam), which no build tag removes.
func TestTheBinaryHoldsNoServiceDiscoveryItDoesNotUse(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/capstan-dev/capstan/cmd/capstan").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/capstan: %v\n%s", err, out)
	}
	allowed := map[string]bool{
		"github.com/prometheus/prometheus/discovery":             true,
		"github.com/prometheus/prometheus/discovery/file":        true,
		"github.com/prometheus/prometheus/discovery/targetgroup": true,
	}
	sdk := []string{
		"github.com/prometheus/prometheus/plugins",
		"github.com/aws/aws-sdk-go-v2/service/ec2", "github.com/aws/aws-sdk-go-v2/service/ecs", "github.com/aws/aws-sdk-go-v2/service/lightsail",
		"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager", "google.golang.org/api/compute", "github.com/hashicorp/consul",
		"github.com/gophercloud", "github.com/digitalocean", "github.com/linode", "github.com/hetznercloud", "github.com/ovh",
		"github.com/scaleway", "github.com/vultr", "github.com/ionos-cloud", "github.com/oracle/oci-go-sdk", "github.com/envoyproxy",
		"github.com/go-zookeeper", "github.com/stackitcloud", "github.com/outscale",
	}
	n := 0
	for _, pkg := range strings.Fields(string(out)) {
		n++
		if strings.HasPrefix(pkg, "github.com/prometheus/prometheus/discovery") && !allowed[pkg] {
			t.Errorf("the binary holds the service discovery package %s", pkg)
		}
		for _, s := range sdk {
			if pkg == s || strings.HasPrefix(pkg, s+"/") {
				t.Errorf("the binary holds %s, a service discovery mechanism's SDK", pkg)
			}
		}
	}
	if n < 1000 {
		t.Errorf("go list -deps listed %d packages: not the capstan binary's", n)
	}
}

// controlPlane is a package of the embedded kube-apiserver: a test binary
// that links it links the whole control plane.
const controlPlane = "k8s.io/kubernetes/pkg/controlplane"

// The packages make test runs again under the race detector link no part
// of the embedded control plane in their tests: its race build (some
// 1,900 packages more) would cost more than all the rest of the step.
// A test needing it belongs in a package outside that list.
func TestTheRacePackagesDoNotLinkTheControlPlane(t *testing.T) {
	raw, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	step := regexp.MustCompile(`(?m)^\tgo test [^\n]*-race (?:[^\n]*\\\n)*[^\n]*$`).FindString(string(raw))
	if step == "" {
		t.Fatal("the Makefile has no go test -race step")
	}
	step, _, _ = strings.Cut(step, "2>&1") // then its output's summary, ./.testsum
	var pkgs []string
	for _, f := range strings.Fields(step) {
		if strings.HasPrefix(f, "./") {
			pkgs = append(pkgs, f)
		}
	}
	if len(pkgs) < 5 {
		t.Fatalf("the race step names %d packages: %v", len(pkgs), pkgs)
	}
	list := exec.Command("go", append([]string{"list", "-test", "-f", "{{.ImportPath}} {{join .Deps \" \"}}"}, pkgs...)...)
	list.Dir = "../.."
	out, err := list.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -test %v: %v\n%s", pkgs, err, out)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, deps, _ := strings.Cut(line, " ")
		n++
		for _, d := range strings.Fields(deps) {
			if d == controlPlane {
				t.Errorf("%s links the embedded control plane (%s), which the race step would build again", pkg, controlPlane)
			}
		}
	}
	if n < len(pkgs) {
		t.Errorf("go list listed %d packages for %d patterns", n, len(pkgs))
	}
}
