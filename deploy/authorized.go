package deploy

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/capstan-dev/capstan/internal/waitfor"
)

var subjectAccessReviews = schema.GroupVersionResource{Group: "authorization.k8s.io", Version: "v1", Resource: "subjectaccessreviews"}

// authorizedTimeout bounds how long the API server's authorizer may take
// to see a binding just applied.
const authorizedTimeout = 30 * time.Second

// waitAuthorized waits until the API server's authorizer grants the
// component, through each of its bindings, the first rule of the role
// the binding names (read from the cluster, so an upstream role such as
// cluster-admin counts too). RBAC authorizes from informers: a binding
// just created reaches them a moment later, and a component that starts
// at once may be refused its first request. A SubjectAccessReview goes
// through the same authorizer, so once it allows, the component's
// requests are allowed.
func waitAuthorized(ctx context.Context, dyn dynamic.Interface, comp Component, objs []*unstructured.Unstructured) error {
	for _, b := range objs {
		if !strings.HasSuffix(b.GetKind(), "Binding") {
			continue
		}
		kind, _, _ := unstructured.NestedString(b.Object, "roleRef", "kind")
		name, _, _ := unstructured.NestedString(b.Object, "roleRef", "name")
		gvr, ok := resources[kind]
		if !ok {
			return fmt.Errorf("%s %s refers to a %q, not a role", b.GetKind(), b.GetName(), kind)
		}
		ns := b.GetNamespace()
		var ri dynamic.ResourceInterface = dyn.Resource(gvr)
		if kind == "Role" {
			ri = dyn.Resource(gvr).Namespace(ns)
		}
		role, err := ri.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("the %s %s that %s %s binds %s to: %w", kind, name, b.GetKind(), b.GetName(), comp.Name, err)
		}
		rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
		if len(rules) == 0 {
			continue
		}
		spec := map[string]any{"user": comp.Username(), "groups": toAny(comp.Groups())}
		rule, _ := rules[0].(map[string]any)
		first := func(key string) string {
			vals, _, _ := unstructured.NestedStringSlice(rule, key)
			if len(vals) == 0 {
				return ""
			}
			return vals[0]
		}
		what := ""
		if url := first("nonResourceURLs"); url != "" {
			spec["nonResourceAttributes"] = map[string]any{"path": url, "verb": first("verbs")}
			what = first("verbs") + " " + url
		} else {
			attrs := map[string]any{"group": first("apiGroups"), "resource": first("resources"), "verb": first("verbs"), "namespace": ns}
			if n := first("resourceNames"); n != "" {
				attrs["name"] = n
			}
			spec["resourceAttributes"] = attrs
			what = fmt.Sprintf("%s %s.%s", first("verbs"), first("resources"), first("apiGroups"))
		}
		sar := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}}
		err = waitfor.Poll(ctx, 20*time.Millisecond, authorizedTimeout, func(ctx context.Context) (bool, string, error) {
			got, err := dyn.Resource(subjectAccessReviews).Create(ctx, sar, metav1.CreateOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			allowed, _, _ := unstructured.NestedBool(got.Object, "status", "allowed")
			reason, _, _ := unstructured.NestedString(got.Object, "status", "reason")
			return allowed, "not allowed yet: " + reason, nil
		})
		if err != nil {
			return fmt.Errorf("the API server does not grant %s %s through %s %s: %w", comp.Name, what, b.GetKind(), b.GetName(), err)
		}
	}
	return nil
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
