package sim

import (
	"context"
	"fmt"
	"hash/fnv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	nodeutil "k8s.io/kubernetes/pkg/controller/util/node"
)

// A simulation faster than real time keeps the node lifecycle
// controller's grace period in real seconds, so that thousands of healthy
// kubelets renew their leases at a real pace whatever the speed, and
// declares lost only the nodes whose kubelet stopped, itself, at the
// instant the controller would have: what the controller does when a
// lease goes stale (Ready and the pressure conditions Unknown, then every
// pod of the node not ready) posted from outside. The controller takes a
// condition posted by someone else as the node's, so the zone states,
// the rate-limited NoExecute taints and the taint evictions that follow
// are its own unmodified code.

// Lost is when the simulator declares a stopped kubelet's node lost, in
// real time.
type Lost struct {
	// Grace is the node monitor grace period of the cluster simulated,
	// and MonitorPeriod its node monitor period.
	Grace, MonitorPeriod time.Duration
	// Renewal is the interval of the simulated cluster's kubelets'
	// lease renewals: a stopped kubelet last renewed up to one interval
	// before it stopped.
	Renewal time.Duration
}

// enabled reports whether the simulator declares nodes lost itself.
func (l Lost) enabled() bool { return l.Grace > 0 }

// after is how long after a kubelet stopped its node is declared lost.
// The controller sees a renewal at its next monitor pass p, and declares
// the node at the first pass strictly more than the grace period after
// p: p plus n periods, n the smallest whole number of periods longer
// than the grace. Declared n periods after the renewal, the node is seen
// lost at that same pass, so its taint is queued when the controller
// would have queued it. The last renewal is a stable point of the
// renewal interval before the stop, by node name, as kubelets' renewals
// are staggered.
func (l Lost) after(node string) time.Duration {
	n := time.Duration(1)
	if l.MonitorPeriod > 0 {
		n = l.Grace/l.MonitorPeriod + 1
	}
	return max(n*l.MonitorPeriod-l.lastRenewal(node), 0)
}

// lastRenewal is how long before its kubelet stopped a node last renewed
// its lease: a stable point of the renewal interval, by node name.
func (l Lost) lastRenewal(node string) time.Duration {
	if l.Renewal <= 0 {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(node))
	return time.Duration(h.Sum64() % uint64(l.Renewal))
}

// nodeConditionsLost are the conditions the node lifecycle controller
// makes Unknown when a node's kubelet stops posting (NetworkUnavailable
// is the network's).
var nodeConditionsLost = []corev1.NodeConditionType{corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure}

// DeclareNodeLost does to node what the node lifecycle controller does
// when its lease goes stale: Ready, MemoryPressure, DiskPressure and
// PIDPressure become Unknown (NodeStatusUnknown, or NodeStatusNeverUpdated
// for a condition the kubelet never posted) as of at, the NodeNotReady
// event is recorded, and every pod of the node is marked not ready, by
// the controller's own MarkPodsNotReady. It reports false when the node
// was already lost. The heartbeat stays the kubelet's last, so the
// controller takes the condition as the node's.
func DeclareNodeLost(ctx context.Context, client kubernetes.Interface, recorder record.EventRecorder, node *corev1.Node, pods []*corev1.Pod, since time.Time) (bool, error) {
	lost := node.DeepCopy()
	changed := false
	at := metav1.NewTime(since)
	for _, t := range nodeConditionsLost {
		c := condition(lost, t)
		switch {
		case c == nil:
			lost.Status.Conditions = append(lost.Status.Conditions, corev1.NodeCondition{Type: t, Status: corev1.ConditionUnknown,
				Reason: "NodeStatusNeverUpdated", Message: "Kubelet never posted node status.",
				LastHeartbeatTime: node.CreationTimestamp, LastTransitionTime: at})
			changed = true
		case c.Status != corev1.ConditionUnknown:
			c.Status, c.Reason, c.Message, c.LastTransitionTime = corev1.ConditionUnknown, "NodeStatusUnknown", "Kubelet stopped posting node status.", at
			changed = true
		}
	}
	if !changed {
		return false, nil
	}
	wasReady := false
	if c := condition(node, corev1.NodeReady); c != nil && c.Status == corev1.ConditionTrue {
		wasReady = true
	}
	updated, err := client.CoreV1().Nodes().UpdateStatus(ctx, lost, metav1.UpdateOptions{})
	if err != nil {
		return false, fmt.Errorf("declaring node %s lost: %w", node.Name, err)
	}
	// As the controller: the event and the pods only on the transition
	// from Ready.
	if wasReady {
		nodeutil.RecordNodeStatusChange(klog.FromContext(ctx), recorder, updated, "NodeNotReady")
		if err := nodeutil.MarkPodsNotReady(ctx, client, recorder, pods, node.Name); err != nil {
			return true, fmt.Errorf("marking the pods of lost node %s not ready: %w", node.Name, err)
		}
	}
	return true, nil
}

func condition(node *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == t {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

// kubeletStopped notes that the kubelet of a registered node stopped, and
// queues the node to be declared lost when the controller would.
func (s *Simulator) kubeletStopped(name string) {
	if !s.opts.Lost.enabled() {
		return
	}
	node, err := s.nodes.Get(name)
	if err != nil {
		return
	}
	now := s.opts.Clock.Now()
	s.lostMu.Lock()
	at, seen := s.stoppedAt[name]
	if !seen {
		at = now
		if since, err := time.Parse(time.RFC3339Nano, node.Annotations[LostSinceAnnotation]); err == nil && since.Before(now) {
			// Declared lost before it stopped here: as of then.
			at = since.Add(-s.opts.Lost.after(name))
		}
		s.stoppedAt[name] = at
	}
	s.lostMu.Unlock()
	s.lostQueue.AddAfter(name, at.Add(s.opts.Lost.after(name)).Sub(now))
}

// kubeletRenewed forgets a stop: the kubelet runs again.
func (s *Simulator) kubeletRenewed(name string) {
	if !s.opts.Lost.enabled() {
		return
	}
	s.lostMu.Lock()
	delete(s.stoppedAt, name)
	s.lostMu.Unlock()
}

// syncLost declares the node of a stopped kubelet lost once it is due.
func (s *Simulator) syncLost(ctx context.Context, name string) error {
	s.lostMu.Lock()
	at, stopped := s.stoppedAt[name]
	s.lostMu.Unlock()
	if !stopped {
		return nil
	}
	node, err := s.nodes.Get(name)
	if _, _, running := s.kubeletRunning(name); running || apierrors.IsNotFound(err) {
		s.kubeletRenewed(name)
		return nil
	}
	if err != nil {
		return err
	}
	now := s.opts.Clock.Now()
	due := at.Add(s.opts.Lost.after(name))
	if now.Before(due) {
		s.lostQueue.AddAfter(name, due.Sub(now))
		return nil
	}
	objs, err := s.podIndex.ByIndex(podsByNodeIndex, name)
	if err != nil {
		return err
	}
	pods := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		pods = append(pods, o.(*corev1.Pod))
	}
	if c := condition(node, corev1.NodeReady); c != nil && c.Status == corev1.ConditionUnknown {
		// Declared already (a pod's update failed then, or the
		// controller did it): the pods still ready are marked, as the
		// controller retries them.
		if err := nodeutil.MarkPodsNotReady(ctx, s.client, s.lostRecorder, pods, name); err != nil {
			return err
		}
	} else if _, err := DeclareNodeLost(ctx, s.client, s.lostRecorder, node, pods, due); err != nil {
		return err
	}
	s.kubeletRenewed(name)
	return nil
}

// newLostRecorder records as the node lifecycle controller does.
func (s *Simulator) newLostRecorder() record.EventRecorder {
	return s.events.broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "node-controller"})
}
