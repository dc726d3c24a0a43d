package sim

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/seeded"
)

// The kubelet's node lease controller (k8s.io/component-helpers'
// apimachinery/lease): it renews every quarter of the lease's duration,
// plus up to 4 % of jitter, counted from the end of the last renewal,
// and after a failure retries from 200 ms, doubling up to 7 s.
const (
	leaseRenewFraction = 0.25
	leaseJitter        = 0.04
	leaseRetryFirst    = 200 * time.Millisecond
	leaseRetryMax      = 7 * time.Second
)

// leases is what the simulated kubelets hold of their node leases, as a
// kubelet holds its own: the lease its last write returned, renewed from
// that copy without reading it again, and read from the API server only
// when a write fails or the kubelet has just started.
type leases struct {
	mu sync.Mutex
	// latest is each running kubelet's lease as its last write returned.
	latest map[string]*coordinationv1.Lease
	// failures counts each kubelet's renewals failed in a row.
	failures map[string]int

	// age is the age of each lease when it is renewed: the time since
	// the renewal before.
	age prometheus.Histogram
}

var oldestLeaseDesc = prometheus.NewDesc("capstan_simulator_node_lease_oldest_age_seconds",
	"The age of the oldest node lease a running simulated kubelet holds: the time since its last renewal.", nil, nil)

func newLeases(duration time.Duration) *leases {
	var buckets []float64
	for _, f := range []float64{0.0625, 0.125, 0.25, 0.26, 0.275, 0.3, 0.325, 0.35, 0.375, 0.5, 0.75, 1, 1.5, 2, 3} {
		buckets = append(buckets, f*duration.Seconds())
	}
	return &leases{latest: map[string]*coordinationv1.Lease{}, failures: map[string]int{},
		age: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "capstan_simulator_node_lease_age_seconds",
			Help:    "The age of a node lease when its simulated kubelet renews it: the time since the renewal before.",
			Buckets: buckets})}
}

func (l *leases) get(name string) *coordinationv1.Lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.latest[name]
}

// renewed keeps what a write returned, and observes the age of the lease
// it renewed (before, nil when it was created).
func (l *leases) renewed(name string, before, after *coordinationv1.Lease) {
	if before != nil && before.Spec.RenewTime != nil && after.Spec.RenewTime != nil {
		l.age.Observe(after.Spec.RenewTime.Sub(before.Spec.RenewTime.Time).Seconds())
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.latest[name] = after
	delete(l.failures, name)
}

// failed forgets the kubelet's copy and says how long it waits before it
// tries again.
func (l *leases) failed(name string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.latest, name)
	n := l.failures[name]
	l.failures[name] = n + 1
	return min(leaseRetryFirst<<min(n, 6), leaseRetryMax)
}

// forget drops what a stopped kubelet held: a kubelet that starts again
// reads its lease anew.
func (l *leases) forget(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.latest, name)
	delete(l.failures, name)
}

// oldest is the age of the oldest lease held at now.
func (l *leases) oldest(now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out time.Duration
	for _, lease := range l.latest {
		if t := lease.Spec.RenewTime; t != nil {
			out = max(out, now.Sub(t.Time))
		}
	}
	return out
}

// syncLease renews the node lease of a running kubelet as the kubelet's
// lease controller does, then schedules its next renewal.
func (s *Simulator) syncLease(ctx context.Context, name string) {
	_, node, running := s.kubeletRunning(name)
	if !running || node == nil {
		s.leases.forget(name)
		s.kubeletStopped(name)
		return
	}
	s.kubeletRenewed(name)
	if err := s.renewLease(ctx, name, node); err != nil {
		retry := s.leases.failed(name)
		if ctx.Err() == nil {
			klog.FromContext(ctx).V(2).Info("Renewing a node lease failed, retrying", "node", name, "after", retry, "err", err)
		}
		s.leaseQueue.AddAfter(name, retry)
		return
	}
	interval := time.Duration(leaseRenewFraction * float64(s.opts.LeaseDuration))
	s.leaseQueue.AddAfter(name, interval+time.Duration(seeded.Float64()*leaseJitter*float64(interval)))
}

// renewLease writes the lease: from the copy the last write returned, or,
// without one or when that write fails, from the API server's, which it
// creates when there is none.
func (s *Simulator) renewLease(ctx context.Context, name string, node *corev1.Node) error {
	ctx, kube := s.kubelet(ctx, name)
	client := kube.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	if base := s.leases.get(name); base != nil {
		updated, err := client.Update(ctx, s.nextLease(base, node), metav1.UpdateOptions{})
		if err == nil {
			s.leases.renewed(name, base, updated)
			return nil
		}
	}
	base, err := client.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		created, err := client.Create(ctx, s.nextLease(&coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: corev1.NamespaceNodeLease}}, node), metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating the lease of node %s: %w", name, err)
		}
		s.leases.renewed(name, nil, created)
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the lease of node %s: %w", name, err)
	}
	updated, err := client.Update(ctx, s.nextLease(base, node), metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("renewing the lease of node %s: %w", name, err)
	}
	s.leases.renewed(name, base, updated)
	return nil
}

// nextLease is base renewed now by the kubelet of node, owned by the node
// as the kubelet sets it.
func (s *Simulator) nextLease(base *coordinationv1.Lease, node *corev1.Node) *coordinationv1.Lease {
	l := base.DeepCopy()
	l.Spec.HolderIdentity = ptr.To(node.Name)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(s.opts.LeaseDuration / time.Second))
	l.Spec.RenewTime = &metav1.MicroTime{Time: s.opts.Clock.Now()}
	if len(l.OwnerReferences) == 0 && node.UID != "" {
		l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}
	}
	return l
}

// leaseCollector reports the oldest lease's age when scraped.
type leaseCollector struct{ s *Simulator }

func (c leaseCollector) Describe(ch chan<- *prometheus.Desc) {
	c.s.leases.age.Describe(ch)
	ch <- oldestLeaseDesc
}

func (c leaseCollector) Collect(ch chan<- prometheus.Metric) {
	c.s.leases.age.Collect(ch)
	ch <- prometheus.MustNewConstMetric(oldestLeaseDesc, prometheus.GaugeValue, c.s.leases.oldest(c.s.opts.Clock.Now()).Seconds())
}

// Metrics are the simulated kubelets' own: the age of node leases when
// renewed, and the oldest now.
func (s *Simulator) Metrics() prometheus.Collector { return leaseCollector{s} }
