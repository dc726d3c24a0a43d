package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	k8stesting "k8s.io/client-go/testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
)

// apiserverClient is a fake clientset that stamps creation times, as the
// apiserver does: the cloud tells fresh index claims from stale ones by
// them.
func apiserverClient(objs ...runtime.Object) *fake.Clientset {
	client := fake.NewClientset(objs...)
	client.PrependReactor("create", "*", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if o, ok := action.(k8stesting.CreateAction).GetObject().(metav1.Object); ok && o.GetCreationTimestamp().Time.IsZero() {
			o.SetCreationTimestamp(metav1.Now())
		}
		return false, nil, nil
	})
	return client
}

func spec(name string) InstanceSpec {
	return InstanceSpec{Name: name, CPU: resource.MustParse("1"), Memory: resource.MustParse("1Gi"), Pods: 10}
}

// Two processes serving one cloud (capstan up, and `capstan sim node add`
// beside it) create instances at the same time: every instance gets its
// own index, so no address or pod range is handed out twice.
func TestTwoCloudsNeverShareAnIndex(t *testing.T) {
	client := apiserverClient()
	ctx := context.Background()
	clouds := []*APICloud{NewAPICloud(client, CloudOptions{}), NewAPICloud(client, CloudOptions{})}
	// Both have looked at the (empty) cloud before either creates.
	for _, c := range clouds {
		if _, err := c.ListInstances(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	ips := map[string]string{}
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			inst, err := clouds[i%2].CreateInstance(ctx, spec(fmt.Sprintf("n-%02d", i)))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if other, dup := ips[inst.InternalIP]; dup {
				t.Errorf("%s and %s share %s", other, inst.Name(), inst.InternalIP)
			}
			ips[inst.InternalIP] = inst.Name()
		})
	}
	wg.Wait()
	// A deleted instance gives its index back: to the cloud that deleted
	// it, and to any that looks afresh.
	first, err := clouds[0].GetInstance(ctx, "n-00")
	if err != nil {
		t.Fatal(err)
	}
	if err := clouds[0].DeleteInstance(ctx, "n-00"); err != nil {
		t.Fatal(err)
	}
	inst, err := clouds[0].CreateInstance(ctx, spec("again"))
	if err != nil || inst.Index != first.Index {
		t.Fatalf("new instance: %v, %v; want the freed index %d", inst, err, first.Index)
	}
	if err := clouds[0].DeleteInstance(ctx, "again"); err != nil {
		t.Fatal(err)
	}
	inst, err = NewAPICloud(client, CloudOptions{}).CreateInstance(ctx, spec("fresh"))
	if err != nil || inst.Index != first.Index {
		t.Fatalf("instance of a new process: %v, %v; want the freed index %d", inst, err, first.Index)
	}
}

// A claim left by a process that died before creating its instance is
// taken back once it is old enough, never before.
func TestStaleIndexClaimsAreTakenBack(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	claim := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: indexClaimName(0), Namespace: Namespace,
		Labels: map[string]string{IndexClaimLabel: "true"}, CreationTimestamp: metav1.NewTime(now)},
		Data: map[string]string{indexClaimInstanceKey: "never-created"}}
	client := apiserverClient(claim)
	clock := clocktesting.NewFakeClock(now.Add(10 * time.Second))
	inst, err := NewAPICloud(client, CloudOptions{Clock: clock}).CreateInstance(ctx, spec("young"))
	if err != nil || inst.Index != 1 {
		t.Fatalf("with a fresh claim on 0: index %v, %v; want 1", inst, err)
	}
	clock.Step(staleClaimAge)
	inst, err = NewAPICloud(client, CloudOptions{Clock: clock}).CreateInstance(ctx, spec("later"))
	if err != nil || inst.Index != 0 {
		t.Fatalf("with a stale claim on 0: index %v, %v; want 0", inst, err)
	}
}

// Instances of a data dir from before index claims keep their indexes.
func TestInstancesWithoutClaimsKeepTheirIndexes(t *testing.T) {
	ctx := context.Background()
	old := &Instance{Spec: spec("old").WithDefaults(), Index: 0, InternalIP: nodeIP(0).String(), PodCIDR: podCIDR(0).String()}
	cm, err := instanceToConfigMap(old)
	if err != nil {
		t.Fatal(err)
	}
	client := apiserverClient(cm)
	inst, err := NewAPICloud(client, CloudOptions{}).CreateInstance(ctx, spec("new"))
	if err != nil || inst.Index == 0 {
		t.Fatalf("new instance: %v, %v; want an index other than the old instance's 0", inst, err)
	}
}

// A kubelet's status is computed from the node it last saw: once the node
// has changed (its reboot ended), that status is not written over the
// change. The reactor refuses a patch whose resourceVersion is not the
// node's, as the apiserver does.
func TestAStatusFromAnOlderNodeIsNotWritten(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "u", ResourceVersion: "1",
		Annotations: map[string]string{RebootingAnnotation: "true"}}}
	client := fake.NewClientset(node)
	client.PrependReactor("patch", "nodes", func(action k8stesting.Action) (bool, runtime.Object, error) {
		var meta struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(action.(k8stesting.PatchAction).GetPatch(), &meta); err != nil {
			return true, nil, err
		}
		current, err := client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("nodes"), "", "n")
		if err != nil {
			return true, nil, err
		}
		if rv := meta.Metadata.ResourceVersion; rv != "" && rv != current.(*corev1.Node).ResourceVersion {
			return true, nil, apierrors.NewConflict(corev1.Resource("nodes"), "n", fmt.Errorf("resourceVersion %s is not %s", rv, current.(*corev1.Node).ResourceVersion))
		}
		return false, nil, nil
	})
	seen := node.DeepCopy()
	// The reboot ends: a newer version of the node.
	finished := node.DeepCopy()
	delete(finished.Annotations, RebootingAnnotation)
	finished.ResourceVersion = "2"
	finished.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}
	if err := client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), finished, ""); err != nil {
		t.Fatal(err)
	}
	stale := &corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady", Message: "node is rebooting"}}}
	err := postNodeStatus(context.Background(), client, seen, stale)
	if !apierrors.IsConflict(err) {
		t.Fatalf("writing a status computed from version 1 over version 2: %v, want a conflict", err)
	}
	got, err := client.CoreV1().Nodes().Get(context.Background(), "n", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := got.Status.Conditions; len(c) != 1 || c[0].Status != corev1.ConditionTrue {
		t.Fatalf("the node's Ready condition is %+v, want the newer True", c)
	}
	// From the current version it is written.
	if err := postNodeStatus(context.Background(), client, got, stale); err != nil {
		t.Fatalf("writing a status computed from the current version: %v", err)
	}
}

// A machine's create is idempotent only through its client token: the
// same token answers the instance launched, none launches another under a
// host name of its own, tagged with the machine; the cloud names each
// instance with an ID of its own, which its provider ID ends with.
func TestACreateWithoutItsClientTokenLaunchesAgain(t *testing.T) {
	client := apiserverClient()
	ctx := context.Background()
	c := NewAPICloud(client, CloudOptions{})
	s := spec("m-1")
	s.Machine, s.ClientToken = "m-1", "uid-1"
	first, err := c.CreateInstance(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if first.ID == "" || !strings.HasSuffix(first.ProviderID, "/"+first.ID) || first.Name() != "m-1" {
		t.Fatalf("instance %s, ID %q, provider ID %q", first.Name(), first.ID, first.ProviderID)
	}
	again, err := c.CreateInstance(ctx, s)
	if err != nil || again.ID != first.ID {
		t.Fatalf("the same create again: %v, %v; want instance %s", again, err, first.ID)
	}
	s.ClientToken = ""
	second, err := c.CreateInstance(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if second.ID == first.ID || second.Name() == "m-1" || !strings.HasPrefix(second.Name(), "m-1-") {
		t.Fatalf("a create without its token launched %s (%s), want another instance beside m-1 (%s)", second.Name(), second.ID, first.ID)
	}
	list, err := client.CoreV1().ConfigMaps(Namespace).List(ctx, metav1.ListOptions{LabelSelector: MachineLabel + "=m-1"})
	if err != nil || len(list.Items) != 2 {
		t.Fatalf("instances tagged with machine m-1: %v, %v; want 2", list, err)
	}
	// Another machine's token on a taken name is refused, as before.
	s.ClientToken = "uid-2"
	var ie *InstanceError
	if _, err := c.CreateInstance(ctx, s); !errors.As(err, &ie) || ie.Reason != ReasonAlreadyExists {
		t.Fatalf("a create of a taken name with another token: %v, want %s", err, ReasonAlreadyExists)
	}
}

// The cloud's owner (capstan up, capstan sim) publishes its delays, and a
// Machine API run as a process of its own launches and terminates with
// them; a client given delays of its own keeps them.
func TestEveryClientBootsAndTerminatesWithTheCloudsDelays(t *testing.T) {
	client := apiserverClient()
	ctx := context.Background()
	owner := NewAPICloud(client, CloudOptions{BootDelay: time.Minute, TerminateDelay: 30 * time.Second})
	other := NewAPICloud(client, CloudOptions{})
	inst, err := other.CreateInstance(ctx, spec("before"))
	if err != nil {
		t.Fatal(err)
	}
	if !inst.BootedAt.Equal(inst.LaunchTime) {
		t.Errorf("with no settings published, booted at %s, launched at %s; want at once", inst.BootedAt, inst.LaunchTime)
	}
	if err := owner.PublishSettings(ctx); err != nil {
		t.Fatal(err)
	}
	inst, err = other.CreateInstance(ctx, spec("after"))
	if err != nil {
		t.Fatal(err)
	}
	if got := inst.BootedAt.Sub(inst.LaunchTime); got != time.Minute {
		t.Errorf("a client of the cloud boots its instance in %s; want the owner's 1m0s", got)
	}
	if err := other.DeleteInstance(ctx, "after"); err != nil {
		t.Fatal(err)
	}
	gone, err := other.GetInstance(ctx, "after")
	if err != nil || gone.TerminateAt == nil || gone.TerminateAt.Sub(inst.LaunchTime) < 30*time.Second {
		t.Errorf("deleted by a client of the cloud: %+v, %v; want it shutting down for the owner's 30s", gone, err)
	}
	own := NewAPICloud(client, CloudOptions{BootDelay: time.Second})
	inst, err = own.CreateInstance(ctx, spec("own"))
	if err != nil {
		t.Fatal(err)
	}
	if got := inst.BootedAt.Sub(inst.LaunchTime); got != time.Second {
		t.Errorf("a client given a boot delay boots in %s; want its own 1s", got)
	}
	// A later owner's settings replace the earlier's.
	if err := NewAPICloud(client, CloudOptions{BootDelay: 2 * time.Minute}).PublishSettings(ctx); err != nil {
		t.Fatal(err)
	}
	if boot, _, err := other.delays(ctx); err != nil || boot != 2*time.Minute {
		t.Errorf("after a second owner published 2m: %s, %v", boot, err)
	}
}
