package deploy

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/capstan-dev/capstan/internal/audit"
)

// Right is one verb on one resource that a component's rbac.yaml grants
// it, where its binding applies.
type Right struct {
	Component string
	// Role is KIND/NAME of the role that grants it.
	Role string
	// Group is the API group ("" the core group); Resource may name a
	// subresource (pods/eviction).
	Group, Resource string
	// Name is the one object it applies to ("" any).
	Name string
	Verb string
	// Namespace is where the binding applies ("" cluster-wide).
	Namespace string
}

func (r Right) String() string {
	group, name, where := r.Group, r.Name, "cluster-wide"
	if group == "" {
		group = "core"
	}
	if name == "" {
		name = "*"
	}
	if r.Namespace != "" {
		where = "in " + r.Namespace
	}
	return fmt.Sprintf("%s\t%s\t%s %s.%s/%s\t%s", r.Component, r.Role, r.Verb, r.Resource, group, name, where)
}

// Rights lists what a component's rbac.yaml grants through its own roles
// (an upstream role it is bound to, such as the CVO's cluster-admin, is
// not enumerated).
func Rights(name string) ([]Right, error) {
	objs, err := RBAC(name)
	if err != nil {
		return nil, err
	}
	roles := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		if o.GetKind() == "ClusterRole" || o.GetKind() == "Role" {
			roles[o.GetKind()+"/"+o.GetName()] = o
		}
	}
	var out []Right
	for _, b := range objs {
		if !strings.HasSuffix(b.GetKind(), "Binding") {
			continue
		}
		kind, _, _ := unstructured.NestedString(b.Object, "roleRef", "kind")
		ref, _, _ := unstructured.NestedString(b.Object, "roleRef", "name")
		role := roles[kind+"/"+ref]
		if role == nil {
			continue
		}
		for _, r := range roleRights(role) {
			r.Component, r.Role, r.Namespace = name, kind+"/"+ref, b.GetNamespace()
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return slices.Compact(out), nil
}

// roleRights flattens a role's rules into one right per API group,
// resource, name and verb, in the rules' order (Group, Resource, Name
// and Verb set).
func roleRights(role *unstructured.Unstructured) []Right {
	var out []Right
	rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	for _, r := range rules {
		r, _ := r.(map[string]any)
		groups, _, _ := unstructured.NestedStringSlice(r, "apiGroups")
		resources, _, _ := unstructured.NestedStringSlice(r, "resources")
		names, _, _ := unstructured.NestedStringSlice(r, "resourceNames")
		verbs, _, _ := unstructured.NestedStringSlice(r, "verbs")
		if len(names) == 0 {
			names = []string{""}
		}
		for _, g := range groups {
			for _, res := range resources {
				for _, n := range names {
					for _, v := range verbs {
						out = append(out, Right{Group: g, Resource: res, Name: n, Verb: v})
					}
				}
			}
		}
	}
	return out
}

// covers reports whether a right allows the request an audit event
// records.
func (r Right) covers(e *audit.Event) bool {
	o := e.ObjectRef
	if o == nil || r.Verb != e.Verb || r.Group != o.APIGroup {
		return false
	}
	res := o.Resource
	if o.Subresource != "" {
		res += "/" + o.Subresource
	}
	return r.Resource == res && (r.Name == "" || r.Name == o.Name) && (r.Namespace == "" || r.Namespace == o.Namespace)
}

// Unused lists the rights of the components named (every component when
// none is) that no request of theirs in the audit log at path used, and
// how many rights each has.
func Unused(auditLog string, components ...string) (unused []Right, total map[string]int, err error) {
	if len(components) == 0 {
		components = Components()
	}
	byUser := map[string][]Right{}
	used := map[Right]bool{}
	total = map[string]int{}
	for _, name := range components {
		comp, err := Lookup(name)
		if err != nil {
			return nil, nil, err
		}
		rights, err := Rights(name)
		if err != nil {
			return nil, nil, err
		}
		byUser[comp.Username()] = rights
		total[name] = len(rights)
	}
	err = audit.Read(auditLog, func(e *audit.Event) {
		if e.AuthorizationDenied() {
			return
		}
		for _, r := range byUser[e.User.Username] {
			if r.covers(e) {
				used[r] = true
			}
		}
	})
	if err != nil {
		return nil, nil, err
	}
	for _, name := range components {
		comp, _ := Lookup(name)
		for _, r := range byUser[comp.Username()] {
			if !used[r] {
				unused = append(unused, r)
			}
		}
	}
	return unused, total, nil
}
