package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/capstan-dev/capstan/internal/testenv"
)

// Each simulated kubelet writes as its own node, as a kubelet does: the
// API server knows it as system:node:NAME in system:nodes, the Node
// authorizer and NodeRestriction hold it to its own node, and its lease
// and its pods' status are written by it.
func TestEachSimulatedKubeletWritesAsItsNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp := env.Cluster.ControlPlane
	nodes, err := env.Cluster.Sim.Nodes()
	if err != nil || len(nodes) < 2 {
		t.Fatalf("simulated nodes: %d, %v", len(nodes), err)
	}
	self, other := nodes[0].Name, nodes[1].Name
	as := func(token string) kubernetes.Interface {
		cfg := cp.NodeClientConfig()
		cfg.BearerToken = token
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	kubelet := as(cp.NodeToken(self))

	review, err := kubelet.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("who is the kubelet of %s: %v", self, err)
	}
	if u := review.Status.UserInfo; u.Username != "system:node:"+self || !strings.Contains(strings.Join(u.Groups, ","), "system:nodes") {
		t.Errorf("the kubelet of %s is %s in %v; want system:node:%s in system:nodes", self, u.Username, u.Groups, self)
	}

	// Its own lease it renews; another node's NodeRestriction refuses.
	leases := kubelet.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	own, err := leases.Get(ctx, self, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading its own lease: %v", err)
	}
	if _, err := leases.Update(ctx, own, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
		t.Errorf("renewing its own lease: %v", err)
	}
	theirs, err := env.Cluster.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, other, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leases.Update(ctx, theirs, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the kubelet of %s renewing the lease of %s: %v; want it forbidden", self, other, err)
	}
	node, err := env.Cluster.Client.CoreV1().Nodes().Get(ctx, other, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kubelet.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the kubelet of %s updating the status of %s: %v; want it forbidden", self, other, err)
	}

	// Priority and fairness takes it for a kubelet: node-high, as
	// upstream's system-nodes FlowSchema puts every member of
	// system:nodes.
	levels, err := env.Client.FlowcontrolV1().PriorityLevelConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := cp.NodeClientConfig()
	cfg.BearerToken = cp.NodeToken(self)
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(cfg.Host + "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/" + self)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	level := ""
	for _, l := range levels.Items {
		if string(l.UID) == resp.Header.Get("X-Kubernetes-PF-PriorityLevel-UID") {
			level = l.Name
		}
	}
	if level != "node-high" {
		t.Errorf("the kubelet of %s reading its lease: priority level %q (%s), want node-high", self, level, resp.Status)
	}

	// A token signed for one node and named for another is nobody's.
	forged := strings.Replace(cp.NodeToken(self), tokenName(cp.NodeToken(self)), tokenName(cp.NodeToken(other)), 1)
	if _, err := as(forged).CoreV1().Nodes().Get(ctx, other, metav1.GetOptions{}); !apierrors.IsUnauthorized(err) {
		t.Errorf("a forged node token: %v; want it unauthorized", err)
	}

	// The simulator's own writes for the node are the kubelet's: the lease
	// it renews next, and the status of a pod it starts.
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		l, err := env.Cluster.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, self, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return managedBy(l.ManagedFields, "kubelet", ""), "the lease's writers: " + managers(l.ManagedFields)
	})
	ns := env.Namespace(t, "kubelet-identity")
	pod := env.CreatePod(t, ns, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{
		NodeName: self, Containers: []corev1.Container{{Name: "c", Image: "quay.io/x/y:1"}},
		Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}}})
	running := env.WaitPodRunning(t, ns, pod.Name)
	if !managedBy(running.ManagedFields, "kubelet", "status") {
		t.Errorf("the pod's status writers: %s; want the kubelet", managers(running.ManagedFields))
	}
}

// tokenName is the name part of a node token.
func tokenName(token string) string {
	parts := strings.Split(token, ".")
	return parts[len(parts)-2]
}

func managedBy(fields []metav1.ManagedFieldsEntry, manager, subresource string) bool {
	for _, f := range fields {
		if f.Manager == manager && f.Subresource == subresource {
			return true
		}
	}
	return false
}

func managers(fields []metav1.ManagedFieldsEntry) string {
	var out []string
	for _, f := range fields {
		out = append(out, f.Manager+"/"+f.Subresource)
	}
	return strings.Join(out, " ")
}
