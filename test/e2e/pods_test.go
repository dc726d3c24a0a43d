package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/testenv"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/sim"
)

func boundPod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName:       node,
			Containers:     []corev1.Container{{Name: "app", Image: "registry.example/app:1"}, {Name: "sidecar", Image: "registry.example/sidecar:1"}},
			InitContainers: []corev1.Container{{Name: "init", Image: "registry.example/init:1"}},
		},
	}
}

func TestPodBoundToNodeRuns(t *testing.T) {
	ns := env.Namespace(t, "run")
	ctx := context.Background()
	if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, boundPod("web", "worker-0"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := env.WaitPodRunning(t, ns, "web")
	node := env.GetNode(t, "worker-0")
	if pod.Status.HostIP != node.Status.Addresses[0].Address {
		t.Errorf("hostIP %s, want the node's %s", pod.Status.HostIP, node.Status.Addresses[0].Address)
	}
	ip, err := netip.ParseAddr(pod.Status.PodIP)
	if err != nil {
		t.Fatalf("podIP %q: %v", pod.Status.PodIP, err)
	}
	if cidr := netip.MustParsePrefix(node.Spec.PodCIDR); !cidr.Contains(ip) {
		t.Errorf("podIP %s outside node pod CIDR %s", ip, cidr)
	}
	for _, c := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		if !testenv.PodConditionTrue(pod, c) {
			t.Errorf("condition %s not True: %v", c, pod.Status.Conditions)
		}
	}
	if len(pod.Status.ContainerStatuses) != 2 {
		t.Fatalf("container statuses %v", pod.Status.ContainerStatuses)
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if !cs.Ready || cs.State.Running == nil || cs.Image == "" {
			t.Errorf("container %s: ready=%v state=%v image=%q", cs.Name, cs.Ready, cs.State, cs.Image)
		}
	}
	if len(pod.Status.InitContainerStatuses) != 1 || pod.Status.InitContainerStatuses[0].State.Terminated == nil {
		t.Errorf("init container statuses %v", pod.Status.InitContainerStatuses)
	}

	// The node reports the images of the pods that ran there, with their
	// sizes, so that ImageLocalityPriority has something to weigh.
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		for _, img := range env.GetNode(t, "worker-0").Status.Images {
			if slices.Contains(img.Names, "registry.example/app:1") && img.SizeBytes == sim.ImageSize("registry.example/app:1") {
				return true, ""
			}
		}
		return false, "worker-0 does not report registry.example/app:1"
	})

	// A second pod on the node gets another address.
	if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, boundPod("web2", "worker-0"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if p2 := env.WaitPodRunning(t, ns, "web2"); p2.Status.PodIP == pod.Status.PodIP {
		t.Errorf("two pods share podIP %s", p2.Status.PodIP)
	}
}

func TestPodWithoutNodeStaysPending(t *testing.T) {
	ns := env.Namespace(t, "pending")
	ctx := context.Background()
	p := boundPod("unscheduled", "")
	p.Spec.SchedulerName = "no-such-scheduler"
	if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The simulated kubelets see pods through one informer, in order: once
	// a pod created after it is running, they have seen this one.
	env.CreatePod(t, ns, boundPod("after", "worker-0"))
	env.WaitPodRunning(t, ns, "after")
	got, err := env.Client.CoreV1().Pods(ns).Get(ctx, "unscheduled", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != corev1.PodPending || got.Status.PodIP != "" {
		t.Errorf("pod without a node: phase %s podIP %q, want Pending and no address", got.Status.Phase, got.Status.PodIP)
	}
}

func TestGracefulDeletionHonoursGracePeriod(t *testing.T) {
	ns := env.Namespace(t, "grace")
	ctx := context.Background()
	slow := boundPod("slow", "worker-0")
	slow.Spec.TerminationGracePeriodSeconds = ptr.To[int64](4)
	fast := boundPod("fast", "worker-0")
	fast.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
	fast.Annotations = map[string]string{sim.ShutdownSecondsAnnotation: "0"}
	for _, p := range []*corev1.Pod{slow, fast} {
		if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		env.WaitPodRunning(t, ns, p.Name)
	}
	deleted := time.Now()
	for _, name := range []string{"slow", "fast"} {
		if err := env.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	gone := func(name string) func() (bool, string) {
		return func() (bool, string) {
			_, err := env.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), fmt.Sprintf("pod %s still there (%v)", name, err)
		}
	}
	// A container that exits on SIGTERM goes at once, long grace or not.
	testenv.Eventually(t, 10*time.Second, gone("fast"))
	// One that ignores SIGTERM is terminating until its grace period ends.
	if time.Since(deleted) < 3*time.Second {
		p, err := env.Client.CoreV1().Pods(ns).Get(ctx, "slow", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("pod slow vanished before its 4s grace period: %v", err)
		}
		if p.DeletionTimestamp == nil {
			t.Errorf("pod slow is not terminating")
		}
	}
	testenv.Eventually(t, 20*time.Second, gone("slow"))
	if elapsed := time.Since(deleted); elapsed < 4*time.Second {
		t.Errorf("pod slow removed after %s, before its grace period of 4s", elapsed)
	}
}

func TestPodsOfStoppedNodeRecoverReadiness(t *testing.T) {
	ns := env.Namespace(t, "recover")
	ctx := context.Background()
	if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, boundPod("survivor", "worker-2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.WaitPodRunning(t, ns, "survivor")
	capstanOK(t, "sim", "node", "stop", "worker-2", "--kubeconfig", env.Kubeconfig)
	t.Cleanup(func() { capstan(t, "sim", "node", "start", "worker-2", "--kubeconfig", env.Kubeconfig) })
	// The node lifecycle controller marks the pods of a lost node not ready.
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		p, err := env.Client.CoreV1().Pods(ns).Get(ctx, "survivor", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return !testenv.PodConditionTrue(p, corev1.PodReady), "pod still Ready"
	})
	capstanOK(t, "sim", "node", "start", "worker-2", "--kubeconfig", env.Kubeconfig)
	env.WaitPodRunning(t, ns, "survivor")
}

// Pods that run to completion finish: a Job's pods work for their
// run-seconds and exit 0, and the Job controller sees the Job complete.
func TestJobsRunToCompletion(t *testing.T) {
	ns := env.Namespace(t, "jobs")
	ctx := context.Background()
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "migrate"},
		Spec: batchv1.JobSpec{
			Completions: ptr.To[int32](2),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{sim.RunSecondsAnnotation: "1"}},
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "migrate", Image: "registry.example/migrate:1"}}},
			},
		},
	}
	if _, err := env.Client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		j, err := env.Client.BatchV1().Jobs(ns).Get(ctx, "migrate", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
				return j.Status.Succeeded == 2, fmt.Sprintf("complete with %d succeeded", j.Status.Succeeded)
			}
		}
		return false, fmt.Sprintf("job not complete: %d active, %d succeeded", j.Status.Active, j.Status.Succeeded)
	})
	pods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=migrate"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		term := p.Status.ContainerStatuses[0].State.Terminated
		if p.Status.Phase != corev1.PodSucceeded || term == nil || term.ExitCode != 0 || term.Reason != "Completed" {
			t.Errorf("pod %s: phase %s, container %+v", p.Name, p.Status.Phase, p.Status.ContainerStatuses[0].State)
			continue
		}
		// It worked for its run-seconds (times are whole seconds).
		if d := term.FinishedAt.Sub(term.StartedAt.Time); d < time.Second {
			t.Errorf("pod %s ran %s, want at least its run-seconds 1s", p.Name, d)
		}
	}
	// A plain pod that runs once, without the annotation, finishes at once.
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "once"}, Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyOnFailure,
		Containers: []corev1.Container{{Name: "c", Image: "registry.example/once:1"}}}}
	env.CreatePod(t, ns, p)
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		got := env.GetPod(t, ns, "once")
		return got != nil && got.Status.Phase == corev1.PodSucceeded, "pod once not Succeeded"
	})
}
