package e2e

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capstan-dev/capstan/internal/scheduler"
)

// A scheduler that starts (or restarts) picks up every pod waiting for it.
func TestSchedulerPicksUpPendingPodsOnStart(t *testing.T) {
	ns := env.Namespace(t, "restart")
	ctx := context.Background()
	create := func(from, to int) {
		for i := from; i < to; i++ {
			p := simplePod(fmt.Sprintf("p-%d", i), nil)
			p.Spec.SchedulerName = "late-scheduler"
			env.CreatePod(t, ns, p)
		}
	}
	create(0, 5)
	start := func() (stop func()) {
		s, err := scheduler.New(env.Client, scheduler.Config{Name: "late-scheduler"})
		if err != nil {
			t.Fatal(err)
		}
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- s.Run(sctx) }()
		return func() { cancel(); <-done }
	}
	stop := start()
	for i := 0; i < 5; i++ {
		waitScheduled(t, ns, fmt.Sprintf("p-%d", i))
	}
	stop()
	create(5, 10)
	// Pods created after them are scheduled by the default scheduler: the
	// apiserver has delivered every pod event that came before.
	env.CreatePod(t, ns, simplePod("marker", nil))
	waitScheduled(t, ns, "marker")
	for i := 5; i < 10; i++ {
		p, _ := env.Client.CoreV1().Pods(ns).Get(ctx, fmt.Sprintf("p-%d", i), metav1.GetOptions{})
		if p.Spec.NodeName != "" {
			t.Fatalf("p-%d bound while its scheduler was down", i)
		}
	}
	stop = start()
	defer stop()
	for i := 5; i < 10; i++ {
		waitScheduled(t, ns, fmt.Sprintf("p-%d", i))
	}
}

// Two replicas of a leader-elected scheduler: one holds the lease and
// schedules; the pods are bound once.
func TestLeaderElectedSchedulers(t *testing.T) {
	ns := env.Namespace(t, "leader")
	ctx, cancel := context.WithCancel(context.Background())
	var dones []chan error
	for i := 0; i < 2; i++ {
		s, err := scheduler.New(env.Client, scheduler.Config{Name: "ha-scheduler"})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		dones = append(dones, done)
		go func() { done <- s.RunWithLeaderElection(ctx, env.Client) }()
	}
	defer func() {
		cancel()
		for _, d := range dones {
			<-d
		}
	}()
	for i := 0; i < 4; i++ {
		p := simplePod(fmt.Sprintf("ha-%d", i), nil)
		p.Spec.SchedulerName = "ha-scheduler"
		env.CreatePod(t, ns, p)
	}
	for i := 0; i < 4; i++ {
		waitScheduled(t, ns, fmt.Sprintf("ha-%d", i))
	}
	lease, err := env.Client.CoordinationV1().Leases("kube-system").Get(context.Background(), "ha-scheduler", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Fatalf("lease kube-system/ha-scheduler: %v %v", lease, err)
	}
	evs, _ := env.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=Scheduled"})
	seen := map[string]int{}
	for _, e := range evs.Items {
		seen[e.InvolvedObject.Name] += int(e.Count)
	}
	for name, n := range seen {
		if n != 1 {
			t.Errorf("pod %s scheduled %d times", name, n)
		}
	}
}
