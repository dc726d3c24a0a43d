package cvo

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	configv1 "github.com/openshift/api/config/v1"
	configfake "github.com/openshift/client-go/config/clientset/versioned/fake"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/capstan-dev/capstan/internal/waitfor"
)

// hangingServer accepts requests and never answers them (until the test
// ends): an update service or a Prometheus that went dark.
func hangingServer(t *testing.T) string {
	t.Helper()
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stop:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() {
		close(stop)
		srv.Close()
	})
	return srv.URL
}

// The update service and the PromQL endpoint are asked in a loop of their
// own: while they do not answer, a new desiredUpdate is still acted on at
// once (here: found invalid).
func TestHangingUpstreamsDoNotHoldTheClusterVersion(t *testing.T) {
	for _, tc := range []struct {
		name string
		// status is the ClusterVersion's status before the operator runs.
		status func(promql string) configv1.ClusterVersionStatus
		opts   func(upstream, promql string) Options
	}{
		{
			name:   "an update service that does not answer",
			status: func(string) configv1.ClusterVersionStatus { return configv1.ClusterVersionStatus{} },
			opts:   func(upstream, _ string) Options { return Options{Upstream: upstream} },
		},
		{
			name: "a PromQL endpoint that does not answer",
			status: func(string) configv1.ClusterVersionStatus {
				return configv1.ClusterVersionStatus{ConditionalUpdates: []configv1.ConditionalUpdate{{
					Release: configv1.Release{Version: "4.10.26", Image: "r@sha256:26"},
					Risks: []configv1.ConditionalUpdateRisk{{Name: "Hangs", URL: "https://example.com/hangs", Message: "a query that hangs",
						MatchingRules: []configv1.ClusterCondition{{Type: "PromQL", PromQL: &configv1.PromQLClusterCondition{PromQL: "vector(1)"}}}}},
				}}}
			},
			// The update service is not asked between checks: the risks are.
			opts: func(_, promql string) Options {
				return Options{PromQLURL: promql, MinimumUpdateCheckInterval: func() time.Duration { return time.Hour }}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			upstream, promql := hangingServer(t), hangingServer(t)
			status := tc.status(promql)
			status.Desired.Version = "4.10.22"
			cv := &configv1.ClusterVersion{ObjectMeta: metav1.ObjectMeta{Name: Name},
				Spec: configv1.ClusterVersionSpec{ClusterID: "a7c5b5b4-1f3e-4d4b-9a3e-2f1c0d9e8b7a", Channel: "stable-4.10",
					DesiredUpdate: &configv1.Update{Version: "4.10.99"}},
				Status: status}
			config := configfake.NewSimpleClientset(cv)
			opts := tc.opts(upstream, promql)
			opts.Kube, opts.Applier, opts.Architecture = fake.NewClientset(), &Applier{}, "amd64"
			o := New(config, opts)
			if strings.Contains(tc.name, "PromQL") {
				// Checked once (an hour ago, as far as it knows): only the
				// risks are evaluated now.
				o.lastAsked = "|stable-4.10|amd64|4.10.22"
				o.lastCheck, o.nextPeriod = time.Now(), time.Hour
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- o.Run(ctx) }()
			defer func() {
				cancel()
				<-done
			}()
			err := waitfor.Poll(ctx, 50*time.Millisecond, 30*time.Second, waitfor.Simple(func(ctx context.Context) (bool, string) {
				got, err := config.ConfigV1().ClusterVersions().Get(ctx, Name, metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				c := FindCondition(got.Status.Conditions, Invalid)
				return c != nil && c.Status == configv1.ConditionTrue, "no Invalid condition"
			}))
			if err != nil {
				t.Fatalf("the invalid desiredUpdate was not acted on while the upstream hung: %v", err)
			}
		})
	}
}

// The retrieval of an image an earlier pass started (a CVO stopped before
// taking the release on) is used, not made again: a finished Job is used
// as it is, a failed one replaced.
func TestRetrievalIsNotMadeTwice(t *testing.T) {
	const image = "registry.example/ocp/release@sha256:26"
	label := fmt.Sprintf("%x", sha256.Sum256([]byte(image)))[:16]
	job := func(name string, cond batchv1.JobConditionType) *batchv1.Job {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, Labels: map[string]string{retrievedImageLabel: label}},
			Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: cond, Status: corev1.ConditionTrue, Reason: "R", Message: "m"}}}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	kube := fake.NewClientset(job("version-4.10.26-aaaaa", batchv1.JobComplete))
	w := &worker{o: New(configfake.NewSimpleClientset(), Options{Kube: kube}), target: target{Version: "4.10.26", Image: image}}
	if err := w.runJob(ctx); err != nil {
		t.Fatal(err)
	}
	if list, _ := kube.BatchV1().Jobs(Namespace).List(ctx, metav1.ListOptions{}); len(list.Items) != 1 {
		t.Errorf("%d retrieval jobs, want the finished one alone", len(list.Items))
	}

	kube = fake.NewClientset(job("version-4.10.26-bbbbb", batchv1.JobFailed))
	w = &worker{o: New(configfake.NewSimpleClientset(), Options{Kube: kube}), target: target{Version: "4.10.26", Image: image}}
	done := make(chan error, 1)
	go func() { done <- w.runJob(ctx) }()
	var fresh *batchv1.Job
	err := waitfor.Poll(ctx, 20*time.Millisecond, 20*time.Second, waitfor.Simple(func(ctx context.Context) (bool, string) {
		list, err := kube.BatchV1().Jobs(Namespace).List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 1 || list.Items[0].Name == "version-4.10.26-bbbbb" {
			return false, fmt.Sprintf("jobs %v", list)
		}
		fresh = &list.Items[0]
		return true, ""
	}))
	if err != nil {
		t.Fatalf("the failed job was not replaced by one new job: %v", err)
	}
	fresh.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	if _, err := kube.BatchV1().Jobs(Namespace).UpdateStatus(ctx, fresh, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A step retried for the same target is recorded once: the recorder's
// spam filter allows a few events per object, and retries would leave
// none for the next update's steps.
func TestWorkerRecordsEachStepOnce(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	w := &worker{o: &Operator{recorder: rec}}
	for range 3 {
		w.event(corev1.EventTypeNormal, "RetrievePayload", `Retrieving and verifying payload version="4.10.26"`)
		w.event(corev1.EventTypeWarning, "RetrievePayloadFailed", "unreachable")
	}
	w.event(corev1.EventTypeNormal, "RetrievePayload", `Retrieving and verifying payload version="4.10.27"`)
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	want := []string{`Normal RetrievePayload Retrieving and verifying payload version="4.10.26"`, "Warning RetrievePayloadFailed unreachable",
		`Normal RetrievePayload Retrieving and verifying payload version="4.10.27"`}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events %q, want %q", got, want)
	}
}
