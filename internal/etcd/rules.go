package etcd

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/capstan-dev/capstan/internal/planted"
)

// The cluster-etcd-operator's membership rules, as one pure function: the
// operator gathers the control-plane machines and the members, Decide says
// which one change to make, and the operator makes it. One change at a
// time, as upstream does, so that every step is judged on fresh state.
//
// Without a functional Machine API (no control-plane Machine Running: a
// cluster whose masters are not Machines, as kubeadm's or a UPI install)
// the rules cannot tell a member's machine, so they only promote learners
// (clustermembercontroller's shouldPromote) and never remove a member
// (clustermemberremovalcontroller returns early).
//
// With it, the rules, in the order they are tried:
//
//  1. A learner whose machine is being deleted is removed: it does not
//     vote, so this is always safe (attemptToRemoveLearningMember). A
//     learner with no machine at all goes only once it is unhealthy and
//     has no node (removeMemberWithoutMachine): a host may be joining it.
//     A member a host added and has not started yet (Joining) has no
//     machine to tell: rule 2 alone applies to it.
//  2. A learner (or a member added but never started) that is unhealthy,
//     or behind the leader without catching up, for LearnerTimeout since
//     it was added or last made progress, is removed: an add that failed
//     half way must not block every later change. A healthy learner that
//     is catching up is never given up (upstream has no timeout at all).
//  3. A voting member that is unhealthy and whose node is gone, with its
//     machine gone or being deleted, is dead: it is removed. Removing an
//     unhealthy member lowers the quorum and leaves the healthy count as
//     it was (removeUnhealthyMemberWithoutNode).
//  4. A started, healthy learner is promoted when its machine stays and
//     carries the quorum guard hook (shouldPromote), while every voting
//     member but the bootstrap one is healthy (a promotion beside a dead
//     voter makes a larger cluster with the same number alive:
//     reconcileMembers returns on unhealthy members), and only while the
//     voting members whose machines stay are fewer than Desired: a
//     promotion never takes the cluster above its size but to replace a
//     machine being deleted. etcd itself refuses the promotion until the
//     learner has caught up with the leader.
//  5. Scale down (attemptToScaleDown): with at least Desired voting
//     members, one of them on a machine being deleted, at least
//     MinimumTolerableQuorum(Desired) of them healthy, and no unhealthy
//     member whose machine stays: an unhealthy member of a deleting
//     machine goes first; a healthy one goes only while the voting
//     members of machines exceed Desired. While the bootstrap member
//     votes it counts towards the size and the quorum of the first case:
//     a master that dies before the bootstrap member left is removed
//     like any dead master, so its replacement can join.
//  6. The bootstrap member leaves once Desired machine members vote, all
//     of them healthy (the bootstrap teardown controller).
//  7. A learner is added for a running machine that stays, carries the
//     quorum guard hook and has no member, only when every member is
//     healthy and started and no other learner is catching up
//     (clustermembercontroller).
//
// A healthy voting member with no machine is never removed: upstream
// removes a member without a machine only once it has no node and is
// unhealthy (rule 3).

// RuleMachine is a control-plane machine as the rules see it.
type RuleMachine struct {
	Name string
	// Deleting: the Machine has a deletion timestamp.
	Deleting bool
	// Hook: the Machine carries the quorum guard's preDrain hook.
	Hook bool
	// Running: the machine runs (its node is not stopped or rebooting):
	// a member can run on it.
	Running bool
}

// RuleMember is an etcd member as the rules see it.
type RuleMember struct {
	// Name is the member's machine (BootstrapName for the bootstrap
	// member; empty for a member added and never started).
	Name    string
	ID      uint64
	Learner bool
	Started bool
	Healthy bool
	// Node: a Node of the member's machine exists.
	Node bool
	// Added is when the member was added (learners and unstarted members).
	Added time.Time
	// Progressed is when a learner was last seen caught up with the
	// leader or closer to it than before (zero: never).
	Progressed time.Time
	// Joining: added by a host and not started yet, so nameless and of
	// no machine the operator can tell (an etcd capstan does not run):
	// only the learner timeout gives it up.
	Joining bool
}

// votes: a member that counts towards the quorum.
func (m RuleMember) votes() bool { return m.Started && !m.Learner }

// RuleState is what Decide decides on.
type RuleState struct {
	Machines []RuleMachine
	Members  []RuleMember
	// Desired is the control plane's size: the ControlPlaneMachineSet's
	// replicas.
	Desired int
	// MachineAPIFunctional: a control-plane Machine is Running, so the
	// members can be told by their machines (ceohelpers.IsFunctional).
	MachineAPIFunctional bool
	Now                  time.Time
	// LearnerTimeout is how long a learner may stay unhealthy, unstarted
	// or stalled before it is given up.
	LearnerTimeout time.Duration
}

// ActionKind is a change of membership.
type ActionKind string

const (
	ActionNone       ActionKind = ""
	ActionPromote    ActionKind = "Promote"
	ActionAddLearner ActionKind = "AddLearner"
	ActionRemove     ActionKind = "Remove"
)

// Action is the one change Decide chose, with why.
type Action struct {
	Kind ActionKind
	// Member is the member to promote or remove (its name, or for an
	// unstarted member, empty with ID set).
	Member string
	ID     uint64
	// Machine is the machine a learner is added for.
	Machine string
	// Reason is the event reason, Message why, in the operator's words.
	Reason  string
	Message string
}

// MinimumTolerableQuorum is the least number of healthy voting members a
// cluster of size members must keep.
func MinimumTolerableQuorum(members int) (int, error) {
	if members <= 0 {
		return 0, fmt.Errorf("invalid etcd member count: %d", members)
	}
	return members/2 + 1, nil
}

// ruleView is a RuleState sorted and counted once for every rule.
type ruleView struct {
	RuleState
	machines map[string]RuleMachine
	members  []RuleMember
	// voting and healthyVoting are the machines' voting members (the
	// bootstrap member is apart).
	voting, healthyVoting []RuleMember
	// bootstrap is the bootstrap member, when it votes.
	bootstrap *RuleMember
	hasMember map[string]bool
	learning  int
	// allHealthy: every member is started and healthy.
	allHealthy bool
}

func newRuleView(s RuleState) *ruleView {
	v := &ruleView{RuleState: s, machines: map[string]RuleMachine{}, hasMember: map[string]bool{}, allHealthy: true}
	for _, m := range s.Machines {
		v.machines[m.Name] = m
	}
	v.members = slices.Clone(s.Members)
	slices.SortFunc(v.members, func(a, b RuleMember) int { return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID)) })
	for i, m := range v.members {
		v.hasMember[m.Name] = true
		if !m.Healthy || !m.Started {
			v.allHealthy = false
		}
		switch {
		case !m.votes():
			v.learning++
		case m.Name == BootstrapName:
			v.bootstrap = &v.members[i]
		default:
			v.voting = append(v.voting, m)
			if m.Healthy {
				v.healthyVoting = append(v.healthyVoting, m)
			}
		}
	}
	return v
}

// staying counts the machines' voting members whose machines are not
// being deleted (a member without a machine counts: it is not leaving).
func (v *ruleView) staying() int {
	n := 0
	for _, m := range v.voting {
		if mc, ok := v.machines[m.Name]; !ok || !mc.Deleting {
			n++
		}
	}
	return n
}

// unhealthyVoters names the machines' voting members that are unhealthy.
func (v *ruleView) unhealthyVoters() []string {
	var out []string
	for _, m := range v.voting {
		if !m.Healthy {
			out = append(out, m.Name)
		}
	}
	return out
}

func remove(m RuleMember, reason, format string, args ...any) Action {
	return Action{Kind: ActionRemove, Member: m.Name, ID: m.ID, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Decide returns the one membership change to make now, or ActionNone
// with a Message saying what holds it when nothing can be done.
func Decide(s RuleState) (Action, error) {
	if s.Desired <= 0 {
		return Action{}, fmt.Errorf("the desired control-plane size is %d: it must be at least 1", s.Desired)
	}
	v := newRuleView(s)
	if !s.MachineAPIFunctional {
		if act, ok := v.promotion(); ok || act.Message != "" {
			return act, nil
		}
		return Action{Message: "the Machine API is not functional (no control-plane Machine is Running): learners are promoted, no member is added or removed"}, nil
	}
	// The first rule that holds a change says why, unless a later one
	// makes a change.
	hold := ""
	for _, rule := range []func() (Action, bool){v.learnerRemoval, v.deadMember, v.promotion, v.scaleDown, v.bootstrapTeardown, v.addLearner} {
		act, ok := rule()
		if ok {
			return act, nil
		}
		if hold == "" {
			hold = act.Message
		}
	}
	return Action{Message: hold}, nil
}

// learnerRemoval is rules 1 and 2: learners that cannot or did not join.
func (v *ruleView) learnerRemoval() (Action, bool) {
	for _, m := range v.members {
		if m.votes() || m.Name == BootstrapName {
			continue
		}
		if !m.Joining {
			mc, ok := v.machines[m.Name]
			switch {
			case ok && mc.Deleting:
				return remove(m, "ScaleDown", "removing learner member %s: its machine is being deleted", describe(m)), true
			case !ok && !m.Healthy && !m.Node:
				return remove(m, "ScaleDown", "removing learner member %s: it has no machine nor node and is unhealthy", describe(m)), true
			}
		}
		since := m.Added
		if m.Progressed.After(since) {
			since = m.Progressed
		}
		if v.LearnerTimeout > 0 && !since.IsZero() && v.Now.Sub(since) >= v.LearnerTimeout {
			what := "it has not joined as a voting member"
			if m.Started && m.Healthy {
				what = "it has not caught up with the leader"
			}
			return remove(m, "ScaleDown", "removing learner member %s: %s within %s", describe(m), what, v.LearnerTimeout), true
		}
	}
	return Action{}, false
}

// deadMember is rule 3.
func (v *ruleView) deadMember() (Action, bool) {
	for _, m := range v.voting {
		mc, ok := v.machines[m.Name]
		if !m.Healthy && !m.Node && (!ok || mc.Deleting) {
			return remove(m, "ScaleDown", "removing member %s: it is unhealthy and its node is gone", describe(m)), true
		}
	}
	return Action{}, false
}

// promotion is rule 4. Without a functional Machine API every learner
// qualifies by itself; the health and size gates hold either way.
func (v *ruleView) promotion() (Action, bool) {
	for _, m := range v.members {
		if !m.Learner || !m.Started || !m.Healthy {
			continue
		}
		if v.MachineAPIFunctional {
			if mc, ok := v.machines[m.Name]; !ok || mc.Deleting || !mc.Hook {
				continue
			}
		}
		if bad := v.unhealthyVoters(); len(bad) > 0 {
			return Action{Message: fmt.Sprintf("not promoting learner member %s: unhealthy voting members found: %v", describe(m), bad)}, false
		}
		if n := v.staying(); n >= v.Desired {
			return Action{Message: fmt.Sprintf("not promoting learner member %s: %d voting members already stay, the desired control-plane size is %d", describe(m), n, v.Desired)}, false
		}
		return Action{Kind: ActionPromote, Member: m.Name, ID: m.ID, Reason: "MemberPromote",
			Message: fmt.Sprintf("promoting learner member %s", describe(m))}, true
	}
	return Action{}, false
}

// scaleDown is rule 5: a removal, or why none.
func (v *ruleView) scaleDown() (Action, bool) {
	quorum, _ := MinimumTolerableQuorum(v.Desired)
	var pendingDeletion []RuleMember
	var unhealthyElsewhere []string
	for _, m := range v.voting {
		mc, ok := v.machines[m.Name]
		switch {
		case ok && mc.Deleting:
			pendingDeletion = append(pendingDeletion, m)
		case !m.Healthy:
			unhealthyElsewhere = append(unhealthyElsewhere, m.Name)
		}
	}
	if len(pendingDeletion) == 0 {
		return Action{}, false
	}
	size, healthy := len(v.voting), len(v.healthyVoting)
	if b := v.bootstrap; b != nil {
		size++
		if b.Healthy {
			healthy++
		} else {
			unhealthyElsewhere = append(unhealthyElsewhere, BootstrapName)
		}
	}
	switch {
	case size < v.Desired:
		return Action{Message: fmt.Sprintf("Ignoring scale down since the number of voting, non-bootstrap etcd members (%d) < desired number of control-plane replicas (%d)", size, v.Desired)}, false
	case healthy < quorum:
		return Action{Message: fmt.Sprintf("Ignoring scale down since the number of healthy voting, non-bootstrap etcd members (%d) < minimum required to maintain quorum (%d)", healthy, quorum)}, false
	case len(unhealthyElsewhere) > 0:
		return Action{Message: fmt.Sprintf("cannot proceed with scaling down, unhealthy voting etcd members found: %v but none are pending deletion", unhealthyElsewhere)}, false
	}
	// Unhealthy first; among equals the one whose index has more voting
	// members (it spreads the members over the failure domains), then
	// by name.
	perIndex := map[string]int{}
	for _, m := range v.voting {
		perIndex[machineIndex(m.Name)]++
	}
	slices.SortStableFunc(pendingDeletion, func(a, b RuleMember) int {
		if a.Healthy != b.Healthy {
			if !a.Healthy {
				return -1
			}
			return 1
		}
		return perIndex[machineIndex(b.Name)] - perIndex[machineIndex(a.Name)]
	})
	first := pendingDeletion[0]
	if !first.Healthy {
		return remove(first, "ScaleDown", "removing member %s: it is unhealthy and its machine is being deleted", describe(first)), true
	}
	if len(v.voting) > v.Desired || planted.On(planted.RemoveBeforeAdd) {
		return remove(first, "ScaleDown", "removing member %s: its machine is being deleted and its replacement votes", describe(first)), true
	}
	return Action{Message: fmt.Sprintf("skip scale down: all voting, non-bootstrap members are healthy and membership does not exceed the desired cluster size of %d", v.Desired)}, false
}

// bootstrapTeardown is rule 6.
func (v *ruleView) bootstrapTeardown() (Action, bool) {
	b := v.bootstrap
	if b == nil || len(v.healthyVoting) < v.Desired || len(v.healthyVoting) != len(v.voting) {
		return Action{}, false
	}
	return remove(*b, "BootstrapTeardown", "removing the bootstrap member: %d control-plane members vote", len(v.voting)), true
}

// addLearner is rule 7: an add, or why a machine waits for one.
func (v *ruleView) addLearner() (Action, bool) {
	for _, mc := range v.Machines {
		if v.hasMember[mc.Name] || mc.Deleting || !mc.Running {
			continue
		}
		switch {
		case !mc.Hook:
			return Action{Message: fmt.Sprintf("not adding a member for %s: its machine lacks the %s deletion hook", mc.Name, QuorumGuardHook)}, false
		case v.learning > 0:
			return Action{Message: fmt.Sprintf("not adding a member for %s: a learner is catching up", mc.Name)}, false
		case !v.allHealthy:
			return Action{Message: fmt.Sprintf("not adding a member for %s: unhealthy members found", mc.Name)}, false
		}
		return Action{Kind: ActionAddLearner, Machine: mc.Name, Reason: "MemberAddAsLearner",
			Message: fmt.Sprintf("adding a learner member for machine %s", mc.Name)}, true
	}
	return Action{}, false
}

// machineIndex is a control-plane machine's index, the digits its name
// ends with (its failure domain's index in the ControlPlaneMachineSet).
func machineIndex(name string) string {
	i := len(name)
	for i > 0 && name[i-1] >= '0' && name[i-1] <= '9' {
		i--
	}
	return name[i:]
}

// describe words a member as the operator's events do.
func describe(m RuleMember) string {
	return fmt.Sprintf("[ name: %s, id: %x ]", m.Name, m.ID)
}
