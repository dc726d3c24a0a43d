package cluster

import (
	"context"
	"fmt"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/capstan-dev/capstan/deploy"
)

// What upstream's bootstrap FlowSchemas give the identities capstan's
// in-process components stand in for. A ServiceAccount otherwise falls
// to the service-accounts FlowSchema and the workload-low priority level,
// where on a busy machine a kubelet's lease renewal would queue behind
// every controller's lists and its node go NotReady, which no real
// kubelet (system:nodes, at node-high) would suffer.
type flowSchema struct {
	name       string
	component  string
	level      string
	precedence int32
	// nodeStatus limits the schema to what system-node-high covers:
	// nodes, their status and leases.
	nodeStatus bool
}

var flowSchemas = []flowSchema{
	// The simulated kubelets, as system-node-high and system-nodes.
	{name: "capstan-sim-node-high", component: "sim", level: "node-high", precedence: 400, nodeStatus: true},
	{name: "capstan-sim", component: "sim", level: "system", precedence: 500},
	// The scheduler, as kube-scheduler; the shared informers, as
	// kube-controller-manager's.
	{name: "capstan-scheduler", component: "scheduler", level: "workload-high", precedence: 800},
	{name: "capstan-informers", component: "informers", level: "workload-high", precedence: 800},
}

// ensureFlowSchemas creates the FlowSchemas of flowSchemas, as an
// installer would (with the admin's rights), leaving any a user changed.
func ensureFlowSchemas(ctx context.Context, client kubernetes.Interface) error {
	for _, f := range flowSchemas {
		fs, err := f.object()
		if err != nil {
			return err
		}
		_, err = client.FlowcontrolV1().FlowSchemas().Create(ctx, fs, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating FlowSchema %s: %w", f.name, err)
		}
	}
	return nil
}

func (f flowSchema) object() (*flowcontrolv1.FlowSchema, error) {
	comp, err := deploy.Lookup(f.component)
	if err != nil {
		return nil, err
	}
	subject := flowcontrolv1.Subject{Kind: flowcontrolv1.SubjectKindServiceAccount,
		ServiceAccount: &flowcontrolv1.ServiceAccountSubject{Namespace: comp.Namespace, Name: comp.ServiceAccount}}
	rules := flowcontrolv1.PolicyRulesWithSubjects{Subjects: []flowcontrolv1.Subject{subject}}
	if f.nodeStatus {
		rules.ResourceRules = []flowcontrolv1.ResourcePolicyRule{
			{Verbs: []string{flowcontrolv1.VerbAll}, APIGroups: []string{""}, Resources: []string{"nodes", "nodes/status"},
				ClusterScope: true, Namespaces: []string{flowcontrolv1.NamespaceEvery}},
			{Verbs: []string{flowcontrolv1.VerbAll}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
				Namespaces: []string{flowcontrolv1.NamespaceEvery}},
		}
	} else {
		rules.ResourceRules = []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{flowcontrolv1.VerbAll},
			APIGroups: []string{flowcontrolv1.APIGroupAll}, Resources: []string{flowcontrolv1.ResourceAll},
			ClusterScope: true, Namespaces: []string{flowcontrolv1.NamespaceEvery}}}
		rules.NonResourceRules = []flowcontrolv1.NonResourcePolicyRule{{Verbs: []string{flowcontrolv1.VerbAll},
			NonResourceURLs: []string{flowcontrolv1.NonResourceAll}}}
	}
	return &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: f.name},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: f.level},
			MatchingPrecedence:         f.precedence,
			DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
			Rules:                      []flowcontrolv1.PolicyRulesWithSubjects{rules},
		},
	}, nil
}
