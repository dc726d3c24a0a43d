package simulate

import (
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/sim"
)

// capstanSnapshot is validSnapshot with its node simulated by capstan.
func capstanSnapshot() *Snapshot {
	s := validSnapshot()
	s.Objects["v1/nodes"][0].SetAnnotations(map[string]string{sim.NodeInstanceAnnotation: "worker-0"})
	return s
}

func withProfile(s *Snapshot, profile string) *Snapshot {
	sched := object("config.openshift.io/v1", "Scheduler", "", "cluster")
	sched.Object["spec"] = map[string]any{"profile": profile}
	s.Objects["config.openshift.io/v1/schedulers"] = append(s.Objects["config.openshift.io/v1/schedulers"], sched)
	return s
}

func TestTheSchedulerIsChosenByTheSnapshot(t *testing.T) {
	policy := Change{Kind: ChangePolicy, Arg: "policy.json"}
	cordon := Change{Kind: ChangeCordon, Arg: "worker-0"}
	for _, tc := range []struct {
		name    string
		snap    *Snapshot
		changes []Change
		asked   string
		want    SchedulerUsed
	}{
		{"a capstan cluster", capstanSnapshot(), []Change{cordon}, "",
			SchedulerUsed{Name: SchedulerCapstan, Why: "the snapshot is of a cluster capstan runs"}},
		{"another cluster, no Scheduler", validSnapshot(), []Change{cordon}, SchedulerAuto,
			SchedulerUsed{Name: SchedulerKube, Profile: "LowNodeUtilization", ProfileFrom: "upstream's default, as the snapshot has no Scheduler",
				Why: "the snapshot is of a cluster capstan does not run"}},
		{"another cluster's profile", withProfile(validSnapshot(), "NoScoring"), []Change{cordon}, "",
			SchedulerUsed{Name: SchedulerKube, Profile: "NoScoring", ProfileFrom: "from schedulers.config.openshift.io/cluster",
				Why: "the snapshot is of a cluster capstan does not run"}},
		{"an empty profile", withProfile(validSnapshot(), ""), []Change{cordon}, "",
			SchedulerUsed{Name: SchedulerKube, Profile: "LowNodeUtilization", ProfileFrom: "the default, as schedulers.config.openshift.io/cluster names none",
				Why: "the snapshot is of a cluster capstan does not run"}},
		{"kube-scheduler asked for a capstan cluster", withProfile(capstanSnapshot(), "HighNodeUtilization"), []Change{cordon}, SchedulerKube,
			SchedulerUsed{Name: SchedulerKube, Profile: "HighNodeUtilization", ProfileFrom: "from schedulers.config.openshift.io/cluster", Why: "--scheduler kube-scheduler"}},
		{"capstan asked for another cluster", validSnapshot(), []Change{cordon}, SchedulerCapstan,
			SchedulerUsed{Name: SchedulerCapstan, Why: "--scheduler capstan"}},
		{"a Policy", validSnapshot(), []Change{policy, cordon}, "",
			SchedulerUsed{Name: SchedulerCapstan, Why: "the change policy=policy.json is a Policy, which capstan's scheduler runs"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := chooseScheduler(tc.snap, tc.changes, tc.asked)
			if err != nil || got != tc.want {
				t.Errorf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestASchedulerThatCannotRunIsRefused(t *testing.T) {
	for _, tc := range []struct {
		snap    *Snapshot
		changes []Change
		asked   string
		want    string
	}{
		{validSnapshot(), nil, "default-scheduler", `--scheduler "default-scheduler": want one of auto, capstan, kube-scheduler`},
		{validSnapshot(), []Change{{Kind: ChangePolicy, Arg: "p.json"}}, SchedulerKube,
			"--scheduler kube-scheduler with the change policy=p.json: a Policy is what capstan's scheduler runs, not kube-scheduler"},
		{withProfile(validSnapshot(), "Packed"), nil, "",
			`schedulers.config.openshift.io/cluster: scheduler profile "Packed": want one of LowNodeUtilization, HighNodeUtilization, NoScoring`},
	} {
		_, err := chooseScheduler(tc.snap, tc.changes, tc.asked)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s with %v: err %v, want %q", tc.asked, tc.changes, err, tc.want)
		}
	}
}

// Anonymizing takes away the node annotations that show a capstan
// cluster; the file says whose it is instead, and a format-1 file,
// which does not, is read by its nodes.
func TestAnAnonymizedCapstanSnapshotIsStillCapstans(t *testing.T) {
	s := capstanSnapshot()
	if err := s.Anonymize(); err != nil {
		t.Fatal(err)
	}
	if s.Objects["v1/nodes"][0].GetAnnotations()[sim.NodeInstanceAnnotation] != "" {
		t.Fatal("the anonymized node kept its instance annotation; this test needs one without")
	}
	loaded, err := Load("snap.json", encode(t, s))
	if err != nil {
		t.Fatal(err)
	}
	if loaded.Cluster != ClusterCapstan || !loaded.OfCapstan() {
		t.Errorf("cluster %q: an anonymized capstan snapshot is not capstan's", loaded.Cluster)
	}
	other := validSnapshot()
	if err := other.Anonymize(); err != nil {
		t.Fatal(err)
	}
	if other.Cluster != ClusterOther || other.OfCapstan() {
		t.Errorf("cluster %q: another cluster's anonymized snapshot is capstan's", other.Cluster)
	}
	old := capstanSnapshot()
	old.Format = 1
	if loaded, err := Load("old.json", encode(t, old)); err != nil || !loaded.OfCapstan() {
		t.Errorf("a format-1 snapshot of a capstan cluster: %v, capstan's %v", err, loaded != nil && loaded.OfCapstan())
	}
}
