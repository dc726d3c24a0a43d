// Package taints parses, validates and applies taint specifications the way
// `oc adm taint nodes` takes them: KEY[=VALUE]:EFFECT to add, KEY- or
// KEY:EFFECT- to remove.
package taints

import (
	"fmt"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Spec is one command-line taint argument.
type Spec struct {
	Taint  corev1.Taint
	Remove bool
	Arg    string
}

var (
	nameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$`)
	// Values follow the same alphabet; an empty value is allowed.
	validEffects = []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute}
)

// Parse reads taint arguments, checking each against the rules of the
// taints documentation; every problem names the argument and the rule.
func Parse(args []string) ([]Spec, error) {
	var out []Spec
	var errs []string
	seen := map[string]string{}
	for _, arg := range args {
		s, err := parseOne(arg)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		k := s.Taint.Key + ":" + string(s.Taint.Effect)
		if prev, dup := seen[k]; dup && !s.Remove {
			errs = append(errs, fmt.Sprintf("taint %q: key %s with effect %s is already given by %q", arg, s.Taint.Key, s.Taint.Effect, prev))
			continue
		}
		if !s.Remove {
			seen[k] = arg
		}
		out = append(out, s)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("at least one taint to add or remove is required")
	}
	return out, nil
}

func parseOne(arg string) (Spec, error) {
	s := Spec{Arg: arg}
	body := arg
	if strings.HasSuffix(arg, "-") {
		s.Remove = true
		body = strings.TrimSuffix(arg, "-")
	}
	kv, effect, hasEffect := strings.Cut(body, ":")
	key, value, hasValue := strings.Cut(kv, "=")
	if s.Remove {
		if hasValue {
			return s, fmt.Errorf("taint %q: a taint to remove is KEY- or KEY:EFFECT-, without a value", arg)
		}
	} else if !hasEffect {
		return s, fmt.Errorf("taint %q: a taint to add is KEY[=VALUE]:EFFECT (effect missing)", arg)
	}
	if err := ValidateKey(key); err != nil {
		return s, fmt.Errorf("taint %q: %v", arg, err)
	}
	if err := ValidateValue(value); err != nil {
		return s, fmt.Errorf("taint %q: %v", arg, err)
	}
	if hasEffect || !s.Remove {
		if err := ValidateEffect(corev1.TaintEffect(effect)); err != nil {
			return s, fmt.Errorf("taint %q: %v", arg, err)
		}
	}
	s.Taint = corev1.Taint{Key: key, Value: value, Effect: corev1.TaintEffect(effect)}
	return s, nil
}

// ValidateKey: up to 253 characters, starting (and ending) with a letter
// or digit, made of letters, digits, hyphens, dots and underscores; a
// DNS-subdomain prefix with a slash is allowed, as in
// node-role.kubernetes.io/master.
func ValidateKey(key string) error {
	if key == "" {
		return fmt.Errorf("key is empty")
	}
	if len(key) > 253 {
		return fmt.Errorf("key is %d characters long, the limit is 253", len(key))
	}
	name := key
	if prefix, n, ok := strings.Cut(key, "/"); ok {
		if errs := validation.IsDNS1123Subdomain(prefix); len(errs) > 0 {
			return fmt.Errorf("key prefix %q must be a DNS subdomain (lowercase letters, digits, hyphens and dots)", prefix)
		}
		name = n
	}
	if len(name) > 63 {
		return fmt.Errorf("key name %q is %d characters long, the limit is 63", name, len(name))
	}
	if !nameRE.MatchString(name) {
		return fmt.Errorf("key %q must start with a letter or digit and contain only letters, digits, hyphens, dots and underscores", key)
	}
	return nil
}

// ValidateValue: empty, or up to 63 characters with the key's alphabet.
func ValidateValue(value string) error {
	if value == "" {
		return nil
	}
	if len(value) > 63 {
		return fmt.Errorf("value is %d characters long, the limit is 63", len(value))
	}
	if !nameRE.MatchString(value) {
		return fmt.Errorf("value %q must start with a letter or digit and contain only letters, digits, hyphens, dots and underscores", value)
	}
	return nil
}

// ValidateEffect accepts NoSchedule, PreferNoSchedule and NoExecute.
func ValidateEffect(e corev1.TaintEffect) error {
	for _, v := range validEffects {
		if e == v {
			return nil
		}
	}
	if e == "" {
		return fmt.Errorf("effect is empty: use NoSchedule, PreferNoSchedule or NoExecute")
	}
	return fmt.Errorf("effect %q is not one of NoSchedule, PreferNoSchedule, NoExecute", e)
}

// Outcomes of applying taints to a node, as oc prints them.
const (
	Tainted   = "tainted"
	Untainted = "untainted"
	Modified  = "modified"
)

// Apply computes a node's new taints. Adding a taint whose key and effect
// the node already has needs overwrite; removing one the node lacks is an
// error, as with oc.
func Apply(node *corev1.Node, specs []Spec, overwrite bool) (string, []corev1.Taint, error) {
	taints := append([]corev1.Taint(nil), node.Spec.Taints...)
	added, removed, updated := false, false, false
	for _, s := range specs {
		if s.Remove {
			continue
		}
		found := false
		for i := range taints {
			if taints[i].Key == s.Taint.Key && taints[i].Effect == s.Taint.Effect {
				found = true
				if !overwrite {
					return "", nil, fmt.Errorf("node %s already has %s taint(s) with same effect(s) and --overwrite is false", node.Name, s.Taint.Key)
				}
				taints[i].Value = s.Taint.Value
				updated = true
			}
		}
		if !found {
			taints = append(taints, s.Taint)
			added = true
		}
	}
	for _, s := range specs {
		if !s.Remove {
			continue
		}
		kept := taints[:0]
		hit := false
		for _, t := range taints {
			if t.Key == s.Taint.Key && (s.Taint.Effect == "" || t.Effect == s.Taint.Effect) {
				hit = true
				continue
			}
			kept = append(kept, t)
		}
		taints = kept
		if !hit {
			what := s.Taint.Key
			if s.Taint.Effect != "" {
				what += ":" + string(s.Taint.Effect)
			}
			return "", nil, fmt.Errorf("taint %q not found on node %s", what, node.Name)
		}
		removed = true
	}
	switch {
	case (added || updated) && removed, updated:
		return Modified, taints, nil
	case added:
		return Tainted, taints, nil
	default:
		return Untainted, taints, nil
	}
}
