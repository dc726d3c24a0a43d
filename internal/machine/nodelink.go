package machine

import (
	"context"
	"fmt"
	"slices"

	"github.com/capstan-dev/capstan/internal/taints"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Cache indexes of the nodelink controller.
const (
	machineProviderIDIndex = "machine.spec.providerID"
	machineInternalIPIndex = "machine.status.internalIP"
	nodeProviderIDIndex    = "node.spec.providerID"
	nodeMachineIndex       = "node.machineAnnotation"
)

func indexMachineProviderID(o client.Object) []string {
	if id := ptr.Deref(o.(*machinev1.Machine).Spec.ProviderID, ""); id != "" {
		return []string{id}
	}
	return nil
}

func indexMachineInternalIP(o client.Object) []string {
	var ips []string
	for _, a := range o.(*machinev1.Machine).Status.Addresses {
		if a.Type == corev1.NodeInternalIP && a.Address != "" {
			ips = append(ips, a.Address)
		}
	}
	return ips
}

func indexNodeProviderID(o client.Object) []string {
	if id := o.(*corev1.Node).Spec.ProviderID; id != "" {
		return []string{id}
	}
	return nil
}

func indexNodeMachine(o client.Object) []string {
	if key, ok := MachineOfNode(o); ok {
		return []string{key.String()}
	}
	return nil
}

// nodeLinkReconciler links each Node to the Machine behind it, found by
// provider ID or else by internal IP: the Node gets the
// machine.openshift.io/machine annotation and the machine's labels and
// taints (added, never removed: the taints recipe of MachineSets); the
// Machine gets status.nodeRef.
type nodeLinkReconciler struct {
	client    client.Client
	namespace string
}

func (r *nodeLinkReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	node := &corev1.Node{}
	if err := r.client.Get(ctx, req.NamespacedName, node); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	m, err := r.machineFor(ctx, node)
	if err != nil || m == nil {
		return reconcile.Result{}, err
	}
	if err := r.linkNode(ctx, node, m); err != nil {
		return reconcile.Result{}, err
	}
	ref := &corev1.ObjectReference{Kind: "Node", Name: node.Name, UID: node.UID}
	if m.DeletionTimestamp.IsZero() && !equality.Semantic.DeepEqual(m.Status.NodeRef, ref) {
		if err := writeMachineStatus(ctx, r.client, m.DeepCopy(), m, machineFacts{nodeRef: ref}); err != nil {
			return reconcile.Result{}, fmt.Errorf("setting nodeRef of machine %s: %w", m.Name, err)
		}
		klog.FromContext(ctx).V(2).Info("Linked node to machine", "node", node.Name, "machine", klog.KObj(m))
	}
	return reconcile.Result{}, nil
}

// machineFor finds the node's machine: by provider ID, by internal IP, or
// by the annotation the node registered with.
func (r *nodeLinkReconciler) machineFor(ctx context.Context, node *corev1.Node) (*machinev1.Machine, error) {
	list := &machinev1.MachineList{}
	if node.Spec.ProviderID != "" {
		if err := r.client.List(ctx, list, client.InNamespace(r.namespace), client.MatchingFields{machineProviderIDIndex: node.Spec.ProviderID}); err != nil {
			return nil, err
		}
		if len(list.Items) == 1 {
			return &list.Items[0], nil
		}
	}
	for _, a := range node.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if err := r.client.List(ctx, list, client.InNamespace(r.namespace), client.MatchingFields{machineInternalIPIndex: a.Address}); err != nil {
			return nil, err
		}
		if len(list.Items) == 1 {
			return &list.Items[0], nil
		}
	}
	return nil, nil
}

// linkNode adds the annotation, labels and taints the node lacks.
func (r *nodeLinkReconciler) linkNode(ctx context.Context, node *corev1.Node, m *machinev1.Machine) error {
	base := node.DeepCopy()
	name := machineAnnotationValue(m)
	if node.Annotations == nil {
		node.Annotations = map[string]string{}
	}
	node.Annotations[MachineAnnotation] = name
	if !m.DeletionTimestamp.IsZero() {
		// A machine on its way out changes nothing more on its node.
		m = &machinev1.Machine{}
	}
	for k, v := range m.Spec.Labels {
		if node.Labels == nil {
			node.Labels = map[string]string{}
		}
		node.Labels[k] = v
	}
	for _, t := range m.Spec.Taints {
		if !taints.Has(node.Spec.Taints, t.Key, t.Effect) {
			node.Spec.Taints = append(node.Spec.Taints, t)
		}
	}
	if equality.Semantic.DeepEqual(base.Annotations, node.Annotations) && equality.Semantic.DeepEqual(base.Labels, node.Labels) &&
		equality.Semantic.DeepEqual(base.Spec.Taints, node.Spec.Taints) {
		return nil
	}
	if err := r.client.Patch(ctx, node, optimisticMerge(base)); err != nil {
		return fmt.Errorf("linking node %s to machine %s: %w", node.Name, name, err)
	}
	return nil
}

// nodesForMachine maps a machine event to the node(s) to relink.
func (r *nodeLinkReconciler) nodesForMachine(ctx context.Context, o client.Object) []reconcile.Request {
	m := o.(*machinev1.Machine)
	if ref := m.Status.NodeRef; ref != nil {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: ref.Name}}}
	}
	id := ptr.Deref(m.Spec.ProviderID, "")
	if id == "" {
		return nil
	}
	nodes := &corev1.NodeList{}
	if err := r.client.List(ctx, nodes, client.MatchingFields{nodeProviderIDIndex: id}); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range nodes.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: nodes.Items[i].Name}})
	}
	return out
}

// machineOfNode returns the machine a node's machine.openshift.io/machine
// annotation names, or nil.
func machineOfNode(ctx context.Context, c client.Reader, node client.Object) *machinev1.Machine {
	key, ok := MachineOfNode(node)
	if !ok {
		return nil
	}
	m := &machinev1.Machine{}
	if err := c.Get(ctx, key, m); err != nil {
		return nil
	}
	return m
}

// nodesOfMachine names the machine's node: its nodeRef, or, for a machine deleted
// before nodelink linked it (its provider ID perhaps not even recorded),
// the nodes that registered for it: by provider ID or machine annotation
// in the cache, and, since the cache may lag a node that registered just
// now, read from the API under the machine's name and hostnames.
func nodesOfMachine(ctx context.Context, cached, direct client.Reader, m *machinev1.Machine) ([]string, error) {
	if ref := m.Status.NodeRef; ref != nil {
		return []string{ref.Name}, nil
	}
	id := ptr.Deref(m.Spec.ProviderID, "")
	key := client.ObjectKeyFromObject(m)
	belongs := func(n *corev1.Node) bool {
		named, ok := MachineOfNode(n)
		return ok && named == key || id != "" && n.Spec.ProviderID == id
	}
	var names []string
	add := func(n *corev1.Node) {
		if belongs(n) && !slices.Contains(names, n.Name) {
			names = append(names, n.Name)
		}
	}
	// By provider ID first: the cloud's name for the instance is the
	// surest link; then by the annotation nodelink writes.
	for _, f := range [][2]string{{nodeProviderIDIndex, id}, {nodeMachineIndex, key.String()}} {
		field, value := f[0], f[1]
		if value == "" {
			continue
		}
		list := &corev1.NodeList{}
		if err := cached.List(ctx, list, client.MatchingFields{field: value}); err != nil {
			return nil, err
		}
		for i := range list.Items {
			add(&list.Items[i])
		}
	}
	candidates := []string{m.Name}
	for _, a := range m.Status.Addresses {
		if a.Type == corev1.NodeHostName || a.Type == corev1.NodeInternalDNS {
			candidates = append(candidates, a.Address)
		}
	}
	for _, name := range candidates {
		if slices.Contains(names, name) {
			continue
		}
		node := &corev1.Node{}
		err := direct.Get(ctx, client.ObjectKey{Name: name}, node)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		add(node)
	}
	return names, nil
}
