package simulate

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/kubesched"
	"github.com/capstan-dev/capstan/internal/sim"
)

// The schedulers a simulation can run (RunOptions.Scheduler).
const (
	// SchedulerAuto picks by the snapshot: capstan's scheduler for a
	// cluster capstan runs, kube-scheduler for any other.
	SchedulerAuto    = "auto"
	SchedulerCapstan = "capstan"
	SchedulerKube    = "kube-scheduler"
)

// Schedulers are the values RunOptions.Scheduler takes.
var Schedulers = []string{SchedulerAuto, SchedulerCapstan, SchedulerKube}

// The values of Snapshot.Cluster.
const (
	ClusterCapstan = "capstan"
	ClusterOther   = "other"
)

// OfCapstan reports whether the snapshot is of a cluster capstan runs:
// as the file says, or, when it does not, as its nodes show (every one
// simulated by capstan).
func (s *Snapshot) OfCapstan() bool {
	if s.Cluster != "" {
		return s.Cluster == ClusterCapstan
	}
	nodes := s.Objects["v1/nodes"]
	for _, n := range nodes {
		if n.GetAnnotations()[sim.NodeInstanceAnnotation] == "" {
			return false
		}
	}
	return len(nodes) > 0
}

// markCluster writes down whose cluster the snapshot is of, before
// something (anonymizing) takes away what shows it.
func (s *Snapshot) markCluster() {
	if s.Cluster != "" {
		return
	}
	if s.OfCapstan() {
		s.Cluster = ClusterCapstan
	} else {
		s.Cluster = ClusterOther
	}
}

// SchedulerUsed is the scheduler a simulation ran, and why that one.
type SchedulerUsed struct {
	// Name is SchedulerCapstan or SchedulerKube.
	Name string `json:"name"`
	// Profile is kube-scheduler's OpenShift profile, and ProfileFrom
	// where it came from.
	Profile     string `json:"profile,omitempty"`
	ProfileFrom string `json:"profileFrom,omitempty"`
	// Why says what chose the scheduler.
	Why string `json:"why"`
}

func (u SchedulerUsed) String() string {
	if u.Profile != "" {
		sep := ", "
		if strings.HasPrefix(u.ProfileFrom, "from ") {
			sep = " "
		}
		return fmt.Sprintf("%s with profile %s%s%s (%s)", u.Name, u.Profile, sep, u.ProfileFrom, u.Why)
	}
	return fmt.Sprintf("%s (%s)", u.Name, u.Why)
}

// schedulerProfile is the profile of the snapshot's Scheduler
// (config.openshift.io/v1, named cluster), and where it came from.
func schedulerProfile(s *Snapshot) (string, string, error) {
	for _, u := range s.Objects["config.openshift.io/v1/schedulers"] {
		if u.GetName() != "cluster" {
			continue
		}
		p, _, _ := unstructured.NestedString(u.Object, "spec", "profile")
		if _, err := kubesched.Config(p, "-", 0, 0, 0); err != nil {
			return "", "", fmt.Errorf("schedulers.config.openshift.io/cluster: %w", err)
		}
		if p == "" {
			return kubesched.LowNodeUtilization, "the default, as schedulers.config.openshift.io/cluster names none", nil
		}
		return p, "from schedulers.config.openshift.io/cluster", nil
	}
	return kubesched.LowNodeUtilization, "upstream's default, as the snapshot has no Scheduler", nil
}

// chooseScheduler picks the scheduler for a run: the one asked for
// (SchedulerAuto or "": by the snapshot), capstan's for a Policy change.
func chooseScheduler(s *Snapshot, changes []Change, asked string) (SchedulerUsed, error) {
	policy := ""
	for _, c := range changes {
		if c.Kind == ChangePolicy {
			policy = c.String()
		}
	}
	switch asked {
	case "", SchedulerAuto, SchedulerCapstan, SchedulerKube:
	default:
		return SchedulerUsed{}, fmt.Errorf("--scheduler %q: want one of %s", asked, strings.Join(Schedulers, ", "))
	}
	switch {
	case policy != "" && asked == SchedulerKube:
		return SchedulerUsed{}, fmt.Errorf("--scheduler %s with the change %s: a Policy is what capstan's scheduler runs, not kube-scheduler", SchedulerKube, policy)
	case policy != "":
		return SchedulerUsed{Name: SchedulerCapstan, Why: "the change " + policy + " is a Policy, which capstan's scheduler runs"}, nil
	case asked == SchedulerCapstan:
		return SchedulerUsed{Name: SchedulerCapstan, Why: "--scheduler " + SchedulerCapstan}, nil
	case asked != SchedulerKube && s.OfCapstan():
		return SchedulerUsed{Name: SchedulerCapstan, Why: "the snapshot is of a cluster capstan runs"}, nil
	}
	profile, from, err := schedulerProfile(s)
	if err != nil {
		return SchedulerUsed{}, err
	}
	why := "the snapshot is of a cluster capstan does not run"
	if asked == SchedulerKube {
		why = "--scheduler " + SchedulerKube
	}
	return SchedulerUsed{Name: SchedulerKube, Profile: profile, ProfileFrom: from, Why: why}, nil
}

// use sets the private cluster's default-scheduler to the one chosen.
func (u SchedulerUsed) use(opts *cluster.Options) {
	if u.Name != SchedulerKube {
		return
	}
	opts.Scheduler = nil
	opts.KubeScheduler = &cluster.KubeSchedulerOptions{Profile: u.Profile}
}
