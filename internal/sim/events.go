package sim

import (
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
)

// ReasonInvalidAnnotation is the reason of the events that report an
// annotation the simulator ignores.
const ReasonInvalidAnnotation = "InvalidAnnotation"

// eventReporter reports, once per object and value, the annotations the
// simulated kubelets ignore, as events from the kubelet of the node.
type eventReporter struct {
	broadcaster record.EventBroadcaster
	mu          sync.Mutex
	reported    map[string]bool
}

func newEventReporter() *eventReporter {
	return &eventReporter{broadcaster: record.NewBroadcaster(), reported: map[string]bool{}}
}

// reportInvalid emits a Warning event on obj for err (an
// InvalidAnnotation), unless the same was reported for the same object.
func (s *Simulator) reportInvalid(obj runtime.Object, host string, err error) {
	m, merr := meta.Accessor(obj)
	if merr != nil {
		return
	}
	key := fmt.Sprintf("%s/%s", m.GetUID(), err.Error())
	r := s.events
	r.mu.Lock()
	seen := r.reported[key]
	r.reported[key] = true
	r.mu.Unlock()
	if seen {
		return
	}
	rec := r.broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kubelet", Host: host})
	rec.Event(obj, corev1.EventTypeWarning, ReasonInvalidAnnotation, err.Error())
}
