package taints

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParseValid(t *testing.T) {
	specs, err := Parse([]string{"key1=value1:NoSchedule", "dedicated=groupName:NoExecute", "node-role.kubernetes.io/master=:NoSchedule", "gone-", "other:NoExecute-", "solo:PreferNoSchedule"})
	if err != nil {
		t.Fatal(err)
	}
	if s := specs[0]; s.Remove || s.Taint.Key != "key1" || s.Taint.Value != "value1" || s.Taint.Effect != corev1.TaintEffectNoSchedule {
		t.Errorf("%+v", s)
	}
	if s := specs[3]; !s.Remove || s.Taint.Key != "gone" || s.Taint.Effect != "" {
		t.Errorf("%+v", s)
	}
	if s := specs[4]; !s.Remove || s.Taint.Effect != corev1.TaintEffectNoExecute {
		t.Errorf("%+v", s)
	}
	if s := specs[5]; s.Taint.Value != "" {
		t.Errorf("%+v", s)
	}
}

func TestParseRejectsWithTheRule(t *testing.T) {
	long := strings.Repeat("a", 254)
	cases := map[string]string{
		"key1=value1":           "effect missing",
		"key1=value1:Sometimes": `effect "Sometimes" is not one of NoSchedule, PreferNoSchedule, NoExecute`,
		"key1=value1:":          "effect is empty",
		"-key=v:NoSchedule":     "must start with a letter or digit",
		"ke y=v:NoSchedule":     "contain only letters, digits, hyphens, dots and underscores",
		"k@y=v:NoSchedule":      "contain only letters",
		long + "=v:NoSchedule":  "the limit is 253",
		"k=" + strings.Repeat("v", 64) + ":NoSchedule": "value is 64 characters long, the limit is 63",
		"k=v!:NoSchedule":           `value "v!"`,
		"=v:NoSchedule":             "key is empty",
		"Bad_Prefix/k=v:NoSchedule": "must be a DNS subdomain",
		"k=v-":                      "without a value",
	}
	for arg, want := range cases {
		_, err := Parse([]string{arg})
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "taint \"") {
			t.Errorf("%s: %v, want an error naming the taint and %q", arg, err, want)
		}
	}
	if _, err := Parse([]string{"a=1:NoSchedule", "a=2:NoSchedule"}); err == nil {
		t.Errorf("duplicate key and effect accepted")
	}
	if _, err := Parse(nil); err == nil {
		t.Errorf("no taint accepted")
	}
}

func TestApply(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{
		{Key: "key1", Value: "value1", Effect: corev1.TaintEffectNoSchedule},
		{Key: "key1", Value: "value1", Effect: corev1.TaintEffectNoExecute},
	}}}
	mustParse := func(args ...string) []Spec {
		s, err := Parse(args)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	op, got, err := Apply(node, mustParse("key2=value2:NoSchedule"), false)
	if err != nil || op != Tainted || len(got) != 3 {
		t.Errorf("add: %s %v %v", op, got, err)
	}
	if _, _, err := Apply(node, mustParse("key1=other:NoSchedule"), false); err == nil || !strings.Contains(err.Error(), "--overwrite is false") {
		t.Errorf("existing without overwrite: %v", err)
	}
	op, got, err = Apply(node, mustParse("key1=other:NoSchedule"), true)
	if err != nil || op != Modified || got[0].Value != "other" {
		t.Errorf("overwrite: %s %v %v", op, got, err)
	}
	op, got, err = Apply(node, mustParse("key1:NoExecute-"), false)
	if err != nil || op != Untainted || len(got) != 1 || got[0].Effect != corev1.TaintEffectNoSchedule {
		t.Errorf("remove one effect: %s %v %v", op, got, err)
	}
	op, got, err = Apply(node, mustParse("key1-"), false)
	if err != nil || op != Untainted || len(got) != 0 {
		t.Errorf("remove key: %s %v %v", op, got, err)
	}
	if _, _, err := Apply(node, mustParse("nope-"), false); err == nil || !strings.Contains(err.Error(), `taint "nope" not found`) {
		t.Errorf("remove missing: %v", err)
	}
	if len(node.Spec.Taints) != 2 {
		t.Errorf("Apply changed the node it was given")
	}
}
