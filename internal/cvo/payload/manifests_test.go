package payload

import (
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/release"
)

func TestLoadReadsEveryDocumentInOrder(t *testing.T) {
	p := &release.Payload{
		CVOManifests: map[string][]byte{"0000_00_cluster-version-operator_03_deployment.yaml": []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: cluster-version-operator\n  namespace: openshift-cluster-version\n")},
		Manifests: map[string][]byte{
			"0000_50_dns_01_b.yaml": []byte("apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: dns\n  namespace: openshift-dns\n"),
			"0000_50_dns_00_a.yaml": []byte("# leading comment\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: openshift-dns\n  annotations:\n    include.release.openshift.io/self-managed-high-availability: \"true\"\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dns-config\n  namespace: openshift-dns\n"),
		},
	}
	ms, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, m.String())
	}
	want := "deployment openshift-cluster-version/cluster-version-operator (0000_00_cluster-version-operator_03_deployment.yaml #0)|" +
		"namespace openshift-dns (0000_50_dns_00_a.yaml #1)|configmap openshift-dns/dns-config (0000_50_dns_00_a.yaml #2)|" +
		"serviceaccount openshift-dns/dns (0000_50_dns_01_b.yaml #0)"
	if strings.Join(got, "|") != want {
		t.Errorf("loaded:\n%s\nwant:\n%s", strings.Join(got, "|"), want)
	}
	if ms[1].Annotations[IncludePrefix+DefaultProfile] != "true" || !strings.Contains(string(ms[1].Raw), `"kind":"Namespace"`) {
		t.Errorf("manifest 1: %+v %s", ms[1].Annotations, ms[1].Raw)
	}
	p.Manifests["0000_60_x_00.yaml"] = []byte("apiVersion: v1\nkind: ConfigMap\n")
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), "release-manifests/0000_60_x_00.yaml document 1: apiVersion, kind and metadata.name are required") {
		t.Errorf("a manifest without a name: %v", err)
	}
}

func TestFilterIncludes(t *testing.T) {
	ha := IncludePrefix + DefaultProfile
	for _, tc := range []struct {
		ann    map[string]string
		filter Filter
		want   string
	}{
		{map[string]string{ha: "true"}, Filter{}, ""},
		{nil, Filter{}, "no annotations"},
		{map[string]string{"other": "x"}, Filter{}, ha + " unset"},
		{map[string]string{ha: "false"}, Filter{}, ha + "=false"},
		{map[string]string{IncludePrefix + "single-node-developer": "true"}, Filter{Profile: "single-node-developer"}, ""},
		{map[string]string{ha: "true", FeatureSetAnnotation: "TechPreviewNoUpgrade"}, Filter{}, "does not include the cluster's feature set Default"},
		{map[string]string{ha: "true", FeatureSetAnnotation: "Default,TechPreviewNoUpgrade"}, Filter{}, ""},
		{map[string]string{ha: "true", CapabilityAnnotation: "Console+Insights"}, Filter{Capabilities: map[string]bool{"Console": true}}, "disabled capabilities: Insights"},
		{map[string]string{ha: "true", CapabilityAnnotation: "Console"}, Filter{Capabilities: map[string]bool{"Console": true}}, ""},
		{map[string]string{ha: "true", ExcludePrefix + "hypershift": "true"}, Filter{Exclude: "hypershift"}, ExcludePrefix + "hypershift=true"},
	} {
		m := &Manifest{File: "0000_50_x_00.yaml", Kind: "ConfigMap", Name: "x", Annotations: tc.ann}
		err := tc.filter.Include(m)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if (tc.want == "") != (err == nil) || !strings.Contains(got, tc.want) {
			t.Errorf("%v with %+v: %q, want %q", tc.ann, tc.filter, got, tc.want)
		}
	}
	m := &Manifest{Annotations: map[string]string{CreateOnlyAnnotation: "True", DeleteAnnotation: "yes"}}
	if !m.CreateOnly() {
		t.Error("create-only True (any case) is create-only")
	}
	if _, err := m.Deletion(); err == nil || !strings.Contains(err.Error(), `only "true" is valid`) {
		t.Errorf("delete yes: %v", err)
	}
}
