package cvo

import (
	"fmt"
	"testing"
	"time"

	configv1 "github.com/openshift/api/config/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMergeHistory(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2022, 7, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Hour))
	t2 := metav1.NewTime(t0.Add(2 * time.Hour))
	r22 := configv1.Release{Version: "4.10.22", Image: "img@sha256:22"}
	r26 := configv1.Release{Version: "4.10.26", Image: "img@sha256:26"}

	h := MergeHistory(nil, r22, false, true, "", t0)
	if len(h) != 1 || h[0].State != configv1.PartialUpdate || h[0].CompletionTime != nil || !h[0].Verified {
		t.Fatalf("first entry: %+v", h)
	}
	h = MergeHistory(h, r22, true, true, "", t1)
	if len(h) != 1 || h[0].State != configv1.CompletedUpdate || !h[0].CompletionTime.Equal(&t1) {
		t.Fatalf("completed in place: %+v", h)
	}
	h = MergeHistory(h, r22, true, true, "", t2)
	if !h[0].CompletionTime.Equal(&t1) {
		t.Errorf("the completion time moved: %v", h[0].CompletionTime)
	}
	h = MergeHistory(h, r26, false, false, "Forced through blocking failures", t2)
	if len(h) != 2 || h[0].Version != "4.10.26" || h[0].State != configv1.PartialUpdate || h[0].Verified || h[0].AcceptedRisks == "" || h[1].Version != "4.10.22" {
		t.Fatalf("a new update: %+v", h)
	}
	if MergeHistory(h, configv1.Release{Version: "4.10.27"}, false, false, "", t2)[0].Version != "4.10.26" {
		t.Error("an update without an image made history")
	}
}

func TestHistoryIsCappedKeepingWhatMatters(t *testing.T) {
	now := metav1.NewTime(time.Date(2022, 7, 1, 0, 0, 0, 0, time.UTC))
	var h []configv1.UpdateHistory
	// 4.1.0 installed, then 150 updates, a few of them not completed.
	for i := 0; i <= 150; i++ {
		r := configv1.Release{Version: fmt.Sprintf("4.%d.%d", 1+i/20, i%20), Image: fmt.Sprintf("img@%d", i)}
		h = MergeHistory(h, r, i%7 != 3, true, "", metav1.NewTime(now.Add(time.Duration(i)*time.Hour)))
	}
	if len(h) != MaxHistory {
		t.Fatalf("%d entries, want %d", len(h), MaxHistory)
	}
	if h[len(h)-1].Version != "4.1.0" {
		t.Errorf("the install is gone: oldest is %s", h[len(h)-1].Version)
	}
	for i := 0; i < 5; i++ {
		if h[i].Image != fmt.Sprintf("img@%d", 150-i) {
			t.Errorf("entry %d is %s, the five newest must stay", i, h[i].Image)
		}
	}
}
