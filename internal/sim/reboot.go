package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// A reboot of a node's machine: while RebootingAnnotation is "true" the
// kubelet reports NotReady ("node is rebooting") and runs no pod; when it
// is removed the node comes back with a new boot ID (BootAnnotation counts
// its boots), and every container that ran on it before is restarted, as
// the kubelet restarts a node's pods after a reboot.
const (
	RebootingAnnotation = "sim.capstan.dev/rebooting"
	BootAnnotation      = "sim.capstan.dev/boot"
)

// StartReboot takes a node's machine down for a reboot.
func StartReboot(ctx context.Context, client kubernetes.Interface, name string) error {
	return annotateNode(ctx, client, name, map[string]*string{RebootingAnnotation: strPtr("true")})
}

// FinishReboot brings a rebooting node back up in its next boot; it does
// nothing to a node that is not rebooting, so it can be called again after
// a crash without rebooting the node twice.
func FinishReboot(ctx context.Context, client kubernetes.Interface, name string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading node %s: %w", name, err)
		}
		if !Rebooting(node) {
			return nil
		}
		next := strconv.Itoa(Boot(node) + 1)
		// The node's resourceVersion makes the two changes one step: a
		// caller racing this one gets a conflict, not a second boot.
		raw, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": node.ResourceVersion,
			"annotations": map[string]*string{RebootingAnnotation: nil, BootAnnotation: &next}}})
		if err != nil {
			return err
		}
		_, err = client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, raw, metav1.PatchOptions{})
		return err
	})
}

// Rebooting reports whether a node's machine is rebooting.
func Rebooting(node *corev1.Node) bool { return node.Annotations[RebootingAnnotation] == "true" }

// Boot is how many times a node has rebooted.
func Boot(node *corev1.Node) int {
	n, err := strconv.Atoi(node.Annotations[BootAnnotation])
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// containerID names a container of a pod in one boot of its node.
func containerID(pod *corev1.Pod, container string, boot int) string {
	id := "capstan-sim://" + string(pod.UID) + "/" + container
	if boot > 0 {
		id += "/" + strconv.Itoa(boot)
	}
	return id
}

// PowerCycle starts a hard reboot of a node's machine, as a remediator
// that fences a host does: a hung kubelet and the conditions injected as
// faults are gone when it comes back (FinishReboot).
func PowerCycle(ctx context.Context, client kubernetes.Interface, name string) error {
	node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading node %s: %w", name, err)
	}
	ann := map[string]*string{RebootingAnnotation: strPtr("true"), StoppedAnnotation: nil}
	for k := range node.Annotations {
		if strings.HasPrefix(k, ConditionAnnotationPrefix) {
			ann[k] = nil
		}
	}
	return annotateNode(ctx, client, name, ann)
}
