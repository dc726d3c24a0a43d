package chaos

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/capstan-dev/capstan/internal/datadir"
	"github.com/capstan-dev/capstan/internal/etcd"
)

// memberSample is what etcd itself said of its members at one instant:
// its member list, and which voting members answered a status request
// naming a leader.
type memberSample struct {
	At time.Time
	// Up: capstan had said it was up, and was neither killed nor dead,
	// from before the sample was taken until after.
	Up       bool
	Voting   []string
	Healthy  int
	Learners int
	// Leader is the member a voting member named its leader ("" when
	// none did).
	Leader string
	// Failed: etcd could not be asked (no member list within a second).
	Failed bool
}

// memberSampler samples the etcd membership of a run's data dir, from
// etcd (never from capstan's registry of members), as the run goes on.
type memberSampler struct {
	dataDir string
	alive   func() bool

	mu      sync.Mutex
	samples []memberSample
}

func sampleMembers(ctx context.Context, dataDir string, alive func() bool) *memberSampler {
	s := &memberSampler{dataDir: dataDir, alive: alive}
	go s.run(ctx)
	return s
}

func (s *memberSampler) run(ctx context.Context) {
	var client *clientv3.Client
	var endpoints []string
	defer func() {
		if client != nil {
			client.Close()
		}
	}()
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		up := s.alive()
		sample := memberSample{At: time.Now(), Failed: true}
		now, err := datadir.StorageEndpoints(s.dataDir)
		if err == nil && (client == nil || !slices.Equal(now, endpoints)) {
			if client != nil {
				client.Close()
			}
			if client, err = datadir.StorageClient(s.dataDir); err != nil {
				client = nil
			}
			endpoints = now
		}
		if err == nil {
			sample = s.sample(ctx, client)
		}
		// A sample that failed is kept: a stretch of them while capstan
		// is up is etcd not answering.
		sample.Up = up && s.alive()
		s.mu.Lock()
		s.samples = append(s.samples, sample)
		s.mu.Unlock()
	}
}

func (s *memberSampler) sample(ctx context.Context, client *clientv3.Client) memberSample {
	sample := memberSample{At: time.Now()}
	lctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	list, err := client.MemberList(lctx)
	if err != nil {
		sample.Failed = true
		return sample
	}
	names := map[uint64]string{}
	for _, m := range list.Members {
		names[m.ID] = m.Name
	}
	for _, m := range list.Members {
		if m.IsLearner {
			sample.Learners++
			continue
		}
		sample.Voting = append(sample.Voting, m.Name)
		if len(m.ClientURLs) == 0 {
			continue // added, never started
		}
		// Generous: a loaded machine answers slowly, and a slow answer
		// is not a lost member.
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := client.Status(sctx, m.ClientURLs[0])
		cancel()
		if err == nil && st.Leader != 0 {
			sample.Healthy++
			sample.Leader = names[st.Leader]
		}
	}
	sort.Strings(sample.Voting)
	return sample
}

// last is the latest sample that answered (none: the zero sample).
func (s *memberSampler) last() memberSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	// A failed sample says nothing of the members: the last that
	// answered does.
	for i := len(s.samples) - 1; i >= 0; i-- {
		if !s.samples[i].Failed {
			return s.samples[i]
		}
	}
	return memberSample{}
}

func (s *memberSampler) all() []memberSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.samples)
}

// quorumCheck says what checkQuorum holds the samples to.
type quorumCheck struct {
	// formed tells the first sample the checks start from.
	formed func(memberSample) bool
	// maxVoting is the most voting members allowed.
	maxVoting int
	// desired is the control plane's size: the healthy voting members
	// are never fewer than a quorum of it, nor of the members there are
	// (a cluster shrunk to one member has a quorum of itself, and has
	// lost its fault tolerance all the same).
	desired int
	// minHealthy, when set, is the fewest healthy voting members allowed
	// (a scenario where no member should ever be down).
	minHealthy int
}

// checkQuorum checks the samples taken while capstan was up, from the
// first that formed on: never more than maxVoting voting members, never
// the bootstrap member among them, never fewer healthy ones than a quorum
// (of the desired size and of the members there are) in two samples in a
// row, nor fewer than minHealthy in three (a member too slow to answer
// once, on a loaded machine, is not a lost one; a member lost stays lost
// for a while).
func checkQuorum(samples []memberSample, q quorumCheck) []Violation {
	var out []Violation
	started := false
	need := func(s *memberSample) int { return max(quorum(len(s.Voting)), quorum(q.desired)) }
	lacking := func(s *memberSample) bool { return s.Healthy < need(s) }
	var mostVoting, fewestHealthy, below, bootstrap *memberSample
	run := 0
	var prev *memberSample
	// blindFrom is the first of the failed samples since the last that
	// answered, all while up; blind the longest such stretch, to the
	// next answer.
	var blindFrom *memberSample
	var blind time.Duration
	var blindAt time.Time
	for i := range samples {
		s := &samples[i]
		started = started || (!s.Failed && q.formed(*s))
		if !started || !s.Up {
			prev, run, blindFrom = nil, 0, nil
			continue
		}
		if blindFrom != nil {
			if d := s.At.Sub(blindFrom.At); d > blind {
				blind, blindAt = d, blindFrom.At
			}
		}
		if s.Failed {
			if blindFrom == nil {
				blindFrom = s
			}
			continue
		}
		blindFrom = nil
		if len(s.Voting) > q.maxVoting && (mostVoting == nil || len(s.Voting) > len(mostVoting.Voting)) {
			mostVoting = s
		}
		if bootstrap == nil && slices.Contains(s.Voting, etcd.BootstrapName) {
			bootstrap = s
		}
		if lacking(s) && prev != nil && lacking(prev) {
			worse := s
			if need(prev)-prev.Healthy > need(s)-s.Healthy {
				worse = prev
			}
			if fewestHealthy == nil || need(worse)-worse.Healthy > need(fewestHealthy)-fewestHealthy.Healthy {
				fewestHealthy = worse
			}
		}
		if q.minHealthy > 0 && s.Healthy < q.minHealthy {
			if run++; run >= 3 && (below == nil || s.Healthy < below.Healthy) {
				below = s
			}
		} else {
			run = 0
		}
		prev = s
	}
	if !started {
		out = append(out, Violation{"etcd members", "the members never formed"})
	}
	if blind > unobservedLimit {
		out = append(out, Violation{"etcd quorum", fmt.Sprintf("etcd gave no member list for %.1fs from %s while capstan was up: no quorum can be shown for it (%s allowed)",
			blind.Seconds(), blindAt.Format("15:04:05.000"), unobservedLimit)})
	}
	if s := mostVoting; s != nil {
		out = append(out, Violation{"etcd members", fmt.Sprintf("%d voting members at %s (%v), at most %d allowed",
			len(s.Voting), s.At.Format("15:04:05.000"), s.Voting, q.maxVoting)})
	}
	if s := bootstrap; s != nil {
		out = append(out, Violation{"etcd members", fmt.Sprintf("the bootstrap member voted at %s (%v) while capstan said it was up: up is fault-tolerant only without it",
			s.At.Format("15:04:05.000"), s.Voting)})
	}
	if s := fewestHealthy; s != nil {
		out = append(out, Violation{"etcd quorum", fmt.Sprintf("%d healthy voting members of %d at %s (%v), and no quorum in the sample before either, at least %d wanted (a quorum of the %d desired and of the members there are)",
			s.Healthy, len(s.Voting), s.At.Format("15:04:05.000"), s.Voting, need(s), q.desired)})
	}
	if s := below; s != nil {
		out = append(out, Violation{"etcd members healthy", fmt.Sprintf("%d healthy voting members of %d at %s (%v) for three samples in a row, at least %d wanted: no member is down in this scenario",
			s.Healthy, len(s.Voting), s.At.Format("15:04:05.000"), s.Voting, q.minHealthy)})
	}
	return out
}

// unobservedLimit is the longest etcd may go without answering the
// sampler while capstan is up: a leader election and a slow answer on a
// loaded machine, not more.
const unobservedLimit = 5 * time.Second

// quorum is the majority of n voting members.
func quorum(n int) int { return n/2 + 1 }
