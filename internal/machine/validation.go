package machine

import (
	"fmt"
	"regexp"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// hookNamePattern is the CRD's pattern for lifecycle hook names: CamelCase
// words, optionally prefixed by a DNS subdomain and a slash.
var hookNamePattern = regexp.MustCompile(`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$`)

// ValidateMachine checks a Machine on create (old nil) or update: its
// lifecycle hooks, which no one may add or change once the machine is
// being deleted (removing is always allowed), and its provider spec.
func ValidateMachine(m, old *machinev1.Machine) field.ErrorList {
	var errs field.ErrorList
	hooks := field.NewPath("spec", "lifecycleHooks")
	errs = append(errs, validateHooks(m.Spec.LifecycleHooks.PreDrain, hooks.Child("preDrain"))...)
	errs = append(errs, validateHooks(m.Spec.LifecycleHooks.PreTerminate, hooks.Child("preTerminate"))...)
	deleting := !m.DeletionTimestamp.IsZero()
	if deleting && old != nil {
		if changed := changedHooks(old.Spec.LifecycleHooks.PreDrain, m.Spec.LifecycleHooks.PreDrain); len(changed) > 0 {
			errs = append(errs, field.Forbidden(hooks.Child("preDrain"),
				fmt.Sprintf("pre-drain hooks are immutable when machine is marked for deletion: the following hooks are new or changed: %+v", changed)))
		}
		if changed := changedHooks(old.Spec.LifecycleHooks.PreTerminate, m.Spec.LifecycleHooks.PreTerminate); len(changed) > 0 {
			errs = append(errs, field.Forbidden(hooks.Child("preTerminate"),
				fmt.Sprintf("pre-terminate hooks are immutable when machine is marked for deletion: the following hooks are new or changed: %+v", changed)))
		}
	}
	if !deleting {
		errs = append(errs, validateProviderSpec(m.Spec.ProviderSpec, field.NewPath("spec", "providerSpec", "value"))...)
	}
	return errs
}

// ValidateMachineSet checks that the selector selects the template's
// machines, and the template itself.
func ValidateMachineSet(ms *machinev1.MachineSet) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	sel, err := metav1.LabelSelectorAsSelector(&ms.Spec.Selector)
	switch {
	case err != nil:
		errs = append(errs, field.Invalid(spec.Child("selector"), ms.Spec.Selector, err.Error()))
	case sel.Empty():
		errs = append(errs, field.Required(spec.Child("selector"), "a MachineSet must select its machines by label"))
	case !sel.Matches(labels.Set(ms.Spec.Template.Labels)):
		errs = append(errs, field.Invalid(spec.Child("template", "metadata", "labels"), ms.Spec.Template.Labels,
			"`selector` does not match template `labels`"))
	}
	if r := ms.Spec.Replicas; r != nil && *r < 0 {
		errs = append(errs, field.Invalid(spec.Child("replicas"), *r, "must be greater than or equal to 0"))
	}
	if _, err := deletePriorityFor(ms); err != nil {
		errs = append(errs, field.NotSupported(spec.Child("deletePolicy"), ms.Spec.DeletePolicy, []string{"Random", "Newest", "Oldest"}))
	}
	tmpl := spec.Child("template", "spec")
	hooks := tmpl.Child("lifecycleHooks")
	errs = append(errs, validateHooks(ms.Spec.Template.Spec.LifecycleHooks.PreDrain, hooks.Child("preDrain"))...)
	errs = append(errs, validateHooks(ms.Spec.Template.Spec.LifecycleHooks.PreTerminate, hooks.Child("preTerminate"))...)
	if !ms.DeletionTimestamp.IsZero() {
		return errs
	}
	return append(errs, validateProviderSpec(ms.Spec.Template.Spec.ProviderSpec, tmpl.Child("providerSpec", "value"))...)
}

func validateProviderSpec(ps machinev1.ProviderSpec, path *field.Path) field.ErrorList {
	if _, err := ParseProviderSpec(ps); err != nil {
		return field.ErrorList{field.Invalid(path, "", err.Error())}
	}
	return nil
}

// validateHooks applies the CRD's rules with OpenShift's messages: names
// unique within a stage, 3-256 characters matching the pattern, owners of
// 3-512 characters.
func validateHooks(hooks []machinev1.LifecycleHook, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, h := range hooks {
		p := path.Index(i)
		if seen[h.Name] {
			errs = append(errs, field.Forbidden(p.Child("name"),
				fmt.Sprintf("hook names must be unique within a lifecycle stage, the following hook name is already set: %s", h.Name)))
		}
		seen[h.Name] = true
		switch {
		case len(h.Name) < 3 || len(h.Name) > 256:
			errs = append(errs, field.Invalid(p.Child("name"), h.Name, "must be 3 to 256 characters long"))
		case !hookNamePattern.MatchString(h.Name):
			errs = append(errs, field.Invalid(p.Child("name"), h.Name,
				"must be CamelCase words, optionally prefixed by a DNS subdomain and a slash (e.g. foo.example.com/CamelCase)"))
		}
		if len(h.Owner) < 3 || len(h.Owner) > 512 {
			errs = append(errs, field.Invalid(p.Child("owner"), h.Owner, "must be 3 to 512 characters long"))
		}
	}
	return errs
}

// changedHooks returns the hooks of cur that old does not have unchanged.
func changedHooks(old, cur []machinev1.LifecycleHook) []machinev1.LifecycleHook {
	had := map[machinev1.LifecycleHook]bool{}
	for _, h := range old {
		had[h] = true
	}
	var out []machinev1.LifecycleHook
	for _, h := range cur {
		if !had[h] {
			out = append(out, h)
		}
	}
	return out
}
