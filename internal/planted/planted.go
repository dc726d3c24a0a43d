// Package planted holds the defects a fault campaign must catch: each
// one a bug capstan could have (a scale-up made twice, a member removed
// before its replacement votes, ...), written into the code it would be
// in, behind a switch. A test build switches one on through the
// environment, CAPSTAN_PLANTED_BUGS=NAME[,NAME], and runs the campaign
// to show that an invariant reports it: a campaign that stays green with
// a bug planted proves nothing.
//
// Only a binary that calls Allow honours the environment: capstan's
// test binaries do, the capstan command never does, so a production
// build ignores the variable whatever it says. Off, On costs one atomic
// load.
package planted

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
)

// Env names the bugs to plant, comma-separated.
const Env = "CAPSTAN_PLANTED_BUGS"

// Bug is a defect that can be planted, the scenario that shows it and
// the invariant that must report it.
type Bug struct {
	Name      string
	Doc       string
	Scenario  string
	Invariant string
	// InCampaign: the bug is in the campaign's own checks (its clients,
	// its history of the storage), planted in the process that runs the
	// campaign rather than in capstan up.
	InCampaign bool
	// Window: only a kill between two particular writes shows the bug
	// (a crash window): the scenario runs clean with the bug planted and
	// no kill, and reports it under the every-point plan.
	Window bool
}

// The bugs.
const (
	ScaleUpTwice        = "autoscaler/scale-up-twice"
	CreateNotIdempotent = "machine/create-without-client-token"
	OneMoreUnavailable  = "mco/one-more-unavailable"
	RemoveBeforeAdd     = "etcd/remove-before-add"
	IgnorePreDrainHook  = "machine/ignore-predrain-hook"
	UpdateTwice         = "cvo/update-applied-twice"
	RevertUserEdit      = "mco/revert-max-unavailable"
	RestoreOnStart      = "etcd/restore-on-start"
	StaleReads          = "chaos/stale-reads"
	WatchResumesAtHead  = "chaos/watch-resumes-at-head"
	ReadErrorIsGone     = "etcd/read-error-is-gone"
	GraphDataUnsynced   = "cluster/graph-data-unsynced"
	// Window bugs.
	DrainedBeforeEviction = "machine/drained-before-eviction"
	RebootInTwoWrites     = "mco/reboot-in-two-writes"
	UnavailableInMemory   = "mco/unavailable-in-memory"
	UpcomingInMemory      = "autoscaler/upcoming-in-memory"
)

// Bugs are every bug that can be planted.
var Bugs = []Bug{
	{ScaleUpTwice, "the autoscaler forgets the nodes it is waiting for (upcoming nodes) and scales up again for the same pending pods",
		"autoscaler", "replicas", false, false},
	{CreateNotIdempotent, "the machine actuator launches an instance without its client token, so a create retried after its answer was lost launches a second instance",
		"machineset-cloud", "instances", false, false},
	{OneMoreUnavailable, "the MCO's node controller takes one node more out of service than maxUnavailable allows",
		"mco", "maxUnavailable", false, false},
	{RemoveBeforeAdd, "the etcd operator removes a deleting master's healthy member before its replacement votes",
		"etcd-two", "etcd members healthy", false, false},
	{IgnorePreDrainHook, "the machine controller drains and terminates a machine while a preDrain hook holds it",
		"autoscaler", "hooks", false, false},
	{UpdateTwice, "the CVO, started again in the middle of an update, records the update a second time in the history",
		"update", "history", false, false},
	{RevertUserEdit, "the MCO sets a pool's maxUnavailable back to its default, once, after the user set it",
		"mco", "user intent", false, false},
	{RestoreOnStart, "capstan up, started again, restores etcd from the snapshot it saved when it was last up, dropping every write acknowledged since",
		"machineset", "acknowledged writes", false, false},
	{ReadErrorIsGone, "the etcd operator takes a failed look-up of a deleting master's instance for the instance gone, and stops its healthy member before the replacement votes",
		"etcd-two", "etcd members healthy", false, false},
	{GraphDataUnsynced, "capstan up writes the update service's graph data with plain writes and no sync, as it did before the power scenario found it: a power loss leaves the channel files empty, and capstan never starts again",
		"power", "starts", false, false},
	{StaleReads, "the campaign's clients answer a read from their last read of the object within a second, a read cache that their writes never invalidate",
		"machineset", "linearizable", true, false},
	{WatchResumesAtHead, "the campaign's storage history resumes its watch from the storage's current revision, not from the one after the last it read, as a watch that forgets its revision when it reconnects",
		"machineset", "watch", true, false},
	{DrainedBeforeEviction, "the machine controller records a machine drained (Drained=True) before it evicts the node's pods, so a restart in between terminates the instance with its pods on it",
		"machineset", "drain", false, true},
	{RebootInTwoWrites, "the machine config daemon writes the reboot's post-config action and the machine going down in two writes, so a restart in between finds no reboot under way and never reboots into the configuration",
		"mco", "reboots", false, true},
	{UnavailableInMemory, "the MCO's node controller counts the nodes out of service from its memory of those it targeted, which a restart empties, and targets maxUnavailable more",
		"mco", "maxUnavailable", false, true},
	{UpcomingInMemory, "the autoscaler counts the nodes it is waiting for from its memory of its scale-ups, which a restart empties, and scales up again for the same pods",
		"autoscaler", "replicas", false, true},
}

var (
	allowed atomic.Bool
	// planted is read without a lock: Plant replaces the set whole.
	planted atomic.Pointer[map[string]bool]
)

func init() {
	set := map[string]bool{}
	for _, name := range strings.Split(os.Getenv(Env), ",") {
		if name = strings.TrimSpace(name); name != "" {
			set[name] = true
		}
	}
	planted.Store(&set)
}

// Allow has this binary honour Env: only test builds call it.
func Allow() error {
	for name := range *planted.Load() {
		if !Known(name) {
			return fmt.Errorf("%s: %q is not a bug that can be planted (known: %s)", Env, name, strings.Join(names(), ", "))
		}
	}
	allowed.Store(true)
	return nil
}

// Plant plants a bug in this process, for a test of a campaign whose own
// checks carry it (Bug.InCampaign); the returned func takes it out. Only
// a test binary calls it: it allows planted bugs in this process.
func Plant(name string) (func(), error) {
	if !Known(name) {
		return nil, fmt.Errorf("%q is not a bug that can be planted (known: %s)", name, strings.Join(names(), ", "))
	}
	before := planted.Load()
	set := map[string]bool{name: true}
	for n := range *before {
		set[n] = true
	}
	planted.Store(&set)
	wasAllowed := allowed.Swap(true)
	return func() {
		planted.Store(before)
		allowed.Store(wasAllowed)
	}, nil
}

// On reports whether bug name is planted in this process.
func On(name string) bool {
	return allowed.Load() && (*planted.Load())[name]
}

// Known reports whether name is a bug that can be planted.
func Known(name string) bool {
	return slices.ContainsFunc(Bugs, func(b Bug) bool { return b.Name == name })
}

func names() []string {
	out := make([]string, len(Bugs))
	for i, b := range Bugs {
		out[i] = b.Name
	}
	return out
}
