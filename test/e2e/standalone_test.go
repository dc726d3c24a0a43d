package e2e

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capstan-dev/capstan/internal/testenv"
)

// replica is a standalone component's process and its endpoints.
type replica struct {
	p      *testenv.UpProcess
	health string // http://ADDR
}

var healthLine = regexp.MustCompile(`Health: (http://\S+)/healthz`)

func startReplica(t *testing.T, args ...string) *replica {
	t.Helper()
	p := testenv.StartCapstan(t, args...)
	m := healthLine.FindStringSubmatch(p.WaitLine(t, "Health: ", time.Minute))
	if m == nil {
		t.Fatalf("no health address printed:\n%s", p.Output())
	}
	return &replica{p: p, health: m[1]}
}

func (r *replica) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(r.health + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (r *replica) leading() bool { return strings.Contains(r.p.Output(), "Leading: ") }

// waitLeader waits until one of two replicas leads, and fails if both do.
func waitLeader(t *testing.T, a, b *replica) (leader, standby *replica) {
	t.Helper()
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		switch {
		case a.leading() && b.leading():
			t.Fatalf("both replicas lead:\n%s\n---\n%s", a.p.Output(), b.p.Output())
		case a.leading():
			leader, standby = a, b
		case b.leading():
			leader, standby = b, a
		}
		return leader != nil, "neither replica leads"
	})
	return leader, standby
}

// Two replicas of a standalone component: one holds the lease and acts,
// the other stands by and says so on /readyz and in its metrics; killed,
// the leader is replaced by the other once the lease runs out.
func TestStandaloneReplicasTakeOverWhenTheLeaderIsKilled(t *testing.T) {
	ns := env.Namespace(t, "standalone")
	const name, lease = "standalone-ha", 4 * time.Second
	args := []string{"scheduler", "--kubeconfig", env.Kubeconfig, "--as-admin", "--scheduler-name", name, "--leader-elect",
		"--leader-elect-lease-duration", lease.String(), "--leader-elect-renew-deadline", "3s", "--leader-elect-retry-period", "500ms",
		"--health-address", "127.0.0.1:0"}
	leader, standby := waitLeader(t, startReplica(t, args...), startReplica(t, args...))
	for _, c := range []struct {
		r     *replica
		want  string
		gauge string
	}{{leader, "ok: leading", `leader_election_master_status{name="scheduler"} 1`}, {standby, "ok: standing by", `leader_election_master_status{name="scheduler"} 0`}} {
		if code, body := c.r.get(t, "/readyz"); code != http.StatusOK || !strings.Contains(body, c.want) {
			t.Errorf("/readyz: %d %q, want %q", code, body, c.want)
		}
		if code, body := c.r.get(t, "/healthz"); code != http.StatusOK {
			t.Errorf("/healthz: %d %q", code, body)
		}
		if _, body := c.r.get(t, "/metrics"); !strings.Contains(body, c.gauge) {
			t.Errorf("/metrics has no %s", c.gauge)
		}
	}

	schedule := func(pod string) {
		t.Helper()
		p := simplePod(pod, nil)
		p.Spec.SchedulerName = name
		env.CreatePod(t, ns, p)
		waitScheduled(t, ns, pod)
	}
	schedule("before")
	before, err := env.Client.CoordinationV1().Leases("kube-system").Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	leader.p.Kill(t)
	killed := time.Now()
	standby.p.WaitLine(t, "Leading: ", lease+time.Minute)
	t.Logf("the stand-by took the lease %s after the leader was killed (lease duration %s)", time.Since(killed).Round(100*time.Millisecond), lease)
	after, err := env.Client.CoordinationV1().Leases("kube-system").Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *after.Spec.HolderIdentity == *before.Spec.HolderIdentity || *after.Spec.LeaseTransitions != *before.Spec.LeaseTransitions+1 {
		t.Errorf("the lease went from %s (transitions %d) to %s (transitions %d)", *before.Spec.HolderIdentity, *before.Spec.LeaseTransitions,
			*after.Spec.HolderIdentity, *after.Spec.LeaseTransitions)
	}
	// The old leader never renewed after it was killed: the new one took
	// the lease only once it had expired.
	if acquired := after.Spec.AcquireTime.Time; acquired.Before(before.Spec.RenewTime.Add(lease)) {
		t.Errorf("the lease was taken at %s, before the old one expired (renewed %s, %s)", acquired, before.Spec.RenewTime.Time, lease)
	}
	schedule("after")
	if code, body := standby.get(t, "/readyz"); !strings.Contains(body, "ok: leading") {
		t.Errorf("the new leader's /readyz: %d %q", code, body)
	}
}
