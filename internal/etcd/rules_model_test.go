package etcd

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	cpmsv1 "github.com/openshift/api/machine/v1"

	"github.com/capstan-dev/capstan/internal/machine"
)

// A model of a control plane under Decide: machines that run or stop,
// members with etcd's own rules for changes (a change needs a leader; a
// promotion a caught-up learner; a removal must leave a quorum of the
// members that are up, as StrictReconfigCheck does), the
// ControlPlaneMachineSet replacing deleted machines (PlanControlPlane,
// RollingUpdate), and the operator's tick: a stopped machine's member
// leaves first when leavesBeforeStop says so, then Decide's one change.
// Random faults hit it from the first start on, one master at a time,
// and after each step the model checks what the issue asks: the quorum is
// never lost with at most one master down, never more voting members than
// the desired size and one, a healthy member never leaves before its
// replacement votes, and once the faults end the control plane converges
// to the desired size, one healthy voting member per machine, the
// bootstrap member gone.

type modelMachine struct {
	name     string
	index    int
	running  bool
	deleting bool
	// age counts the ticks since the machine was made: its instance
	// boots in one, its hook is added in two.
	age int
}

type modelMember struct {
	id      uint64
	name    string
	learner bool
	// up: its process runs (its machine runs; the bootstrap member's
	// always does).
	up bool
	// age counts the ticks since the member was added: a learner has
	// caught up after two.
	age int
}

type model struct {
	t        *testing.T
	desired  int
	machines []*modelMachine
	members  []*modelMember
	nextID   uint64
	made     int
	now      time.Time
	// down counts the masters a fault stopped and has not started.
	down int
	// flaky is a member whose next health check fails though it is up
	// (a check timed out): the stop that reads it takes it for down.
	flaky string
	log   []string
}

func newModel(t *testing.T, desired int) *model {
	m := &model{t: t, desired: desired, now: time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)}
	m.nextID++
	m.members = append(m.members, &modelMember{id: m.nextID, name: BootstrapName, up: true, age: 100})
	for i := range desired {
		m.makeMachine(i)
	}
	return m
}

func (m *model) makeMachine(index int) {
	m.made++
	m.machines = append(m.machines, &modelMachine{name: fmt.Sprintf("m%d-%d", m.made, index), index: index, running: true})
}

func (m *model) machine(name string) *modelMachine {
	for _, mc := range m.machines {
		if mc.name == name {
			return mc
		}
	}
	return nil
}

func (m *model) member(name string) *modelMember {
	for _, mem := range m.members {
		if mem.name == name {
			return mem
		}
	}
	return nil
}

func (m *model) voters() (all, up int) {
	for _, mem := range m.members {
		if !mem.learner {
			all++
			if mem.up {
				up++
			}
		}
	}
	return all, up
}

func (m *model) quorum() bool {
	all, up := m.voters()
	return up >= all/2+1
}

// statuses are the members as the operator's health checks see them.
func (m *model) statuses() []MemberStatus {
	q := m.quorum()
	var out []MemberStatus
	for _, mem := range m.members {
		out = append(out, MemberStatus{Name: mem.name, ID: mem.id, Learner: mem.learner, Started: true,
			Healthy: mem.up && (q || mem.learner) && mem.name != m.flaky})
	}
	return out
}

func (m *model) state() RuleState {
	s := RuleState{Desired: m.desired, Now: m.now, LearnerTimeout: 5 * time.Minute, MachineAPIFunctional: true}
	for _, mc := range m.machines {
		s.Machines = append(s.Machines, RuleMachine{Name: mc.name, Deleting: mc.deleting, Hook: mc.age >= 2, Running: mc.running && mc.age >= 1})
	}
	for _, st := range m.statuses() {
		s.Members = append(s.Members, RuleMember{Name: st.Name, ID: st.ID, Learner: st.Learner, Started: true, Healthy: st.Healthy,
			Node: st.Name == BootstrapName || m.machine(st.Name) != nil, Added: m.now.Add(-time.Minute), Progressed: m.now})
	}
	return s
}

// remove removes a member as etcd would, or says why etcd refuses.
func (m *model) remove(name string) error {
	if !m.quorum() {
		return fmt.Errorf("no leader")
	}
	victim := m.member(name)
	if victim == nil {
		return fmt.Errorf("member %s not found", name)
	}
	if !victim.learner {
		all, up := m.voters()
		if victim.up {
			up--
		}
		if up < (all-1)/2+1 {
			return fmt.Errorf("etcdserver: re-configuration failed due to not enough started members")
		}
	}
	m.members = slices.DeleteFunc(m.members, func(mem *modelMember) bool { return mem == victim })
	return nil
}

// stop stops a machine: its member leaves first when the operator says
// so, then its process stops.
func (m *model) stop(mc *modelMachine) {
	defer func() { m.flaky = "" }()
	mc.running = false
	m.down++
	if mem := m.member(mc.name); mem != nil {
		if leavesBeforeStop(m.statuses(), mc.name) {
			// etcd judges the removal (StrictReconfigCheck); refused,
			// the member stops with its machine.
			if err := m.remove(mc.name); err == nil {
				m.logf("member %s left before its machine stopped", mc.name)
				return
			}
		}
		mem.up = false
	}
}

func (m *model) start(mc *modelMachine) {
	mc.running = true
	m.down--
	if mem := m.member(mc.name); mem != nil {
		mem.up = true
	}
}

func (m *model) logf(format string, args ...any) {
	all, up := m.voters()
	var names []string
	for _, mem := range m.members {
		n := mem.name
		if mem.learner {
			n += "(learner)"
		}
		if !mem.up {
			n += "(down)"
		}
		names = append(names, n)
	}
	m.log = append(m.log, fmt.Sprintf(format, args...)+fmt.Sprintf("  [voters %d, up %d: %s]", all, up, strings.Join(names, " ")))
}

func (m *model) trace() string {
	return "\n  " + strings.Join(m.log[max(0, len(m.log)-40):], "\n  ")
}

// tick is the operator's reconcile and the ControlPlaneMachineSet's.
func (m *model) tick() {
	m.now = m.now.Add(time.Second)
	for _, mc := range m.machines {
		mc.age++
	}
	for _, mem := range m.members {
		mem.age++
	}
	// A deleting machine whose member left is drained and goes.
	m.machines = slices.DeleteFunc(m.machines, func(mc *modelMachine) bool {
		if mc.deleting && m.member(mc.name) == nil {
			if !mc.running {
				m.down--
			}
			m.logf("machine %s is gone", mc.name)
			return true
		}
		return false
	})
	var cms []machine.CPMSMachine
	for _, mc := range m.machines {
		cms = append(cms, machine.CPMSMachine{Name: mc.name, Index: mc.index, Deleting: mc.deleting, Ready: mc.running && mc.age >= 1})
	}
	for _, i := range machine.PlanControlPlane(m.desired, cpmsv1.RollingUpdate, cms).Create {
		m.makeMachine(i)
		m.logf("the ControlPlaneMachineSet made %s", m.machines[len(m.machines)-1].name)
	}
	before := m.statuses()
	act, err := Decide(m.state())
	if err != nil {
		m.t.Fatal(err)
	}
	switch act.Kind {
	case ActionPromote:
		mem := m.member(act.Member)
		if m.quorum() && mem.up && mem.age >= 2 {
			mem.learner = false
			m.logf("promoted %s", act.Member)
		}
	case ActionAddLearner:
		if m.quorum() {
			m.nextID++
			m.members = append(m.members, &modelMember{id: m.nextID, name: act.Machine, learner: true, up: m.machine(act.Machine).running})
			m.logf("added learner %s", act.Machine)
		}
	case ActionRemove:
		victim := m.member(act.Member)
		healthyVoter := slices.ContainsFunc(before, func(s MemberStatus) bool { return s.Name == act.Member && s.Healthy && !s.Learner })
		if err := m.remove(act.Member); err == nil {
			m.logf("removed %s (%s)", act.Member, act.Message)
			if all, _ := m.voters(); healthyVoter && act.Member != BootstrapName && all < m.desired && victim != nil {
				m.t.Fatalf("%s: the healthy member %s left before its replacement voted: %d voters", m.trace(), act.Member, all)
			}
		}
	}
	m.check()
}

// check holds after every step.
func (m *model) check() {
	all, _ := m.voters()
	if m.down <= 1 && !m.quorum() {
		m.t.Fatalf("%s: the quorum is lost with %d master(s) down", m.trace(), m.down)
	}
	machineVoters := all
	if mem := m.member(BootstrapName); mem != nil && !mem.learner {
		machineVoters--
	}
	if machineVoters > m.desired+1 {
		m.t.Fatalf("%s: %d voting members of machines, the desired size is %d", m.trace(), machineVoters, m.desired)
	}
}

// converged: one healthy voting member per machine, the desired number,
// no bootstrap member, no machine being deleted.
func (m *model) converged() bool {
	if m.member(BootstrapName) != nil || len(m.machines) != m.desired || !m.quorum() {
		return false
	}
	for _, mc := range m.machines {
		mem := m.member(mc.name)
		if mc.deleting || !mc.running || mem == nil || mem.learner || !mem.up {
			return false
		}
	}
	all, _ := m.voters()
	return all == m.desired
}

// TestDecideModel runs the model under random faults from the first start
// on: one master stopped at a random tick, then deleted (the dead-master
// flow) or started again; or a healthy master deleted; or a master
// stopped and started while another is being replaced.
func TestDecideModel(t *testing.T) {
	t.Parallel()
	for seed := range uint64(400) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rnd := rand.New(rand.NewPCG(seed, 7))
			m := newModel(t, 3)
			faultAt := rnd.IntN(30)
			kind := rnd.IntN(4)
			var victim *modelMachine
			var after int
			for step := 0; step < 400; step++ {
				switch {
				case step == faultAt:
					live := slices.DeleteFunc(slices.Clone(m.machines), func(mc *modelMachine) bool { return mc.deleting || !mc.running })
					sort.Slice(live, func(i, j int) bool { return live[i].name < live[j].name })
					victim = live[rnd.IntN(len(live))]
					after = step + 1 + rnd.IntN(20)
					flaky := rnd.IntN(2) == 0
					switch kind {
					case 0, 1, 3:
						if flaky {
							// The stop reads the bootstrap member's
							// check failed: it may still be half of
							// the quorum.
							m.flaky = BootstrapName
						}
						m.stop(victim)
						m.logf("step %d: stopped %s", step, victim.name)
					case 2:
						victim.deleting = true
						m.logf("step %d: deleted the healthy %s", step, victim.name)
					}
				case step == after && victim != nil:
					switch kind {
					case 0:
						victim.deleting = true
						m.logf("step %d: deleted the stopped %s", step, victim.name)
					case 1:
						if m.machine(victim.name) != nil {
							m.start(victim)
							m.logf("step %d: started %s again", step, victim.name)
						}
					case 3:
						// Another, healthy, master deleted while the
						// first is down: its replacement must wait.
						for _, mc := range m.machines {
							if mc != victim && !mc.deleting && mc.running {
								mc.deleting = true
								m.logf("step %d: deleted the healthy %s while %s is down", step, mc.name, victim.name)
								break
							}
						}
					}
				case kind == 3 && step == after+60 && m.machine(victim.name) != nil:
					m.start(victim)
					m.logf("step %d: started %s again", step, victim.name)
				}
				m.tick()
				if step > after+60 && m.converged() {
					return
				}
			}
			t.Fatalf("no convergence within 400 ticks (fault %d at %d):%s", kind, faultAt, m.trace())
		})
	}
}
