// Package drain is the node drain capstan's controllers share (the
// Machine API's before a machine goes, the Machine Config Operator's
// before a node reboots): pods are evicted through the Eviction API, so
// PodDisruptionBudgets hold a drain back; DaemonSet pods stay; emptyDir
// data goes; and a drain that does not finish says why.
package drain

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	kdrain "k8s.io/kubectl/pkg/drain"

	"github.com/capstan-dev/capstan/internal/failpoint"
)

// Drainer drains nodes.
type Drainer struct {
	Helper *kdrain.Helper
	errOut *logWriter
}

// New returns a drainer whose attempts last at most timeout (pods not
// gone by then are retried by the next attempt).
func New(ctx context.Context, kube kubernetes.Interface, timeout time.Duration, log klog.Logger) *Drainer {
	errOut := &logWriter{log: log, isErr: true}
	return &Drainer{errOut: errOut, Helper: &kdrain.Helper{
		Ctx:                 ctx,
		Client:              kube,
		Force:               true,
		IgnoreAllDaemonSets: true,
		DeleteEmptyDirData:  true,
		GracePeriodSeconds:  -1,
		Timeout:             timeout,
		OnPodDeletionOrEvictionFinished: func(pod *corev1.Pod, usingEviction bool, err error) {
			if err == nil {
				failpoint.Hit(failpoint.DrainStarted)
				verb := "Deleted"
				if usingEviction {
					verb = "Evicted"
				}
				log.V(2).Info(verb+" pod from node", "pod", klog.KObj(pod), "node", pod.Spec.NodeName)
			}
		},
		Out:    &logWriter{log: log},
		ErrOut: errOut,
	}}
}

// Cordon marks the node unschedulable (or schedulable again).
func (d *Drainer) Cordon(node *corev1.Node, cordon bool) error {
	verb := "cordoning"
	if !cordon {
		verb = "uncordoning"
	}
	if err := kdrain.RunCordonOrUncordon(d.Helper, node, cordon); err != nil {
		return fmt.Errorf("%s node %s: %w", verb, node.Name, err)
	}
	return nil
}

// Evict evicts the pods of a cordoned node; a failure says what the last
// eviction ran into (a disruption budget, typically).
func (d *Drainer) Evict(node string) error {
	if err := kdrain.RunNodeDrain(d.Helper, node); err != nil {
		if last := d.LastError(); last != "" && !strings.Contains(err.Error(), last) {
			return fmt.Errorf("%w (last eviction error: %s)", err, last)
		}
		return err
	}
	return nil
}

// LastError is the last eviction error reported, if any.
func (d *Drainer) LastError() string { return d.errOut.lastError() }

// logWriter passes the drain helper's output to the log, remembering the
// last error it reported.
type logWriter struct {
	log   klog.Logger
	isErr bool
	mu    sync.Mutex
	last  string
}

func (w *logWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	if !w.isErr {
		w.log.V(2).Info(line)
		return len(p), nil
	}
	w.log.Error(nil, line)
	// "error when evicting pods/"x" -n "ns" (will retry after 5s): <why>"
	if _, why, ok := strings.Cut(line, "): "); ok {
		line = why
	}
	w.mu.Lock()
	w.last = line
	w.mu.Unlock()
	return len(p), nil
}

func (w *logWriter) lastError() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// BudgetCovers reports whether a PodDisruptionBudget covers a pod, with
// policy/v1's meaning of its selector: a nil selector covers no pod, an
// empty one ({}) every pod of its namespace, as the eviction API enforces.
func BudgetCovers(pdb *policyv1.PodDisruptionBudget, p *corev1.Pod) bool {
	if pdb.Namespace != p.Namespace {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	return err == nil && sel.Matches(labels.Set(p.Labels))
}
