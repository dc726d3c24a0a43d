package updateservice

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// EventComponent is the source of the service's events.
const EventComponent = "capstan-update-service"

// RecordSkips records a warning event on the object (the cluster's
// ClusterVersion), once each, for every image of the repository the
// graph leaves out, so whoever looks at the cluster's events sees it,
// until ctx ends.
func (s *Service) RecordSkips(ctx context.Context, kube kubernetes.Interface, on *corev1.ObjectReference) {
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	r := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: EventComponent})
	s.OnSkip(func(msg string) {
		r.Event(on, corev1.EventTypeWarning, SkippedImageReason, msg)
	})
	go func() {
		<-ctx.Done()
		b.Shutdown()
	}()
}
