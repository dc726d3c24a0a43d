// Package deploy holds what runs capstan's components on a cluster, one
// directory per component, and is the one source of each component's
// identity and rights: its rbac.yaml names its ServiceAccount and lists
// exactly what it reads and writes. `capstan up` applies the same files
// and runs each component as that ServiceAccount, so the rights tested
// in capstan up are the rights deployed.
package deploy

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"

	"github.com/capstan-dev/capstan/internal/audit"
)

//go:embed */*.yaml crds/capstan/*.yaml crds/SOURCES
var files embed.FS

// Files are the manifests, by path (COMPONENT/FILE.yaml).
func Files() fs.FS { return files }

// Component is one of capstan's components and its identity.
type Component struct {
	Name                      string
	Namespace, ServiceAccount string
}

// Username is the name the API server knows the component's
// ServiceAccount by.
func (c Component) Username() string {
	return "system:serviceaccount:" + c.Namespace + ":" + c.ServiceAccount
}

// Groups are the groups a ServiceAccount's token carries (besides
// system:authenticated, which every authenticated user gets).
func (c Component) Groups() []string {
	return []string{"system:serviceaccounts", "system:serviceaccounts:" + c.Namespace}
}

// Components lists every component that has an identity, by name.
func Components() []string {
	dirs, _ := fs.Glob(files, "*/rbac.yaml")
	var names []string
	for _, d := range dirs {
		names = append(names, path.Dir(d))
	}
	sort.Strings(names)
	return names
}

// Lookup returns the component called name, its identity read from the
// ServiceAccount in its rbac.yaml.
func Lookup(name string) (Component, error) {
	objs, err := RBAC(name)
	if err != nil {
		return Component{}, err
	}
	var found []Component
	for _, o := range objs {
		if o.GetKind() == "ServiceAccount" {
			found = append(found, Component{Name: name, Namespace: o.GetNamespace(), ServiceAccount: o.GetName()})
		}
	}
	if len(found) != 1 {
		return Component{}, fmt.Errorf("deploy/%s/rbac.yaml must name exactly one ServiceAccount, it names %d", name, len(found))
	}
	return found[0], nil
}

// RBAC returns the objects of a component's rbac.yaml: its namespace,
// ServiceAccount, roles and bindings.
func RBAC(name string) ([]*unstructured.Unstructured, error) {
	raw, err := files.ReadFile(name + "/rbac.yaml")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no component %q (there are: %v)", name, Components())
	}
	if err != nil {
		return nil, err
	}
	return Decode(raw)
}

// Decode splits a multi-document YAML stream into objects, refusing a
// document that is not a Kubernetes object.
func Decode(raw []byte) ([]*unstructured.Unstructured, error) {
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var objs []*unstructured.Unstructured
	for i := 1; ; i++ {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return objs, nil
		} else if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if m == nil {
			continue
		}
		o := &unstructured.Unstructured{Object: m}
		if o.GetAPIVersion() == "" || o.GetKind() == "" || o.GetName() == "" {
			return nil, fmt.Errorf("document %d: not an object with apiVersion, kind and metadata.name", i)
		}
		objs = append(objs, o)
	}
}

// resources maps the kinds rbac.yaml files hold to where they are served.
var resources = map[string]schema.GroupVersionResource{
	"Namespace":          {Version: "v1", Resource: "namespaces"},
	"ServiceAccount":     {Version: "v1", Resource: "serviceaccounts"},
	"ClusterRole":        {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	"ClusterRoleBinding": {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
	"Role":               {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
	"RoleBinding":        {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
}

// FieldManager owns, in managedFields, what Apply writes.
const FieldManager = "capstan-install"

// Namespaces are the namespaces capstan's components run in
// (namespaces/namespaces.yaml), by name.
func Namespaces() (map[string]*unstructured.Unstructured, error) {
	raw, err := files.ReadFile("namespaces/namespaces.yaml")
	if err != nil {
		return nil, err
	}
	objs, err := Decode(raw)
	if err != nil {
		return nil, fmt.Errorf("namespaces/namespaces.yaml: %w", err)
	}
	out := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		out[o.GetName()] = o
	}
	return out, nil
}

// ApplyRBAC writes a component's rbac.yaml into the cluster, after the
// namespaces of namespaces.yaml it puts objects in (server-side apply, so
// that a changed rule replaces the old one on the next start), and
// returns once the API server's authorizer grants what it bound.
func ApplyRBAC(ctx context.Context, dyn dynamic.Interface, name string) error {
	objs, err := RBAC(name)
	if err != nil {
		return err
	}
	all, err := Namespaces()
	if err != nil {
		return err
	}
	var nss []*unstructured.Unstructured
	seen := map[string]bool{}
	for _, o := range objs {
		if ns := all[o.GetNamespace()]; ns != nil && !seen[ns.GetName()] {
			seen[ns.GetName()] = true
			nss = append(nss, ns)
		}
	}
	for _, o := range append(nss, objs...) {
		gvr, ok := resources[o.GetKind()]
		if !ok {
			return fmt.Errorf("deploy/%s/rbac.yaml: %s %s is not an identity or RBAC kind", name, o.GetKind(), o.GetName())
		}
		var ri dynamic.ResourceInterface = dyn.Resource(gvr)
		if ns := o.GetNamespace(); ns != "" {
			ri = dyn.Resource(gvr).Namespace(ns)
		}
		if _, err := ri.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
			return fmt.Errorf("applying %s %s of %s: %w", o.GetKind(), o.GetName(), name, err)
		}
	}
	comp, err := Lookup(name)
	if err != nil {
		return err
	}
	return waitAuthorized(ctx, dyn, comp, objs)
}

// Refused reads the audit log at path and lists what capstan's
// components asked for and RBAC refused, one line per distinct
// request with its count: a component whose rbac.yaml lacks a right it
// uses shows here, whatever it did with the refusal.
func Refused(auditLog string) ([]string, error) {
	byUser := map[string]string{}
	for _, name := range Components() {
		comp, err := Lookup(name)
		if err != nil {
			return nil, err
		}
		byUser[comp.Username()] = name
	}
	counts := map[string]int{}
	err := audit.Read(auditLog, func(e *audit.Event) {
		name, ok := byUser[e.User.Username]
		if !ok || !e.AuthorizationDenied() {
			return
		}
		counts[name+": "+e.What()]++
	})
	if err != nil {
		return nil, err
	}
	var lines []string
	for what, n := range counts {
		lines = append(lines, fmt.Sprintf("%s (%d×)", what, n))
	}
	sort.Strings(lines)
	return lines, nil
}
