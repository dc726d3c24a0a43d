package machine

import (
	"fmt"
	"math"
	"sort"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
)

// Delete priorities of a MachineSet scale-down: the highest go first.
type deletePriority float64

const (
	mustDelete    deletePriority = 100
	betterDelete  deletePriority = 50
	preferDelete  deletePriority = 40
	couldDelete   deletePriority = 20
	mustNotDelete deletePriority = 0

	// Ages map onto 0..100 with this time constant.
	secondsPerTenDays = 864000
)

type deletePriorityFunc func(m *machinev1.Machine, now time.Time) deletePriority

func markedForDeletion(m *machinev1.Machine) bool {
	return m.Annotations[DeleteMachineAnnotation] != "" || m.Annotations[oldDeleteMachineAnnotation] != ""
}

func hasFailed(m *machinev1.Machine) bool {
	return m.Status.ErrorReason != nil || m.Status.ErrorMessage != nil
}

// oldestDeletePriority prefers the oldest machines.
func oldestDeletePriority(m *machinev1.Machine, now time.Time) deletePriority {
	switch {
	case !m.DeletionTimestamp.IsZero(), markedForDeletion(m), hasFailed(m):
		return mustDelete
	case m.CreationTimestamp.IsZero():
		return mustNotDelete
	}
	age := now.Sub(m.CreationTimestamp.Time)
	if age < 0 {
		return mustNotDelete
	}
	return deletePriority(float64(mustDelete) * (1 - math.Exp(-age.Seconds()/secondsPerTenDays)))
}

// newestDeletePriority prefers the newest machines.
func newestDeletePriority(m *machinev1.Machine, now time.Time) deletePriority {
	if !m.DeletionTimestamp.IsZero() || markedForDeletion(m) || hasFailed(m) {
		return mustDelete
	}
	return mustDelete - oldestDeletePriority(m, now)
}

// randomDeletePriority prefers marked, failed and node-less machines, and
// is indifferent among the rest.
func randomDeletePriority(m *machinev1.Machine, _ time.Time) deletePriority {
	switch {
	case !m.DeletionTimestamp.IsZero():
		return mustDelete
	case markedForDeletion(m), hasFailed(m):
		return betterDelete
	case m.Status.NodeRef == nil:
		// No node yet: no workload either.
		return preferDelete
	}
	return couldDelete
}

func deletePriorityFor(ms *machinev1.MachineSet) (deletePriorityFunc, error) {
	switch p := machinev1.MachineSetDeletePolicy(ms.Spec.DeletePolicy); p {
	case machinev1.RandomMachineSetDeletePolicy, "":
		return randomDeletePriority, nil
	case machinev1.NewestMachineSetDeletePolicy:
		return newestDeletePriority, nil
	case machinev1.OldestMachineSetDeletePolicy:
		return oldestDeletePriority, nil
	default:
		return nil, fmt.Errorf("unsupported delete policy %q: must be one of Random, Newest or Oldest", p)
	}
}

// machinesToDelete picks n machines by priority, highest first; machines
// of equal priority keep their order (the caller shuffles for Random).
func machinesToDelete(machines []*machinev1.Machine, n int, prio deletePriorityFunc, now time.Time) []*machinev1.Machine {
	if n <= 0 {
		return nil
	}
	if n >= len(machines) {
		return machines
	}
	sorted := append([]*machinev1.Machine(nil), machines...)
	sort.SliceStable(sorted, func(i, j int) bool { return prio(sorted[i], now) > prio(sorted[j], now) })
	return sorted[:n]
}
