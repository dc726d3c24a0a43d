package hooks

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The example hook controllers of the lifecycle-hooks chapter, as run by
// `capstan hooks run NAME` and `capstan up --hooks`.
const (
	ProactiveReplacementName = "proactive-replacement"
	LogFlushDelayName        = "log-flush-delay"
	StorageDetachName        = "storage-detach"
)

// ExampleConfig parameterises the examples.
type ExampleConfig struct {
	// Selector chooses the machines that get the hook; nil selects all.
	Selector labels.Selector
	// LogFlushDelay is how long log-flush-delay holds a drained machine.
	LogFlushDelay time.Duration
}

// Example returns the named example hook.
func Example(name string, cfg ExampleConfig) (*Hook, error) {
	switch name {
	case ProactiveReplacementName:
		return ProactiveReplacement(cfg.Selector), nil
	case LogFlushDelayName:
		return LogFlushDelay(cfg.LogFlushDelay, cfg.Selector), nil
	case StorageDetachName:
		return StorageDetach(cfg.Selector), nil
	}
	return nil, fmt.Errorf("unknown hook controller %q (known: %s)", name, strings.Join(ExampleNames(), ", "))
}

// ExampleNames lists the examples.
func ExampleNames() []string {
	names := []string{ProactiveReplacementName, LogFlushDelayName, StorageDetachName}
	sort.Strings(names)
	return names
}

// pollInterval is how often a holding example looks again at what it
// waits for (changes to the machine itself wake it at once).
const pollInterval = 2 * time.Second

// ProactiveReplacement is a preDrain hook that holds a machine's drain
// until its MachineSet has its full count of Running machines with Ready
// nodes besides it: the replacement joined before the workload moves. A
// machine without a MachineSet has nothing to wait for.
func ProactiveReplacement(sel labels.Selector) *Hook {
	return &Hook{
		Name: "ProactiveReplacement", Owner: "capstan/proactive-replacement", Point: PreDrain, Selector: sel,
		Handle: func(ctx context.Context, c client.Client, m *machinev1.Machine) (Result, error) {
			owner := metav1.GetControllerOf(m)
			if owner == nil || owner.Kind != "MachineSet" {
				return Result{Done: true}, nil
			}
			ms := &machinev1.MachineSet{}
			if err := c.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: owner.Name}, ms); err != nil {
				return Result{}, client.IgnoreNotFound(err)
			}
			list := &machinev1.MachineList{}
			if err := c.List(ctx, list, client.InNamespace(m.Namespace)); err != nil {
				return Result{}, err
			}
			ready := 0
			for i := range list.Items {
				o := &list.Items[i]
				ref := metav1.GetControllerOf(o)
				if ref == nil || ref.UID != ms.UID || !o.DeletionTimestamp.IsZero() ||
					ptr.Deref(o.Status.Phase, "") != machinev1.PhaseRunning || o.Status.NodeRef == nil {
					continue
				}
				node := &corev1.Node{}
				if err := c.Get(ctx, types.NamespacedName{Name: o.Status.NodeRef.Name}, node); err != nil {
					continue
				}
				if nodeReady(node) {
					ready++
				}
			}
			if ready >= int(ptr.Deref(ms.Spec.Replicas, 0)) {
				return Result{Done: true}, nil
			}
			return Result{RequeueAfter: pollInterval}, nil
		},
	}
}

// LogFlushDelay is a preTerminate hook that keeps a drained machine's
// instance for delay, so the log exporter can catch up before it goes.
func LogFlushDelay(delay time.Duration, sel labels.Selector) *Hook {
	return &Hook{
		Name: "LogFlushDelay", Owner: "capstan/log-flush-delay", Point: PreTerminate, Selector: sel,
		Handle: func(_ context.Context, _ client.Client, m *machinev1.Machine) (Result, error) {
			var drainedAt time.Time
			for _, cond := range m.Status.Conditions {
				if cond.Type == machinev1.MachineDrained {
					drainedAt = cond.LastTransitionTime.Time
				}
			}
			if left := time.Until(drainedAt.Add(delay)); left > 0 {
				return Result{RequeueAfter: left}, nil
			}
			return Result{Done: true}, nil
		},
	}
}

// StorageDetach is a preTerminate hook that holds a drained machine's
// instance until no VolumeAttachment references its node.
func StorageDetach(sel labels.Selector) *Hook {
	return &Hook{
		Name: "WaitForStorageDetach", Owner: "capstan/storage-detach", Point: PreTerminate, Selector: sel,
		Handle: func(ctx context.Context, c client.Client, m *machinev1.Machine) (Result, error) {
			if m.Status.NodeRef == nil {
				return Result{Done: true}, nil
			}
			list := &storagev1.VolumeAttachmentList{}
			if err := c.List(ctx, list); err != nil {
				return Result{}, err
			}
			for i := range list.Items {
				if list.Items[i].Spec.NodeName == m.Status.NodeRef.Name {
					return Result{RequeueAfter: pollInterval}, nil
				}
			}
			return Result{Done: true}, nil
		},
	}
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
