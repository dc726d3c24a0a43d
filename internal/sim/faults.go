package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Faults are injected by annotating Nodes, so they work from any client
// (`capstan sim node ...`, kubectl annotate) and outlive restarts.

// StopNode stops the kubelet of a simulated node: it stops renewing its
// lease and posting status, and the node lifecycle controller takes over.
func StopNode(ctx context.Context, client kubernetes.Interface, name string) error {
	return annotateNode(ctx, client, name, map[string]*string{StoppedAnnotation: strPtr("true")})
}

// StartNode restarts a stopped kubelet.
func StartNode(ctx context.Context, client kubernetes.Interface, name string) error {
	return annotateNode(ctx, client, name, map[string]*string{StoppedAnnotation: nil})
}

// SetCondition injects a node condition status. Setting a condition to its
// healthy status removes the fault.
func SetCondition(ctx context.Context, client kubernetes.Interface, name string, t corev1.NodeConditionType, status corev1.ConditionStatus) error {
	if err := ValidateCondition(t, status); err != nil {
		return err
	}
	var v *string
	if status != healthyStatus[t] {
		v = strPtr(string(status))
	}
	return annotateNode(ctx, client, name, map[string]*string{ConditionAnnotationPrefix + string(t): v})
}

// ParseCondition parses TYPE=STATUS, e.g. MemoryPressure=True.
func ParseCondition(s string) (corev1.NodeConditionType, corev1.ConditionStatus, error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return "", "", fmt.Errorf("condition %q is not TYPE=STATUS (e.g. MemoryPressure=True)", s)
	}
	t, st := corev1.NodeConditionType(k), corev1.ConditionStatus(v)
	return t, st, ValidateCondition(t, st)
}

// ValidateCondition accepts the conditions and statuses a kubelet reports.
func ValidateCondition(t corev1.NodeConditionType, status corev1.ConditionStatus) error {
	if _, ok := healthyStatus[t]; !ok {
		names := make([]string, 0, len(InjectableConditions))
		for _, c := range InjectableConditions {
			names = append(names, string(c))
		}
		return fmt.Errorf("condition %q cannot be injected: use one of %s", t, strings.Join(names, ", "))
	}
	switch status {
	case corev1.ConditionTrue, corev1.ConditionFalse:
		return nil
	case corev1.ConditionUnknown:
		return fmt.Errorf("condition %s=Unknown is set by the node lifecycle controller, not a kubelet: use `capstan sim node stop` instead", t)
	default:
		return fmt.Errorf("condition status %q for %s must be True or False", status, t)
	}
}

func annotateNode(ctx context.Context, client kubernetes.Interface, name string, ann map[string]*string) error {
	node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("node %q not found", name)
	}
	if err != nil {
		return fmt.Errorf("reading node %s: %w", name, err)
	}
	if node.Annotations[NodeInstanceAnnotation] == "" {
		return fmt.Errorf("node %s is not simulated by capstan (no %s annotation)", name, NodeInstanceAnnotation)
	}
	return patchNode(ctx, client, name, map[string]any{"metadata": map[string]any{"annotations": ann}})
}

func patchNode(ctx context.Context, client kubernetes.Interface, name string, patch map[string]any) error {
	raw, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	if _, err := client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, raw, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("annotating node %s: %w", name, err)
	}
	return nil
}

// FaultKeepsNotReady reports whether an injected fault keeps the node from
// being Ready.
func FaultKeepsNotReady(node *corev1.Node) bool {
	return Stopped(node) || Rebooting(node) || InjectedConditions(node)[corev1.NodeReady] == corev1.ConditionFalse
}

func strPtr(s string) *string { return &s }

// InjectedConditions reads the condition faults annotated on a node; an
// annotation that is not a valid fault is left out (see InvalidFaults).
func InjectedConditions(node *corev1.Node) map[corev1.NodeConditionType]corev1.ConditionStatus {
	out := map[corev1.NodeConditionType]corev1.ConditionStatus{}
	for k, v := range node.Annotations {
		if t, ok := strings.CutPrefix(k, ConditionAnnotationPrefix); ok {
			if ValidateCondition(corev1.NodeConditionType(t), corev1.ConditionStatus(v)) == nil {
				out[corev1.NodeConditionType(t)] = corev1.ConditionStatus(v)
			}
		}
	}
	return out
}

// InvalidAnnotation is an annotation the simulator cannot use: it is
// ignored, whole, and reported.
type InvalidAnnotation struct {
	Key, Value string
	Err        error
}

func (a InvalidAnnotation) Error() string {
	return fmt.Sprintf("annotation %s=%q ignored: %v", a.Key, a.Value, a.Err)
}

// InvalidFaults lists the fault annotations of a node that are not valid:
// condition faults of an unknown type or status, and a stopped annotation
// other than "true".
func InvalidFaults(node *corev1.Node) []InvalidAnnotation {
	var out []InvalidAnnotation
	for k, v := range node.Annotations {
		if t, ok := strings.CutPrefix(k, ConditionAnnotationPrefix); ok {
			if err := ValidateCondition(corev1.NodeConditionType(t), corev1.ConditionStatus(v)); err != nil {
				out = append(out, InvalidAnnotation{Key: k, Value: v, Err: err})
			}
		}
	}
	if v, ok := node.Annotations[StoppedAnnotation]; ok && v != "true" {
		out = append(out, InvalidAnnotation{Key: StoppedAnnotation, Value: v, Err: errors.New(`only "true" stops the kubelet; remove the annotation to start it`)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// ShutdownDelay reads a pod's shutdown-seconds annotation: how long its
// simulated containers take to exit after SIGTERM. ok is false without
// the annotation; an invalid value is an error (and is ignored).
func ShutdownDelay(pod *corev1.Pod) (d time.Duration, ok bool, err error) {
	return secondsAnnotation(pod, ShutdownSecondsAnnotation)
}

// RunDuration reads a run-to-completion pod's sim.capstan.dev/run-seconds
// (0 when absent or invalid; an invalid value is also an error).
func RunDuration(pod *corev1.Pod) (time.Duration, error) {
	d, _, err := secondsAnnotation(pod, RunSecondsAnnotation)
	return d, err
}

// maxSeconds is the most seconds a time.Duration holds.
const maxSeconds = float64(math.MaxInt64 / int64(time.Second))

// secondsAnnotation reads an annotation of a number of seconds, 0 or more.
func secondsAnnotation(pod *corev1.Pod, key string) (d time.Duration, ok bool, err error) {
	v, ok := pod.Annotations[key]
	if !ok {
		return 0, false, nil
	}
	secs, perr := strconv.ParseFloat(strings.TrimSpace(v), 64)
	// NaN and infinities fail the range check; so does a number of
	// seconds too large for a time.Duration, which would wrap negative.
	if perr != nil || !(secs >= 0 && secs <= maxSeconds) {
		return 0, false, InvalidAnnotation{Key: key, Value: v, Err: fmt.Errorf("want a number of seconds, 0 to %d", int64(maxSeconds))}
	}
	return time.Duration(secs * float64(time.Second)), true, nil
}
