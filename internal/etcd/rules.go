package etcd

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// The cluster-etcd-operator's membership rules, as one pure function: the
// operator gathers the control-plane machines and the members, Decide says
// which one change to make, and the operator makes it. One change at a
// time, as upstream does, so that every step is judged on fresh state.
//
// The rules, in the order they are tried:
//
//  1. A learner (or a member added but never started) whose machine is
//     being deleted or is gone is removed: it does not vote, so this is
//     always safe (attemptToRemoveLearningMember). A member a host added
//     and has not started yet (Joining) has no machine to tell: rule 2
//     alone applies to it.
//  2. A learner or unstarted member that has not become a voter within
//     LearnerTimeout of being added is removed: an add that failed half
//     way, or a learner that can never catch up, must not block every
//     later change.
//  3. A voting member that is unhealthy and whose node is gone, with its
//     machine gone or being deleted, is dead: it is removed. Removing an
//     unhealthy member lowers the quorum and leaves the healthy count as
//     it was, so no quorum check is needed
//     (removeUnhealthyMemberWithoutNode).
//  4. A started, healthy learner is promoted when its machine stays and
//     carries the quorum guard hook (shouldPromote); etcd itself refuses
//     the promotion until the learner has caught up with the leader.
//  5. Scale down (attemptToScaleDown): with at least Desired voting
//     members, one of them on a machine being deleted, and at least
//     MinimumTolerableQuorum(Desired) of them healthy: an unhealthy member
//     of a deleting machine goes first; a healthy one goes only while the
//     voting members exceed Desired. An unhealthy member whose machine is
//     not being deleted holds every scale-down.
//  6. A voting member with no machine at all is removed only while the
//     voting members exceed Desired: a healthy member whose machine
//     vanished never takes the cluster below its size.
//  7. The bootstrap member leaves once Desired machine members vote, all
//     of them healthy.
//  8. A learner is added for a running machine that stays and has no
//     member, only when every member is healthy and started and no other
//     learner is catching up (clustermembercontroller).

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
	Now     time.Time
	// LearnerTimeout is how long a member may stay a learner (or
	// unstarted) before it is given up.
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

// Decide returns the one membership change to make now, or ActionNone
// with a Message saying what holds it when nothing can be done.
func Decide(s RuleState) (Action, error) {
	if s.Desired <= 0 {
		return Action{}, fmt.Errorf("the desired control-plane size is %d: it must be at least 1", s.Desired)
	}
	machines := map[string]RuleMachine{}
	for _, m := range s.Machines {
		machines[m.Name] = m
	}
	members := slices.Clone(s.Members)
	slices.SortFunc(members, func(a, b RuleMember) int { return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID)) })
	hasMember := map[string]bool{}
	var voting, healthyVoting []RuleMember
	learning := 0
	allHealthy := true
	for _, m := range members {
		hasMember[m.Name] = true
		if !m.Healthy || !m.Started {
			allHealthy = false
		}
		if !m.votes() {
			learning++
			continue
		}
		if m.Name == BootstrapName {
			continue
		}
		voting = append(voting, m)
		if m.Healthy {
			healthyVoting = append(healthyVoting, m)
		}
	}
	remove := func(m RuleMember, reason, format string, args ...any) Action {
		return Action{Kind: ActionRemove, Member: m.Name, ID: m.ID, Reason: reason, Message: fmt.Sprintf(format, args...)}
	}

	// 1 and 2: learners that cannot or did not join.
	for _, m := range members {
		if m.votes() {
			continue
		}
		mc, ok := machines[m.Name]
		if m.Name != BootstrapName && !m.Joining && (!ok || mc.Deleting) {
			return remove(m, "ScaleDown", "removing learner member %s: its machine is being deleted", describe(m)), nil
		}
		if s.LearnerTimeout > 0 && !m.Added.IsZero() && s.Now.Sub(m.Added) >= s.LearnerTimeout {
			return remove(m, "ScaleDown", "removing learner member %s: it has not joined as a voting member within %s", describe(m), s.LearnerTimeout), nil
		}
	}
	// 3: dead members.
	for _, m := range voting {
		mc, ok := machines[m.Name]
		if !m.Healthy && !m.Node && (!ok || mc.Deleting) {
			return remove(m, "ScaleDown", "removing member %s: it is unhealthy and its node is gone", describe(m)), nil
		}
	}
	// 4: promotion.
	for _, m := range members {
		if !m.Learner || !m.Started || !m.Healthy {
			continue
		}
		if mc, ok := machines[m.Name]; ok && !mc.Deleting && mc.Hook {
			return Action{Kind: ActionPromote, Member: m.Name, ID: m.ID, Reason: "MemberPromote",
				Message: fmt.Sprintf("promoting learner member %s", describe(m))}, nil
		}
	}
	// 5: scale down.
	quorum, _ := MinimumTolerableQuorum(s.Desired)
	var pendingDeletion []RuleMember
	var unhealthyElsewhere []string
	for _, m := range voting {
		mc, ok := machines[m.Name]
		switch {
		case ok && mc.Deleting:
			pendingDeletion = append(pendingDeletion, m)
		case ok && !m.Healthy:
			unhealthyElsewhere = append(unhealthyElsewhere, m.Name)
		}
	}
	hold := ""
	switch {
	case len(pendingDeletion) == 0:
	case len(voting) < s.Desired:
		hold = fmt.Sprintf("Ignoring scale down since the number of voting, non-bootstrap etcd members (%d) < desired number of control-plane replicas (%d)", len(voting), s.Desired)
	case len(healthyVoting) < quorum:
		hold = fmt.Sprintf("Ignoring scale down since the number of healthy voting, non-bootstrap etcd members (%d) < minimum required to maintain quorum (%d)", len(healthyVoting), quorum)
	case len(unhealthyElsewhere) > 0:
		hold = fmt.Sprintf("cannot proceed with scaling down, unhealthy voting etcd members found: %v but none are pending deletion", unhealthyElsewhere)
	default:
		// Unhealthy first; among equals the one whose index has more
		// voting members (it spreads the members over the failure
		// domains), then by name.
		perIndex := map[string]int{}
		for _, m := range voting {
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
			return remove(first, "ScaleDown", "removing member %s: it is unhealthy and its machine is being deleted", describe(first)), nil
		}
		if len(voting) > s.Desired {
			return remove(first, "ScaleDown", "removing member %s: its machine is being deleted and its replacement votes", describe(first)), nil
		}
	}
	// 6: members without a machine, as long as the healthy ones that stay
	// keep the quorum.
	if len(voting) > s.Desired {
		for _, m := range voting {
			staying := len(healthyVoting)
			if m.Healthy {
				staying--
			}
			if _, ok := machines[m.Name]; !ok && staying >= quorum {
				return remove(m, "ScaleDown", "removing member %s: it has no machine and the cluster is above its size of %d", describe(m), s.Desired), nil
			}
		}
	}
	// 7: the bootstrap member.
	for _, m := range members {
		if m.Name == BootstrapName && m.votes() && len(healthyVoting) >= s.Desired && len(healthyVoting) == len(voting) {
			return remove(m, "BootstrapTeardown", "removing the bootstrap member: %d control-plane members vote", len(voting)), nil
		}
	}
	// 8: a learner for a machine without a member.
	for _, mc := range s.Machines {
		if hasMember[mc.Name] || mc.Deleting || !mc.Running {
			continue
		}
		switch {
		case learning > 0:
			return Action{Message: fmt.Sprintf("not adding a member for %s: a learner is catching up", mc.Name)}, nil
		case !allHealthy:
			return Action{Message: fmt.Sprintf("not adding a member for %s: unhealthy members found", mc.Name)}, nil
		}
		return Action{Kind: ActionAddLearner, Machine: mc.Name, Reason: "MemberAddAsLearner",
			Message: fmt.Sprintf("adding a learner member for machine %s", mc.Name)}, nil
	}
	return Action{Message: hold}, nil
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
