package etcd

import (
	"strings"
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	// Machines: running, with the hook; member: a healthy voter.
	mach := func(name string, opts ...func(*RuleMachine)) RuleMachine {
		m := RuleMachine{Name: name, Hook: true, Running: true}
		for _, o := range opts {
			o(&m)
		}
		return m
	}
	deleting := func(m *RuleMachine) { m.Deleting = true }
	stopped := func(m *RuleMachine) { m.Running = false }
	noHook := func(m *RuleMachine) { m.Hook = false }
	id := uint64(0)
	mem := func(name string, opts ...func(*RuleMember)) RuleMember {
		id++
		m := RuleMember{Name: name, ID: id, Started: true, Healthy: true, Node: true}
		for _, o := range opts {
			o(&m)
		}
		return m
	}
	unhealthy := func(m *RuleMember) { m.Healthy = false }
	learner := func(added time.Duration) func(*RuleMember) {
		return func(m *RuleMember) { m.Learner, m.Added = true, now.Add(-added) }
	}
	unstarted := func(m *RuleMember) {
		m.Started, m.Healthy, m.Learner, m.Added = false, false, true, now.Add(-time.Second)
	}
	nodeGone := func(m *RuleMember) { m.Node = false }
	joining := func(m *RuleMember) { m.Joining = true }
	three := func() []RuleMember { return []RuleMember{mem("m-0"), mem("m-1"), mem("m-2")} }

	cases := []struct {
		name     string
		machines []RuleMachine
		members  []RuleMember
		desired  int
		// noMachineAPI: no control-plane Machine is Running.
		noMachineAPI bool
		// want: the action's kind and its member or machine;
		// message: a part of its message.
		want    ActionKind
		target  string
		message string
	}{
		{name: "three healthy members on three machines: nothing to do",
			machines: []RuleMachine{mach("m-0"), mach("m-1"), mach("m-2")}, members: three(), want: ActionNone},
		{name: "a dead master being deleted goes first, its replacement waits",
			machines: []RuleMachine{mach("m-0", deleting, stopped), mach("m-1"), mach("m-2"), mach("m-x-0")},
			members:  []RuleMember{mem("m-0", unhealthy), mem("m-1"), mem("m-2")},
			want:     ActionRemove, target: "m-0", message: "unhealthy and its machine is being deleted"},
		{name: "with the dead member gone the replacement is added as a learner",
			machines: []RuleMachine{mach("m-0", deleting, stopped), mach("m-1"), mach("m-2"), mach("m-x-0")},
			members:  []RuleMember{mem("m-1"), mem("m-2")},
			want:     ActionAddLearner, target: "m-x-0"},
		{name: "a learner that caught up is promoted",
			machines: []RuleMachine{mach("m-1"), mach("m-2"), mach("m-x-0")},
			members:  []RuleMember{mem("m-1"), mem("m-2"), mem("m-x-0", learner(time.Second))},
			want:     ActionPromote, target: "m-x-0"},
		{name: "a learner whose machine lacks the quorum guard is not promoted",
			machines: []RuleMachine{mach("m-1"), mach("m-2"), mach("m-x-0", noHook)},
			members:  []RuleMember{mem("m-1"), mem("m-2"), mem("m-x-0", learner(time.Second))},
			want:     ActionNone},
		{name: "a learner whose machine is being deleted is removed",
			machines: []RuleMachine{mach("m-1"), mach("m-2"), mach("m-x-0", deleting)},
			members:  []RuleMember{mem("m-1"), mem("m-2"), mem("m-x-0", learner(time.Second))},
			want:     ActionRemove, target: "m-x-0", message: "learner"},
		{name: "a learner that never catches up is removed after the timeout",
			machines: []RuleMachine{mach("m-0"), mach("m-1"), mach("m-2"), mach("m-3", stopped)},
			members:  append(three(), mem("m-3", learner(11*time.Minute), unhealthy)),
			want:     ActionRemove, target: "m-3", message: "within 10m0s"},
		{name: "a learner that is not healthy yet, within the timeout, holds the next add",
			machines: []RuleMachine{mach("m-1"), mach("m-2"), mach("m-x-0"), mach("m-x-1")},
			members:  []RuleMember{mem("m-1"), mem("m-2"), mem("m-x-0", learner(time.Minute), unhealthy)},
			want:     ActionNone, message: "a learner is catching up"},
		{name: "an orphan left by a failed add (no name, never started) is removed",
			machines: []RuleMachine{mach("m-0"), mach("m-1"), mach("m-2")},
			members:  append(three(), mem("", unstarted, nodeGone)),
			want:     ActionRemove, target: "", message: "learner"},
		{name: "a member a host added and has not started yet is left to the timeout",
			machines: []RuleMachine{mach("m-0"), mach("m-1"), mach("m-2"), mach("m-3")},
			members:  append(three(), mem("", unstarted, joining)),
			want:     ActionNone},
		{name: "a member a host added and never started is given up after the timeout",
			machines: []RuleMachine{mach("m-0"), mach("m-1"), mach("m-2")},
			members:  append(three(), mem("", unstarted, joining, func(m *RuleMember) { m.Added = now.Add(-10 * time.Minute) })),
			want:     ActionRemove, target: "", message: "has not joined as a voting member"},
		{name: "no learner is added while a member is unhealthy",
			machines: []RuleMachine{mach("m-0", stopped), mach("m-1"), mach("m-2"), mach("m-3")},
			members:  []RuleMember{mem("m-0", unhealthy), mem("m-1"), mem("m-2")},
			want:     ActionNone, message: "unhealthy members found"},
		{name: "a stopped master that is not deleted keeps its member",
			machines: []RuleMachine{mach("m-0", stopped), mach("m-1"), mach("m-2")},
			members:  []RuleMember{mem("m-0", unhealthy), mem("m-1"), mem("m-2")},
			want:     ActionNone},
		{name: "a healthy master being deleted stays until its replacement votes: the learner comes first",
			machines: []RuleMachine{mach("m-0", deleting), mach("m-1"), mach("m-2"), mach("m-x-0")},
			members:  three(),
			want:     ActionAddLearner, target: "m-x-0"},
		{name: "a healthy master being deleted leaves once its replacement votes",
			machines: []RuleMachine{mach("m-0", deleting), mach("m-1"), mach("m-2"), mach("m-x-0")},
			members:  append(three(), mem("m-x-0")),
			want:     ActionRemove, target: "m-0", message: "replacement votes"},
		{name: "no scale-down below the minimum tolerable quorum",
			machines: []RuleMachine{mach("m-0", deleting, stopped), mach("m-1", stopped), mach("m-2")},
			members:  []RuleMember{mem("m-0", unhealthy), mem("m-1", unhealthy), mem("m-2")},
			want:     ActionNone, message: "(1) < minimum required to maintain quorum (2)"},
		{name: "an unhealthy member whose machine stays holds the scale-down",
			machines: []RuleMachine{mach("m-0", deleting), mach("m-1", stopped), mach("m-2"), mach("m-x-0")},
			members:  append([]RuleMember{mem("m-0"), mem("m-1", unhealthy), mem("m-2")}, mem("m-x-0")),
			want:     ActionNone, message: "unhealthy voting etcd members found: [m-1] but none are pending deletion"},
		{name: "an unhealthy member whose node and machine are gone is removed",
			machines: []RuleMachine{mach("m-1"), mach("m-2"), mach("m-x-0")},
			members:  []RuleMember{mem("m-0", unhealthy, nodeGone), mem("m-1"), mem("m-2")},
			want:     ActionRemove, target: "m-0", message: "node is gone"},
		{name: "a healthy member whose machine vanished is not removed below the desired size",
			machines: []RuleMachine{mach("m-1"), mach("m-2")},
			members:  three(),
			want:     ActionNone},
		// S1: a healthy member without a machine is never removed, even
		// above the desired size (a relabelled master, a host's join).
		{name: "a healthy member whose machine vanished stays even above the cluster's size",
			machines: []RuleMachine{mach("m-1"), mach("m-2"), mach("m-x-0")},
			members:  append(three(), mem("m-x-0")),
			want:     ActionNone},
		{name: "a started learner with no machine is left alone while it is healthy or has a node",
			machines: []RuleMachine{mach("m-0"), mach("m-1"), mach("m-2")},
			members:  append(three(), mem("host-3", learner(time.Second))),
			want:     ActionNone},
		{name: "a learner with no machine nor node, unhealthy, is removed",
			machines: []RuleMachine{mach("m-0"), mach("m-1"), mach("m-2")},
			members:  append(three(), mem("host-3", learner(time.Second), unhealthy, nodeGone)),
			want:     ActionRemove, target: "host-3", message: "no machine nor node"},
		// S1: without a functional Machine API, only promotions.
		{name: "without a functional Machine API a learner is promoted though it has no machine",
			noMachineAPI: true,
			members:      []RuleMember{mem("h-1"), mem("h-2"), mem("h-3", learner(time.Second))},
			want:         ActionPromote, target: "h-3"},
		{name: "without a functional Machine API a dead member is not removed",
			noMachineAPI: true,
			machines:     []RuleMachine{mach("m-0", deleting, stopped), mach("m-1"), mach("m-2")},
			members:      []RuleMember{mem("m-0", unhealthy, nodeGone), mem("m-1"), mem("m-2")},
			want:         ActionNone, message: "not functional"},
		{name: "without a functional Machine API a learner is not promoted above the desired size",
			noMachineAPI: true,
			members:      append(three(), mem("h-3", learner(time.Second))),
			want:         ActionNone, message: "3 voting members already stay"},
		// H3: no promotion beside an unhealthy voter.
		{name: "no promotion while another voter is unhealthy: it would make four voters with three alive",
			machines: []RuleMachine{mach("m-0", deleting), mach("m-1", stopped), mach("m-2"), mach("m-x-0")},
			members:  []RuleMember{mem("m-0"), mem("m-1", unhealthy), mem("m-2"), mem("m-x-0", learner(time.Second))},
			want:     ActionNone, message: "unhealthy voting members found: [m-1]"},
		{name: "no promotion above the desired size: a new master beside three that stay waits",
			machines: []RuleMachine{mach("m-0"), mach("m-1"), mach("m-2"), mach("m-3")},
			members:  append(three(), mem("m-3", learner(time.Second))),
			want:     ActionNone, message: "3 voting members already stay"},
		// M2: a healthy learner catching up is never killed.
		{name: "a healthy learner still catching up is not given up at the timeout",
			machines: []RuleMachine{mach("m-0", deleting), mach("m-1"), mach("m-2"), mach("m-x-0")},
			members:  append(three(), mem("m-x-0", learner(time.Hour), func(m *RuleMember) { m.Progressed = now.Add(-time.Second) })),
			want:     ActionPromote, target: "m-x-0"},
		{name: "a healthy learner that made no progress for the timeout is given up",
			machines: []RuleMachine{mach("m-0", deleting), mach("m-1"), mach("m-2"), mach("m-x-0")},
			members:  append(three(), mem("m-x-0", learner(time.Hour))),
			want:     ActionRemove, target: "m-x-0", message: "has not caught up with the leader"},
		// Bootstrap: a master dying before the bootstrap member left.
		{name: "a dead master deleted while the bootstrap member votes is removed, counting the bootstrap member",
			machines: []RuleMachine{mach("m-0", deleting, stopped), mach("m-1"), mach("m-2"), mach("m-x-0")},
			members:  []RuleMember{mem(BootstrapName), mem("m-0", unhealthy), mem("m-1")},
			want:     ActionRemove, target: "m-0", message: "unhealthy and its machine is being deleted"},
		{name: "a healthy master deleted while the bootstrap member votes stays: the bootstrap member leaves first",
			machines: []RuleMachine{mach("m-0", deleting), mach("m-1"), mach("m-2"), mach("m-x-0")},
			members:  []RuleMember{mem(BootstrapName), mem("m-0"), mem("m-1"), mem("m-2")},
			want:     ActionRemove, target: BootstrapName},
		{name: "a healthy master deleted while the bootstrap member votes with two masters: the replacement comes first",
			machines: []RuleMachine{mach("m-0", deleting), mach("m-1"), mach("m-2"), mach("m-x-0")},
			members:  []RuleMember{mem(BootstrapName), mem("m-0"), mem("m-1")},
			want:     ActionAddLearner, target: "m-2"},
		{name: "a learner is promoted beside a dead bootstrap member, which then leaves",
			machines: []RuleMachine{mach("m-0"), mach("m-1"), mach("m-2")},
			members:  []RuleMember{mem(BootstrapName, unhealthy), mem("m-0"), mem("m-1"), mem("m-2", learner(time.Second))},
			want:     ActionPromote, target: "m-2"},
		{name: "no learner is added for a machine without the quorum guard hook",
			machines: []RuleMachine{mach("m-0"), mach("m-1"), mach("m-2", noHook)},
			members:  []RuleMember{mem(BootstrapName), mem("m-0"), mem("m-1")},
			want:     ActionNone, message: "lacks the EtcdQuorumOperator deletion hook"},
		{name: "the bootstrap member stays until the machines' members vote",
			machines: []RuleMachine{mach("m-0"), mach("m-1"), mach("m-2")},
			members:  []RuleMember{mem(BootstrapName), mem("m-0"), mem("m-1")},
			want:     ActionAddLearner, target: "m-2"},
		{name: "the bootstrap member leaves once the machines' members vote",
			machines: []RuleMachine{mach("m-0"), mach("m-1"), mach("m-2")},
			members:  append(three(), mem(BootstrapName)),
			want:     ActionRemove, target: BootstrapName, message: "bootstrap"},
		{name: "two masters replaced at once: one leaves, spreading over the indexes",
			machines: []RuleMachine{mach("m-0", deleting), mach("m-1", deleting), mach("m-2"), mach("m-x-0"), mach("m-x-1")},
			members:  append(three(), mem("m-x-0")),
			want:     ActionRemove, target: "m-0"},
		{name: "a failed replacement being deleted gets no member",
			machines: []RuleMachine{mach("m-1"), mach("m-2"), mach("m-x-0"), mach("m-y-0", deleting, stopped)},
			members:  []RuleMember{mem("m-1"), mem("m-2"), mem("m-x-0")},
			want:     ActionNone},
		{name: "a single-member control plane adds its machine's member beside the bootstrap member",
			desired:  1,
			machines: []RuleMachine{mach("m-0")},
			members:  []RuleMember{mem(BootstrapName)},
			want:     ActionAddLearner, target: "m-0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			desired := c.desired
			if desired == 0 {
				desired = 3
			}
			got, err := Decide(RuleState{Machines: c.machines, Members: c.members, Desired: desired, Now: now, LearnerTimeout: 10 * time.Minute,
				MachineAPIFunctional: !c.noMachineAPI})
			if err != nil {
				t.Fatal(err)
			}
			target := got.Member
			if got.Kind == ActionAddLearner {
				target = got.Machine
			}
			if got.Kind != c.want || target != c.target || !strings.Contains(got.Message, c.message) {
				t.Errorf("got %s %q (%s), want %s %q with a message containing %q", got.Kind, target, got.Message, c.want, c.target, c.message)
			}
		})
	}
}

func TestDecideRefusesNoDesiredSize(t *testing.T) {
	if _, err := Decide(RuleState{}); err == nil || !strings.Contains(err.Error(), "desired control-plane size is 0") {
		t.Fatalf("err %v", err)
	}
}

func TestMinimumTolerableQuorum(t *testing.T) {
	for members, want := range map[int]int{1: 1, 2: 2, 3: 2, 4: 3, 5: 3} {
		if got, err := MinimumTolerableQuorum(members); err != nil || got != want {
			t.Errorf("MinimumTolerableQuorum(%d) = %d, %v; want %d", members, got, err, want)
		}
	}
	if _, err := MinimumTolerableQuorum(0); err == nil {
		t.Error("MinimumTolerableQuorum(0): no error")
	}
}
