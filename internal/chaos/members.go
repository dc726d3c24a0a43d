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

// run samples every sampleInterval until ctx ends. Samples are taken
// side by side: a member that is down answers only at its timeout, and
// the samples must go on meanwhile, or a short loss would fall between
// two of them.
func (s *memberSampler) run(ctx context.Context) {
	var client *clientv3.Client
	var endpoints []string
	// Clients of former endpoints stay open until the end: a sample may
	// still be using one.
	var clients []*clientv3.Client
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		for _, c := range clients {
			c.Close()
		}
	}()
	inFlight := make(chan struct{}, maxSamplesInFlight)
	t := time.NewTicker(sampleInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		up := s.alive()
		now, err := datadir.StorageEndpoints(s.dataDir)
		if err == nil && (client == nil || !slices.Equal(now, endpoints)) {
			if client, err = datadir.StorageClient(s.dataDir); err != nil {
				client = nil
			} else {
				clients = append(clients, client)
			}
			endpoints = now
		}
		select {
		case inFlight <- struct{}{}:
		default:
			continue // as many samples wait on etcd as allowed: a gap, which the checks see
		}
		wg.Add(1)
		go func(client *clientv3.Client, ok bool) {
			defer func() { <-inFlight; wg.Done() }()
			sample := memberSample{At: time.Now(), Failed: true}
			if ok {
				sample = s.sample(ctx, client)
			}
			// A sample that failed is kept: a stretch of them while
			// capstan is up is etcd not answering.
			sample.Up = up && s.alive()
			s.mu.Lock()
			s.samples = append(s.samples, sample)
			s.mu.Unlock()
		}(client, err == nil && client != nil)
	}
}

// maxSamplesInFlight bounds the samples waiting on etcd at once: a
// sample waits two seconds at most, so eight keep the interval.
const maxSamplesInFlight = 8

// sample asks the members themselves, each on its own and without a
// quorum: the member list is a serializable read (a linearizable one
// fails exactly when the quorum is lost, which then goes unseen), and
// each voting member's status says whether it follows a leader. Every
// member is asked at once, so that a sample takes one answer's time.
func (s *memberSampler) sample(ctx context.Context, client *clientv3.Client) memberSample {
	sample := memberSample{At: time.Now()}
	lctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	list, err := client.MemberList(lctx, clientv3.WithSerializable())
	if err != nil {
		sample.Failed = true
		return sample
	}
	names := map[uint64]string{}
	for _, m := range list.Members {
		names[m.ID] = m.Name
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, m := range list.Members {
		if m.IsLearner {
			sample.Learners++
			continue
		}
		sample.Voting = append(sample.Voting, m.Name)
		if len(m.ClientURLs) == 0 {
			continue // added, never started
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Generous: a loaded machine answers slowly, and a slow
			// answer is not a lost member.
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			st, err := client.Status(sctx, m.ClientURLs[0])
			cancel()
			if err == nil && st.Leader != 0 {
				mu.Lock()
				sample.Healthy++
				sample.Leader = names[st.Leader]
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	sort.Strings(sample.Voting)
	return sample
}

// last is the latest sample that answered (none: the zero sample).
func (s *memberSampler) last() memberSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	// A failed sample says nothing of the members: the last that
	// answered does (samples end out of order: the latest taken).
	var last memberSample
	found := false
	for _, sample := range s.samples {
		if !sample.Failed && (!found || !sample.At.Before(last.At)) {
			last, found = sample, true
		}
	}
	return last
}

// all is every sample, in the order they were taken.
func (s *memberSampler) all() []memberSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.samples)
	slices.SortStableFunc(out, func(a, b memberSample) int { return a.At.Compare(b.At) })
	return out
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
	// writesFailed tells whether a write to the API failed, capstan up
	// throughout, between two instants: a sample that got no answer
	// from any member then counts as the quorum lost, not as a sample
	// missed (nil: never).
	writesFailed func(from, to time.Time) bool
}

// checkQuorum checks the samples taken while capstan was up, from the
// first that formed on: never more than maxVoting voting members, never
// the bootstrap member among them, never fewer healthy ones than a quorum
// (of the desired size and of the members there are) for lossLimit or
// more, nor fewer than minHealthy for belowLimit. A sample no member
// answered counts as no quorum when a write failed meanwhile; otherwise
// it is a sample missed, and etcd may go unobserved for unobservedLimit
// at most.
func checkQuorum(samples []memberSample, q quorumCheck) []Violation {
	var out []Violation
	started := false
	need := func(s *memberSample) int { return max(quorum(len(s.Voting)), quorum(q.desired)) }
	var mostVoting, bootstrap *memberSample
	// The worst stretch without a quorum (and below minHealthy): its
	// start, its length, and its sample with the fewest healthy.
	loss, below := stretch{limit: lossLimit}, stretch{limit: belowLimit}
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
			prev, blindFrom = nil, nil
			loss.end()
			below.end()
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
			if prev != nil && q.writesFailed != nil && q.writesFailed(prev.At, s.At) {
				loss.add(s, -1)
			}
			prev = s
			continue
		}
		blindFrom = nil
		if len(s.Voting) > q.maxVoting && (mostVoting == nil || len(s.Voting) > len(mostVoting.Voting)) {
			mostVoting = s
		}
		if bootstrap == nil && slices.Contains(s.Voting, etcd.BootstrapName) {
			bootstrap = s
		}
		if s.Healthy < need(s) {
			loss.add(s, need(s)-s.Healthy)
		} else {
			loss.end()
		}
		if q.minHealthy > 0 && s.Healthy < q.minHealthy {
			below.add(s, q.minHealthy-s.Healthy)
		} else {
			below.end()
		}
		prev = s
	}
	loss.end()
	below.end()
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
	if w := loss.worst; w.sample != nil {
		s := w.sample
		if s.Failed {
			out = append(out, Violation{"etcd quorum", fmt.Sprintf("no quorum for %.2fs from %s: no member answered, and the API refused writes meanwhile (%s allowed, an election)",
				w.length.Seconds(), w.from.Format("15:04:05.000"), lossLimit)})
		} else {
			out = append(out, Violation{"etcd quorum", fmt.Sprintf("%d healthy voting members of %d at %s (%v), no quorum for %.2fs from %s, at least %d wanted (a quorum of the %d desired and of the members there are; %s allowed, an election)",
				s.Healthy, len(s.Voting), s.At.Format("15:04:05.000"), s.Voting, w.length.Seconds(), w.from.Format("15:04:05.000"), need(s), q.desired, lossLimit)})
		}
	}
	if w := below.worst; w.sample != nil {
		s := w.sample
		out = append(out, Violation{"etcd members healthy", fmt.Sprintf("%d healthy voting members of %d at %s (%v) for %.2fs, at least %d wanted: no member is down in this scenario",
			s.Healthy, len(s.Voting), s.At.Format("15:04:05.000"), s.Voting, w.length.Seconds(), q.minHealthy)})
	}
	return out
}

// stretch follows consecutive samples that lack something, and keeps the
// worst stretch that lasted lossLimit or more.
type stretch struct {
	limit   time.Duration
	from    time.Time
	last    time.Time
	sample  *memberSample
	short   int // how many members short the sample is (-1: unknown)
	worst   stretchSeen
	ongoing bool
}

type stretchSeen struct {
	from   time.Time
	length time.Duration
	sample *memberSample
}

func (st *stretch) add(s *memberSample, short int) {
	if !st.ongoing {
		st.ongoing, st.from, st.sample, st.short = true, s.At, s, short
	}
	if short > st.short {
		st.sample, st.short = s, short
	}
	st.last = s.At
}

func (st *stretch) end() {
	if !st.ongoing {
		return
	}
	st.ongoing = false
	if d := st.last.Sub(st.from); d >= st.limit && d > st.worst.length {
		st.worst = stretchSeen{from: st.from, length: d, sample: st.sample}
	}
}

// sampleInterval is how often the members are sampled.
const sampleInterval = 250 * time.Millisecond

// lossLimit is the shortest stretch without a quorum reported: from the
// first sample without one to the last, two sample intervals, so three
// samples in a row. A leader election leaves the members without a
// leader for less (they name the old one until their election timeout,
// and the vote takes a round trip), and any loss longer is seen.
const lossLimit = 2 * sampleInterval

// belowLimit is the shortest stretch with fewer healthy members than a
// scenario that downs none allows: a member too slow to answer a few
// times on a loaded machine is not a lost one; one lost stays lost for a
// while.
const belowLimit = time.Second

// unobservedLimit is the longest etcd may go without answering the
// sampler while capstan is up: a leader election and a slow answer on a
// loaded machine, not more.
const unobservedLimit = 5 * time.Second

// quorum is the majority of n voting members.
func quorum(n int) int { return n/2 + 1 }
