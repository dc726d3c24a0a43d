package chaos

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/capstan-dev/capstan/internal/etcd"
)

// Partitions as Jepsen makes them, beside etcd-partition's (the leader cut
// from both followers): a bridge, where the followers are cut from each
// other and each still reaches the leader; and kube-apiserver cut from the
// majority while it still reaches the one member cut from the others, a
// minority that must serve no read and take no write. The linearizability
// clients run through both: a read served from that member would be
// stale, and is caught.

// faultStep is where a fault scenario is.
type faultStep string

const (
	faultNone   faultStep = ""
	faultCut    faultStep = "cut"
	faultHealed faultStep = "healed"
	// etcd-member's steps.
	faultKill   faultStep = "kill"
	faultKilled faultStep = "killed"
	faultDone   faultStep = "done"
	// etcd-pause's steps.
	faultPaused    faultStep = "paused"
	faultContinued faultStep = "continued"
	// etcd-partition's and etcd-apiserver-cut's slow links.
	faultSlow faultStep = "slow"
	faultFast faultStep = "fast"
)

// faultPhase is a fault scenario's phase, kept as JSON in the phase
// ConfigMap (a kill of capstan loses none of it).
type faultPhase struct {
	Step faultStep `json:"step"`
	// Leader is the leader when the fault began (the member killed or
	// stopped); Cut the members it cut off (the bridge: the two cut from
	// each other; the minority: the one member).
	Leader string   `json:"leader,omitempty"`
	Cut    []string `json:"cut,omitempty"`
	// PID is the process the fault killed or stopped; Kill which of the
	// scenario's kills it is (from 1).
	PID  int       `json:"pid,omitempty"`
	Kill int       `json:"kill,omitempty"`
	At   time.Time `json:"at"`
	// OpAt is the operation's time when the step began: a fault lasts
	// operation time (capstan's time up), so that a kill in it leaves the
	// rest for the start after.
	OpAt time.Duration `json:"opAt,omitempty"`
}

func (p faultPhase) step() string { return string(p.Step) }

// left is what is left of a fault of d begun at p.
func (p faultPhase) left(r *Run, d time.Duration) time.Duration { return d - (r.opTime() - p.OpAt) }

// writeFaultPhaseOnceServed writes the phase as soon as the API takes
// it: after a fault that kept it from serving, the phase cannot wait for
// the next tick (written "" again, it would cut once more).
func writeFaultPhaseOnceServed(ctx context.Context, r *Run, p faultPhase) error {
	for writeTypedPhase(ctx, r, p) != nil {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return nil
}

// followers are the voting members a sample shows besides its leader.
func followers(s memberSample) []string {
	var out []string
	for _, v := range s.Voting {
		if v != s.Leader {
			out = append(out, v)
		}
	}
	return out
}

// etcdBridgeScenario cuts the two followers from each other.
func etcdBridgeScenario() *Scenario {
	s := etcdScenario("etcd-bridge",
		fmt.Sprintf("a bridge (Jepsen's): the two followers' members cut from each other, both ways, each still reaching the leader, "+
			"for %s, then healed: the API keeps taking writes throughout (after a kill the bridge is lifted while capstan starts and put back once it is up), "+
			"no member removed and no machine made, never fewer healthy than a quorum of the 3 desired", partitionFor),
		etcdBridgeProgress, quorumCheck{maxVoting: etcdMasters}, 0)
	s.Args = append(s.Args, "--etcd-partitionable")
	s.Points = nil
	s.Span = faultSpan
	return s
}

func etcdBridgeProgress(ctx context.Context, r *Run) (bool, string, error) {
	if !r.alive() {
		return liftWhileStarting(r)
	}
	p, err := readTypedPhase[faultPhase](ctx, r)
	if err != nil {
		return false, "", err
	}
	s := r.Members.last()
	switch p.Step {
	case faultNone:
		if err := etcd.WritePartition(r.DataDir); err != nil {
			return false, "", err
		}
		if masters, why, err := formed(ctx, r); masters == nil {
			return false, why, err
		}
		if s.Leader == "" || !r.alive() {
			return false, "waiting for a leader, capstan up", nil
		}
		followers := followers(s)
		if len(followers) != 2 {
			return false, fmt.Sprintf("waiting for two followers of %s: voting %v", s.Leader, s.Voting), nil
		}
		// The phase first, the cut on the next tick, as etcd-partition.
		return false, fmt.Sprintf("cutting %s from %s, both still reaching %s", followers[0], followers[1], s.Leader),
			writeTypedPhase(ctx, r, faultPhase{Step: faultCut, Leader: s.Leader, Cut: followers, At: time.Now(), OpAt: r.opTime()})
	case faultCut:
		// Put back once capstan is up after a kill (liftWhileStarting):
		// a start inside the bridge can fail (kube-apiserver's start
		// hooks time out against a member with no leader). Between the
		// followers of the leader as it is then: the members elected
		// one afresh, maybe one of the two cut before, and a cut
		// between the leader and a follower is no bridge.
		link := [2]string{p.Cut[0], p.Cut[1]}
		if now := followers(s); s.Leader != "" && len(now) == 2 {
			link = [2]string{now[0], now[1]}
		}
		if err := etcd.WriteLinkCuts(r.DataDir, link); err != nil {
			return false, "", err
		}
		// It lasts partitionFor of the operation's time: a kill in it
		// leaves the rest for the start after.
		if left := p.left(r, partitionFor); left > 0 {
			return false, fmt.Sprintf("%s and %s cut from each other, %.1fs left", p.Cut[0], p.Cut[1], left.Seconds()), nil
		}
		if err := etcd.WritePartition(r.DataDir); err != nil {
			return false, "", err
		}
		return false, "healed the bridge", writeTypedPhase(ctx, r, faultPhase{Step: faultHealed, At: time.Now()})
	case faultHealed:
		if err := etcd.WritePartition(r.DataDir); err != nil {
			return false, "", err
		}
		return settledSince(ctx, r, s, "the bridge healed", p.At)
	}
	return false, "", fmt.Errorf("unknown step %q", p.Step)
}

// etcdMinorityScenario cuts a follower's member from the others and
// leaves kube-apiserver only that member to reach.
func etcdMinorityScenario() *Scenario {
	s := etcdScenario("etcd-minority",
		fmt.Sprintf("a follower's member cut from the other two (peer traffic both ways) and kube-apiserver cut from those two, "+
			"reaching only the member cut off, for %s, then healed: a minority of one serves no read and takes no write (the "+
			"linearizability clients would see a stale read), the API takes writes again within %s of the heal, no acknowledged write "+
			"lost, no member removed and no machine made, never fewer healthy than a quorum of the 3 desired", partitionFor, leaderElection),
		etcdMinorityProgress, quorumCheck{maxVoting: etcdMasters}, 0)
	s.Args = append(s.Args, "--etcd-partitionable")
	s.Points = nil
	s.Span = faultSpan
	s.MaxOutage = partitionFor + leaderElection
	return s
}

// etcdMinorityProgress makes the cut in one step: while it lasts, the
// API (where the phase is kept) serves nothing, so the step waits out
// the cut and heals it before it writes the next phase.
func etcdMinorityProgress(ctx context.Context, r *Run) (bool, string, error) {
	p, err := readTypedPhase[faultPhase](ctx, r)
	if err != nil {
		return false, "", err
	}
	s := r.Members.last()
	switch p.Step {
	case faultNone:
		if masters, why, err := formed(ctx, r); masters == nil {
			return false, why, err
		}
		if s.Leader == "" || !r.alive() {
			return false, "waiting for a leader, capstan up", nil
		}
		others := followers(s)
		if len(others) == 0 {
			return false, fmt.Sprintf("waiting for a follower of %s: voting %v", s.Leader, s.Voting), nil
		}
		minority := others[0]
		addr, err := memberClientAddr(r.DataDir, minority)
		if err != nil {
			return false, "", err
		}
		r.op.enter(string(faultCut))
		// For partitionFor of the operation's time, lifted while capstan
		// starts after a kill (a start needs a quorum to reach).
		cut := func() error {
			if err := etcd.WritePartition(r.DataDir, minority); err != nil {
				return err
			}
			return etcd.WriteClientFault(r.DataDir, etcd.ClientFault{Only: addr})
		}
		heal := func() error {
			if err := etcd.WriteClientFault(r.DataDir, etcd.ClientFault{}); err != nil {
				return err
			}
			return etcd.WritePartition(r.DataDir)
		}
		if err := holdFault(ctx, r, partitionFor, cut, heal); err != nil {
			return false, "", err
		}
		// Written once the API serves again (written "" again, the step
		// would cut once more).
		return false, "healed the cut of " + minority, writeFaultPhaseOnceServed(ctx, r, faultPhase{Step: faultHealed, Cut: []string{minority}, At: time.Now()})
	case faultHealed:
		if err := etcd.WriteClientFault(r.DataDir, etcd.ClientFault{}); err != nil {
			return false, "", err
		}
		if err := etcd.WritePartition(r.DataDir); err != nil {
			return false, "", err
		}
		return settledSince(ctx, r, s, "the minority healed", p.At)
	}
	return false, "", fmt.Errorf("unknown step %q", p.Step)
}

// memberClientAddr is the client address of a member of dataDir's etcd.
func memberClientAddr(dataDir, name string) (string, error) {
	specs, err := etcd.ReadRegistry(dataDir)
	if err != nil {
		return "", err
	}
	i := slices.IndexFunc(specs, func(s etcd.MemberSpec) bool { return s.Name == name })
	if i < 0 {
		return "", fmt.Errorf("etcd member %s is not in the registry of %s", name, dataDir)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(specs[i].ClientPort)), nil
}
