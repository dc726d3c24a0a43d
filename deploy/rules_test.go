package deploy

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// rulesFile lists every right of every component, a line each: what a
// review of a change to an rbac.yaml reads.
const rulesFile = "rules.txt"

// ruleLines are the rights a component's rbac.yaml grants: one line per
// API group, resource, name and verb of each rule, and one per binding.
func ruleLines(name string, objs []*unstructured.Unstructured) []string {
	var lines []string
	for _, o := range objs {
		switch {
		case o.GetKind() == "ClusterRole" || o.GetKind() == "Role":
			role := o.GetKind() + "/" + o.GetName()
			if ns := o.GetNamespace(); ns != "" {
				role += " in " + ns
			}
			for _, r := range roleRights(o) {
				g, n := r.Group, r.Name
				if g == "" {
					g = "core"
				}
				if n == "" {
					n = "*"
				}
				lines = append(lines, fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s", name, role, g, r.Resource, n, r.Verb))
			}
		case strings.HasSuffix(o.GetKind(), "Binding"):
			kind, _, _ := unstructured.NestedString(o.Object, "roleRef", "kind")
			ref, _, _ := unstructured.NestedString(o.Object, "roleRef", "name")
			where := "cluster-wide"
			if ns := o.GetNamespace(); ns != "" {
				where = "in " + ns
			}
			lines = append(lines, fmt.Sprintf("%s\tbinds %s/%s %s", name, kind, ref, where))
		}
	}
	return lines
}

// TestEveryRightIsListed: deploy/rules.txt lists every right of every
// component, so no right is granted, widened or moved without a line of
// the list changing with it in review. After a reviewed change to an
// rbac.yaml: CAPSTAN_UPDATE_RULES=1 go test ./deploy -run TestEveryRightIsListed
func TestEveryRightIsListed(t *testing.T) {
	got := []string{"# Every right of every component, from deploy/*/rbac.yaml: COMPONENT, ROLE, API GROUP, RESOURCE, NAME (* for any), VERB.",
		"# Regenerate after a reviewed change: CAPSTAN_UPDATE_RULES=1 go test ./deploy -run TestEveryRightIsListed"}
	for _, name := range Components() {
		objs, err := RBAC(name)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ruleLines(name, objs)...)
	}
	text := strings.Join(got, "\n") + "\n"
	if os.Getenv("CAPSTAN_UPDATE_RULES") == "1" {
		if err := os.WriteFile(rulesFile, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	raw, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	for _, l := range got {
		if !slices.Contains(want, l) {
			t.Errorf("granted but not in deploy/%s: %s", rulesFile, l)
		}
	}
	for _, l := range want {
		if !slices.Contains(got, l) {
			t.Errorf("in deploy/%s but not granted: %s", rulesFile, l)
		}
	}
	if t.Failed() {
		t.Log("review the change, then: CAPSTAN_UPDATE_RULES=1 go test ./deploy -run TestEveryRightIsListed")
	}
}

// sensitive are rights only the CVO (bound to cluster-admin, as
// upstream's) may hold: reading secrets, reaching into workloads and
// nodes, minting tokens and certificates, and changing what the API
// server admits, serves or authorizes.
var sensitive = []struct{ group, resource string }{
	{"core", "secrets"}, {"core", "pods/exec"}, {"core", "pods/attach"}, {"core", "pods/portforward"},
	{"core", "pods/proxy"}, {"core", "services/proxy"}, {"core", "nodes/proxy"}, {"core", "serviceaccounts/token"},
	{"certificates.k8s.io", "certificatesigningrequests/approval"}, {"certificates.k8s.io", "signers"},
	{"admissionregistration.k8s.io", "mutatingwebhookconfigurations"}, {"admissionregistration.k8s.io", "validatingwebhookconfigurations"},
	{"admissionregistration.k8s.io", "validatingadmissionpolicies"}, {"admissionregistration.k8s.io", "validatingadmissionpolicybindings"},
	{"apiextensions.k8s.io", "customresourcedefinitions"},
	{"rbac.authorization.k8s.io", "roles"}, {"rbac.authorization.k8s.io", "clusterroles"},
	{"rbac.authorization.k8s.io", "rolebindings"}, {"rbac.authorization.k8s.io", "clusterrolebindings"},
}

// workloadRights are the writes that run code of one's choosing: a
// workload made or changed (its image, its command, a host path
// mounted), an ephemeral container added to a pod, a PersistentVolume
// made (a hostPath one reaches a node's files), or an APIService that
// sends a group's traffic elsewhere. Only the CVO may hold them, but
// for the exceptions below.
var workloadRights = []struct {
	group, resource string
	verbs           []string
}{
	{"core", "pods", []string{"create"}},
	{"core", "pods/ephemeralcontainers", []string{"create", "update", "patch"}},
	{"core", "replicationcontrollers", []string{"create", "update", "patch"}},
	// A PersistentVolume's source is immutable once made: binding one
	// (the scheduler's update) mounts nothing new.
	{"core", "persistentvolumes", []string{"create"}},
	{"apps", "deployments", []string{"create", "update", "patch"}},
	{"apps", "daemonsets", []string{"create", "update", "patch"}},
	{"apps", "statefulsets", []string{"create", "update", "patch"}},
	{"apps", "replicasets", []string{"create", "update", "patch"}},
	{"batch", "jobs", []string{"create", "update", "patch"}},
	{"batch", "cronjobs", []string{"create", "update", "patch"}},
	{"apiregistration.k8s.io", "apiservices", []string{"create", "update", "patch"}},
}

// workloadExceptions are the workload rights a component holds, each
// for a reason: role, group, resource, resource name and verb as
// rules.txt lists them.
var workloadExceptions = map[string]string{
	"etcd-operator\tRole/capstan:etcd-operator in openshift-etcd\tapps\tdeployments\t*\tcreate":                               "the quorum guard's Deployment, as OpenShift's cluster-etcd-operator makes it, in its own namespace",
	"etcd-operator\tRole/capstan:etcd-operator in openshift-etcd\tapps\tdeployments\t*\tupdate":                               "the quorum guard's Deployment, kept as the operator wants it",
	"metrics-server\tClusterRole/capstan:metrics-server\tapiregistration.k8s.io\tapiservices\tv1beta1.metrics.k8s.io\tupdate": "its own APIService (the group it serves) gets its port and CA; the installer made it",
}

// sensitiveProblems: a rule of a component's rbac.yaml on a sensitive
// resource, with a verb that hands out rights, or a workload right
// without its exception.
func sensitiveProblems(name string, objs []*unstructured.Unstructured) []string {
	var problems []string
	for _, l := range ruleLines(name, objs) {
		f := strings.Split(l, "\t")
		if len(f) != 6 {
			continue
		}
		group, resource, verb := f[2], f[3], f[5]
		for _, s := range sensitive {
			if s.group == group && s.resource == resource {
				problems = append(problems, fmt.Sprintf("%s may %s %s.%s (%s): only the CVO may hold that", name, verb, resource, group, f[1]))
			}
		}
		if slices.Contains(escalating, verb) {
			problems = append(problems, fmt.Sprintf("%s may %s %s.%s: only the CVO may hand out rights", name, verb, resource, group))
		}
		if _, ok := workloadExceptions[l]; ok {
			continue
		}
		for _, w := range workloadRights {
			if (w.group == group || group == "*") && (w.resource == resource || resource == "*") && (slices.Contains(w.verbs, verb) || verb == "*") {
				problems = append(problems, fmt.Sprintf("%s may %s %s.%s (%s): it would run code of its choosing; only the CVO may", name, verb, resource, group, f[1]))
				break
			}
		}
	}
	return problems
}

// TestOnlyTheCVOHoldsSensitiveRights: no component but the CVO may read
// secrets, exec into pods, proxy to nodes, mint tokens, approve
// certificates, change admission, CRDs or RBAC.
func TestOnlyTheCVOHoldsSensitiveRights(t *testing.T) {
	for _, name := range Components() {
		objs, err := RBAC(name)
		if err != nil {
			t.Fatal(err)
		}
		if name == "cvo" {
			continue
		}
		for _, p := range sensitiveProblems(name, objs) {
			t.Error(p)
		}
	}
	// The check catches what it looks for.
	objs, err := Decode([]byte(`apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: r
  namespace: n
rules:
- apiGroups: [""]
  resources: [secrets, configmaps]
  verbs: [get]
- apiGroups: [""]
  resources: [nodes/proxy]
  resourceNames: [worker-0]
  verbs: [get]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [clusterroles]
  verbs: [bind]
- apiGroups: [""]
  resources: [pods, pods/ephemeralcontainers, persistentvolumes]
  verbs: [create]
- apiGroups: [apps]
  resources: [daemonsets]
  verbs: [patch]
- apiGroups: [apiregistration.k8s.io]
  resources: [apiservices]
  verbs: [update]
`))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(sensitiveProblems("scheduler", objs), "\n")
	for _, want := range []string{"scheduler may get secrets.core", "scheduler may get nodes/proxy.core", "scheduler may bind clusterroles.rbac.authorization.k8s.io", "only the CVO may hand out rights",
		"scheduler may create pods.core", "scheduler may create pods/ephemeralcontainers.core", "scheduler may create persistentvolumes.core",
		"scheduler may patch daemonsets.apps", "scheduler may update apiservices.apiregistration.k8s.io"} {
		if !strings.Contains(got, want) {
			t.Errorf("a role with secrets, nodes/proxy and bind: %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "configmaps") {
		t.Errorf("configmaps reported as sensitive: %q", got)
	}
}
