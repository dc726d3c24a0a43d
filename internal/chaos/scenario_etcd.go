package chaos

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capstan-dev/capstan/internal/etcd"
	"github.com/capstan-dev/capstan/internal/failpoint"
	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/nodes"
	"github.com/capstan-dev/capstan/internal/sim"
)

// etcdMasters is the control plane's size in the etcd scenario.
const etcdMasters = 3

// etcdScenario replaces a dead master, the documented way: its machine is
// stopped, then deleted.
func etcdScenario() *Scenario {
	return &Scenario{
		Name: "etcd",
		Doc: "a dead master replaced: one of 3 control-plane machines stopped, then deleted; the ControlPlaneMachineSet makes one " +
			"replacement, whose member joins once the dead one left: one replacement machine ever made, never more than 3 voting " +
			"members, never fewer than 2 of them healthy while capstan is up, the 3 masters' members healthy at the end (read from etcd)",
		Args:          []string{"--control-plane-nodes", "3", "--nodes", "1"},
		Window:        20 * time.Second,
		Points:        []Point{{failpoint.EtcdAddWritten, 4}, {failpoint.EtcdRemovalWritten, 2}, {failpoint.DrainStarted, 1}},
		Timeout:       settleTime,
		SampleMembers: true,
		Progress:      etcdProgress,
		Check: func(ctx context.Context, r *Run) []Violation {
			out := checkQuorum(r.Members.all(), formedWithoutBootstrap, etcdMasters)
			if made := mastersOf(r.History); len(made) != etcdMasters+1 {
				out = append(out, Violation{"nothing twice", fmt.Sprintf("%d control-plane machines ever made (%v), want %d and one replacement",
					len(made), made, etcdMasters)})
			}
			return out
		},
	}
}

// formedWithoutBootstrap: the masters' members all vote and are healthy,
// and the bootstrap member left.
func formedWithoutBootstrap(s memberSample) bool {
	return len(s.Voting) == etcdMasters && s.Healthy == etcdMasters && s.Learners == 0 && !slices.Contains(s.Voting, etcd.BootstrapName)
}

func etcdProgress(ctx context.Context, r *Run) (bool, string, error) {
	ph, err := phase(ctx, r)
	if err != nil {
		return false, "", err
	}
	mc := r.Machine.MachineV1beta1().Machines(machine.Namespace)
	switch {
	case ph == "":
		if s := r.Members.last(); !formedWithoutBootstrap(s) {
			return false, fmt.Sprintf("waiting for the masters' members: voting %v, %d healthy, %d learners", s.Voting, s.Healthy, s.Learners), nil
		}
		masters, err := masterMachines(ctx, r)
		if err != nil || len(masters) == 0 {
			return false, "no control-plane machine", err
		}
		return false, "stopping " + masters[0].Name, setPhase(ctx, r, "dead:"+masters[0].Name)
	case strings.HasPrefix(ph, "dead:"):
		victim := strings.TrimPrefix(ph, "dead:")
		m, err := mc.Get(ctx, victim, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, "replacing " + victim, setPhase(ctx, r, "replacing:"+victim)
		}
		if err != nil {
			return false, "", err
		}
		if m.Status.NodeRef != nil {
			if err := sim.StopNode(ctx, r.Kube, m.Status.NodeRef.Name); err != nil && !apierrors.IsNotFound(err) {
				return false, "", err
			}
		}
		if err := mc.Delete(ctx, victim, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return false, "", err
		}
		return false, "replacing " + victim, setPhase(ctx, r, "replacing:"+victim)
	}
	victim := strings.TrimPrefix(ph, "replacing:")
	if _, err := mc.Get(ctx, victim, metav1.GetOptions{}); err == nil {
		return false, "the dead machine " + victim + " is still there", nil
	} else if !apierrors.IsNotFound(err) {
		return false, "", err
	}
	masters, err := masterMachines(ctx, r)
	if err != nil {
		return false, "", err
	}
	var names []string
	for _, m := range masters {
		if m.Status.NodeRef == nil {
			return false, "machine " + m.Name + " has no node yet", nil
		}
		n, err := r.Kube.CoreV1().Nodes().Get(ctx, m.Status.NodeRef.Name, metav1.GetOptions{})
		if err != nil || !nodes.Ready(n) {
			return false, "the node of machine " + m.Name + " is not Ready", err
		}
		names = append(names, m.Name)
	}
	s := r.Members.last()
	if len(masters) != etcdMasters || !formedWithoutBootstrap(s) || !slices.Equal(s.Voting, names) {
		return false, fmt.Sprintf("machines %v, voting members %v (%d healthy, %d learners)", names, s.Voting, s.Healthy, s.Learners), nil
	}
	return true, "", nil
}

// masterMachines are the control-plane machines not being deleted, by
// name.
func masterMachines(ctx context.Context, r *Run) ([]machinev1.Machine, error) {
	list, err := r.Machine.MachineV1beta1().Machines(machine.Namespace).List(ctx, metav1.ListOptions{LabelSelector: machine.MachineRoleLabel + "=master"})
	if err != nil {
		return nil, err
	}
	var out []machinev1.Machine
	for _, m := range list.Items {
		if m.DeletionTimestamp.IsZero() {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// mastersOf are the names of every control-plane machine ever made.
func mastersOf(h *History) []string {
	var out []string
	for _, e := range h.Events(machinesKey) {
		m, ok := e.Obj.(*machinev1.Machine)
		if ok && e.Prev == nil && m.Labels[machine.MachineRoleLabel] == "master" && !slices.Contains(out, m.Name) {
			out = append(out, m.Name)
		}
	}
	return out
}
