package component

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/capstan-dev/capstan/internal/leader"
)

// syncBuffer is an Out the test reads while Run writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var healthURL = regexp.MustCompile(`Health: (http://\S+)/healthz`)

// Leading, the work runs and the endpoints say so; when ctx ends, the
// work stops and Run returns nil, the lease given up.
func TestRunLeadsServesAndStops(t *testing.T) {
	client := fake.NewClientset()
	out := &syncBuffer{}
	ctx, cancel := context.WithCancel(t.Context())
	working := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Name: "test", Client: client, LeaderElect: true, HealthAddress: "127.0.0.1:0", Out: out,
			Lease: leader.Config{Namespace: "kube-system", Name: "test", Identity: "me",
				LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 50 * time.Millisecond}},
			func(ctx context.Context) error {
				close(working)
				<-ctx.Done()
				return nil
			})
	}()
	<-working
	m := healthURL.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no health address printed: %q", out.String())
	}
	if code, body := get(t, m[1]+"/readyz"); code != http.StatusOK || !strings.Contains(body, "leading") {
		t.Errorf("/readyz: %d %q", code, body)
	}
	if code, body := get(t, m[1]+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if _, body := get(t, m[1]+"/metrics"); !strings.Contains(body, `leader_election_master_status{name="test"} 1`) {
		t.Errorf("/metrics:\n%s", body)
	}
	if !strings.Contains(out.String(), "Leading: holding the Lease kube-system/test") {
		t.Errorf("output: %q", out.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run returned %v after ctx ended", err)
	}
	if _, err := http.Get(m[1] + "/healthz"); err == nil {
		t.Error("the endpoints still serve after Run returned")
	}
}

// Work that fails ends Run with its error; a busy address is refused
// before anything runs.
func TestRunReturnsTheWorksErrorAndRefusesABusyAddress(t *testing.T) {
	boom := errors.New("boom")
	err := Run(t.Context(), Options{Name: "test"}, func(context.Context) error { return boom })
	if !errors.Is(err, boom) {
		t.Errorf("Run returned %v, want the work's error", err)
	}
	out := &syncBuffer{}
	release := make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- Run(t.Context(), Options{Name: "first", HealthAddress: "127.0.0.1:0", Out: out}, func(context.Context) error {
			<-release
			return nil
		})
	}()
	var addr string
	for addr == "" {
		if m := healthURL.FindStringSubmatch(out.String()); m != nil {
			addr = strings.TrimPrefix(m[1], "http://")
		}
		time.Sleep(10 * time.Millisecond)
	}
	ran := false
	err = Run(t.Context(), Options{Name: "second", HealthAddress: addr}, func(context.Context) error { ran = true; return nil })
	if err == nil || ran || !strings.Contains(err.Error(), "health and metrics address") {
		t.Errorf("a busy address: %v (work ran: %v)", err, ran)
	}
	close(release)
	if err := <-first; err != nil {
		t.Error(err)
	}
}
