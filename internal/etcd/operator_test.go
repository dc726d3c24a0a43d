package etcd

import (
	"context"
	"errors"
	"strings"
	"testing"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	machinefake "github.com/openshift/client-go/machine/clientset/versioned/fake"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/capstan-dev/capstan/internal/machine"
)

type instances map[string]bool

func (i instances) InstanceExists(_ context.Context, name string) (bool, error) {
	exists, ok := i[name]
	if !ok {
		return false, errors.New("the cloud did not answer")
	}
	return exists, nil
}

// H1 of the etcd review: only NotFound says a node or an instance is
// gone. Any other failure ends the look, so that no member is stopped or
// removed on a guess.
func TestOnlyNotFoundMeansGone(t *testing.T) {
	ctx := context.Background()
	master := func(name string, deleting bool) *machinev1.Machine {
		m := &machinev1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: machine.Namespace,
			Labels: map[string]string{machine.MachineRoleLabel: "master"}},
			Status: machinev1.MachineStatus{NodeRef: &corev1.ObjectReference{Name: name}}}
		if deleting {
			now := metav1.Now()
			m.DeletionTimestamp, m.Finalizers = &now, []string{"machine.machine.openshift.io"}
		}
		return m
	}
	kube := kubefake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "m-0"}})
	o := &Operator{Kube: kube, Machines: machinefake.NewClientset(master("m-0", false), master("m-1", true), master("m-2", true))}

	machines, err := o.controlPlaneMachines(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if machines[0].node == nil || machines[1].node != nil {
		t.Fatalf("m-0's node %v (want it), m-1's %v (NotFound: none)", machines[0].node, machines[1].node)
	}
	// A throttled read is no missing node.
	kube.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewTooManyRequests("the API server is busy", 1)
	})
	if _, err := o.controlPlaneMachines(ctx); err == nil || !apierrors.IsTooManyRequests(errors.Unwrap(err)) {
		t.Errorf("a throttled node read: %v, want the tick to end with it", err)
	}

	// A deleting machine's member stops once its instance is gone, by
	// the cloud's word; without an answer nothing is decided.
	o.Instances = instances{"m-1": false, "m-2": true}
	for _, tc := range []struct {
		cm       controlPlaneMachine
		down     bool
		failWith string
	}{
		{cm: machines[1], down: true},
		{cm: controlPlaneMachine{m: master("m-2", true), deleting: true}, down: false},
		{cm: controlPlaneMachine{m: master("m-3", true), deleting: true}, failWith: "did not answer"},
		{cm: machines[0], down: false},
	} {
		down, err := o.instanceDown(ctx, tc.cm)
		switch {
		case tc.failWith != "":
			if err == nil || !strings.Contains(err.Error(), tc.failWith) {
				t.Errorf("%s: %v, %v; want the cloud's failure", tc.cm.m.Name, down, err)
			}
		case err != nil || down != tc.down:
			t.Errorf("%s: instance down %v, %v; want %v", tc.cm.m.Name, down, err, tc.down)
		}
	}
}
