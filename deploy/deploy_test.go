package deploy

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// upstreamRoles are the roles of Kubernetes' bootstrap policy (and
// cluster-admin) a component may be bound to, and which components, with
// why: upstream's own component is bound to the same.
var upstreamRoles = map[string]map[string]string{
	"cluster-admin": {
		"cvo": "upstream's cluster-version-operator ClusterRoleBinding: it applies any kind a release payload holds",
	},
	"system:auth-delegator": {
		"metrics-server": "every aggregated API server checks its callers with TokenReviews and SubjectAccessReviews",
		"thanos-querier": "kube-rbac-proxy in front of thanos-querier does the same",
	},
	"extension-apiserver-authentication-reader": {
		"metrics-server": "an aggregated API server reads the front-proxy CA from kube-system",
	},
}

// Verbs that hand out rights rather than use them.
var escalating = []string{"escalate", "bind", "impersonate", "*"}

func TestEveryComponentHasOneIdentityAndOnlyItsOwnBindings(t *testing.T) {
	names := Components()
	if len(names) < 10 {
		t.Fatalf("found only these components: %v", names)
	}
	for _, name := range names {
		comp, err := Lookup(name)
		if err != nil {
			t.Error(err)
			continue
		}
		objs, err := RBAC(name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		for _, p := range bindingProblems(comp, objs) {
			t.Error(p)
		}
	}
}

func TestNoRuleUsesAWildcardOrHandsOutRights(t *testing.T) {
	for _, name := range Components() {
		objs, err := RBAC(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ruleProblems(name, objs) {
			t.Error(p)
		}
	}
}

// bindingProblems: every binding binds the component's ServiceAccount
// alone, to a role of its own rbac.yaml or an upstream role allowed it.
func bindingProblems(comp Component, objs []*unstructured.Unstructured) []string {
	var problems []string
	roles := map[string]bool{}
	for _, o := range objs {
		if o.GetKind() == "ClusterRole" || o.GetKind() == "Role" {
			roles[o.GetKind()+"/"+o.GetName()] = true
		}
	}
	for _, o := range objs {
		if !strings.HasSuffix(o.GetKind(), "Binding") {
			continue
		}
		where := comp.Name + ": " + o.GetKind() + " " + o.GetName()
		subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
		if len(subjects) != 1 {
			problems = append(problems, fmt.Sprintf("%s has %d subjects, want the component's ServiceAccount alone", where, len(subjects)))
		}
		for _, s := range subjects {
			s, _ := s.(map[string]any)
			if s["kind"] != "ServiceAccount" || s["name"] != comp.ServiceAccount || s["namespace"] != comp.Namespace {
				problems = append(problems, fmt.Sprintf("%s binds %v, not %s/%s", where, s, comp.Namespace, comp.ServiceAccount))
			}
		}
		kind, _, _ := unstructured.NestedString(o.Object, "roleRef", "kind")
		ref, _, _ := unstructured.NestedString(o.Object, "roleRef", "name")
		if !roles[kind+"/"+ref] && upstreamRoles[ref][comp.Name] == "" {
			problems = append(problems, fmt.Sprintf("%s refers to %s %s, neither in its rbac.yaml nor an upstream role allowed to it", where, kind, ref))
		}
	}
	return problems
}

// ruleProblems: no rule has a wildcard, a verb that hands out rights,
// no verbs, or non-resource URLs.
func ruleProblems(name string, objs []*unstructured.Unstructured) []string {
	var problems []string
	for _, o := range objs {
		if o.GetKind() != "ClusterRole" && o.GetKind() != "Role" {
			continue
		}
		rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
		if len(rules) == 0 {
			problems = append(problems, fmt.Sprintf("%s: %s %s has no rules", name, o.GetKind(), o.GetName()))
		}
		for i, r := range rules {
			r, _ := r.(map[string]any)
			where := fmt.Sprintf("%s: %s %s rule %d", name, o.GetKind(), o.GetName(), i)
			for _, field := range []string{"apiGroups", "resources", "verbs", "resourceNames"} {
				vals, _, _ := unstructured.NestedStringSlice(r, field)
				if slices.Contains(vals, "*") {
					problems = append(problems, where+": a wildcard in "+field)
				}
			}
			verbs, _, _ := unstructured.NestedStringSlice(r, "verbs")
			if len(verbs) == 0 {
				problems = append(problems, where+": no verbs")
			}
			for _, v := range verbs {
				if v != "*" && slices.Contains(escalating, v) {
					problems = append(problems, fmt.Sprintf("%s: verb %q hands out rights", where, v))
				}
			}
			if urls, _, _ := unstructured.NestedStringSlice(r, "nonResourceURLs"); len(urls) > 0 {
				problems = append(problems, fmt.Sprintf("%s: non-resource URLs %v", where, urls))
			}
		}
	}
	return problems
}

// The checks fail on what they should.
func TestTheChecksCatchWhatTheyLookFor(t *testing.T) {
	objs, err := Decode([]byte(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: wide}
rules:
- apiGroups: [""]
  resources: ["*"]
  verbs: [get]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [clusterroles]
  verbs: [bind]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: other}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: wide}
subjects:
- {kind: ServiceAccount, name: someone-else, namespace: openshift-kube-scheduler}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: admin}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects:
- {kind: ServiceAccount, name: openshift-kube-scheduler-sa, namespace: openshift-kube-scheduler}
`))
	if err != nil {
		t.Fatal(err)
	}
	comp := Component{Name: "scheduler", Namespace: "openshift-kube-scheduler", ServiceAccount: "openshift-kube-scheduler-sa"}
	got := strings.Join(append(ruleProblems("scheduler", objs), bindingProblems(comp, objs)...), "\n")
	for _, want := range []string{"a wildcard in resources", `verb "bind" hands out rights`, "binds map", "refers to ClusterRole cluster-admin"} {
		if !strings.Contains(got, want) {
			t.Errorf("the checks did not report %q; they reported:\n%s", want, got)
		}
	}
	if _, err := Decode([]byte("kind: Role\n")); err == nil {
		t.Error("a document without apiVersion and name was accepted")
	}
	if _, err := Lookup("no-such-component"); err == nil || !strings.Contains(err.Error(), "scheduler") {
		t.Errorf("an unknown component: %v (want the list of components)", err)
	}
}

func TestEveryNamespaceIsMadeOrBuiltIn(t *testing.T) {
	made, err := Namespaces()
	if err != nil {
		t.Fatal(err)
	}
	builtIn := map[string]bool{"kube-system": true, "kube-node-lease": true}
	for _, name := range Components() {
		objs, err := RBAC(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if o.GetKind() == "Namespace" {
				t.Errorf("%s: rbac.yaml makes namespace %s; namespaces are made once, in namespaces/namespaces.yaml", name, o.GetName())
			}
			if ns := o.GetNamespace(); ns != "" && made[ns] == nil && !builtIn[ns] {
				t.Errorf("%s: %s %s is in namespace %s, which nothing makes", name, o.GetKind(), o.GetName(), ns)
			}
		}
	}
}
