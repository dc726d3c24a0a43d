package promql

import (
	"fmt"
	"sort"
	"strings"
	"testing"
)

var facts = []Sample{
	{Labels{"__name__": "cluster_infrastructure_provider", "type": "None"}, 1},
	{Labels{"__name__": "kube_node_info", "node": "master-0", "role": "master"}, 1},
	{Labels{"__name__": "kube_node_info", "node": "worker-0", "role": "worker"}, 1},
	{Labels{"__name__": "kube_node_info", "node": "worker-1", "role": "worker"}, 1},
	{Labels{"__name__": "pods", "node": "worker-0"}, 30},
	{Labels{"__name__": "pods", "node": "worker-1"}, 10},
}

func render(v Value) string {
	if v.IsScalar {
		return fmt.Sprintf("scalar %g", v.Scalar)
	}
	var out []string
	for _, s := range v.Vector {
		var ls []string
		for k, val := range s.Labels {
			ls = append(ls, k+"="+val)
		}
		sort.Strings(ls)
		out = append(out, fmt.Sprintf("{%s} %g", strings.Join(ls, ","), s.Value))
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

func TestQueries(t *testing.T) {
	for q, want := range map[string]string{
		// The canonical risk idiom, matching and not.
		`group by (type) (cluster_infrastructure_provider{_id="",type="None"}) or 0 * group by (type) (cluster_infrastructure_provider{_id=""})`: "{type=None} 1",
		`group by (type) (cluster_infrastructure_provider{_id="",type="AWS"}) or 0 * group by (type) (cluster_infrastructure_provider{_id=""})`:  "{type=None} 0",
		`count(kube_node_info) > bool 2`:                   "{} 1",
		`count(kube_node_info) >= bool 4`:                  "{} 0",
		`count by (role) (kube_node_info)`:                 "{role=master} 1; {role=worker} 2",
		`sum(pods) by (node)`:                              "{node=worker-0} 30; {node=worker-1} 10",
		`max without (node) (pods)`:                        "{} 30",
		`pods > 20`:                                        "{__name__=pods,node=worker-0} 30",
		`pods / on(node) group by (node) (kube_node_info)`: "{node=worker-0} 30; {node=worker-1} 10",
		`kube_node_info and on(node) pods`:                 "{__name__=kube_node_info,node=worker-0,role=worker} 1; {__name__=kube_node_info,node=worker-1,role=worker} 1",
		`kube_node_info unless on(node) pods`:              "{__name__=kube_node_info,node=master-0,role=master} 1",
		`kube_node_info{role=~"mast.*"}`:                   "{__name__=kube_node_info,node=master-0,role=master} 1",
		`kube_node_info{role!~"mast.*",node!="worker-1"}`:  "{__name__=kube_node_info,node=worker-0,role=worker} 1",
		`absent(nope{x="y"})`:                              "{x=y} 1",
		`absent(pods)`:                                     "",
		`vector(0)`:                                        "{} 0",
		`(1 + 2) * 3`:                                      "scalar 9",
		`-pods + 100`:                                      "{node=worker-0} 70; {node=worker-1} 90",
		`avg(pods)`:                                        "{} 20",
		"# a comment\nsum(pods)":                           "{} 40",
	} {
		got, err := Query(q, facts)
		if err != nil {
			t.Errorf("%s: %v", q, err)
			continue
		}
		if r := render(got); r != want {
			t.Errorf("%s = %s, want %s", q, r, want)
		}
	}
}

func TestRefusedQueries(t *testing.T) {
	for q, want := range map[string]string{
		`rate(pods[5m])`: `function "rate" is not supported`,
		`pods[5m]`:       "range selectors are not supported",
		`topk(1, pods)`:  `function "topk" is not supported`,
		`pods offset 5m`: "offset is not supported",
		`pods * on(node) group_left kube_node_info`: "group_left is not supported",
		`1 > 2`:                 "comparisons between scalars must use the bool modifier",
		`sum(pods`:              `expected ")"`,
		`pods{node="x}`:         "unterminated string",
		`{}`:                    "a vector selector must name a metric or have a matcher",
		`pods * kube_node_info`: "",
		`pods + on() pods`:      "many-to-many matching not allowed",
		`2 ^ 3`:                 "the operator ^ is not supported",
	} {
		_, err := Query(q, facts)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", q, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want an error saying %q", q, err, want)
		}
	}
}
