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
)

// Bugs are every bug that can be planted.
var Bugs = []Bug{
	{ScaleUpTwice, "the autoscaler forgets the nodes it is waiting for (upcoming nodes) and scales up again for the same pending pods",
		"autoscaler", "replicas"},
	{CreateNotIdempotent, "the machine actuator launches an instance without its client token, so a create retried after its answer was lost launches a second instance",
		"machineset-cloud", "instances"},
	{OneMoreUnavailable, "the MCO's node controller takes one node more out of service than maxUnavailable allows",
		"mco", "maxUnavailable"},
	{RemoveBeforeAdd, "the etcd operator removes a deleting master's healthy member before its replacement votes",
		"etcd-two", "etcd members healthy"},
	{IgnorePreDrainHook, "the machine controller drains and terminates a machine while a preDrain hook holds it",
		"autoscaler", "hooks"},
	{UpdateTwice, "the CVO, started again in the middle of an update, records the update a second time in the history",
		"update", "history"},
	{RevertUserEdit, "the MCO sets a pool's maxUnavailable back to its default, once, after the user set it",
		"mco", "user intent"},
	{RestoreOnStart, "capstan up, started again, restores etcd from the snapshot it saved when it was last up, dropping every write acknowledged since",
		"machineset", "acknowledged writes"},
}

var (
	allowed atomic.Bool
	planted = map[string]bool{}
)

func init() {
	for _, name := range strings.Split(os.Getenv(Env), ",") {
		if name = strings.TrimSpace(name); name != "" {
			planted[name] = true
		}
	}
}

// Allow has this binary honour Env: only test builds call it.
func Allow() error {
	for name := range planted {
		if !Known(name) {
			return fmt.Errorf("%s: %q is not a bug that can be planted (known: %s)", Env, name, strings.Join(names(), ", "))
		}
	}
	allowed.Store(true)
	return nil
}

// On reports whether bug name is planted in this process.
func On(name string) bool {
	return allowed.Load() && planted[name]
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
