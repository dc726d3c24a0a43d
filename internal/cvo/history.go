package cvo

import (
	"github.com/blang/semver/v4"
	configv1 "github.com/openshift/api/config/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MaxHistory is how many updates status.history keeps.
const MaxHistory = 100

// sameRelease reports whether a history entry is the desired release:
// the same image, or the same version where an image is missing.
func sameRelease(h configv1.UpdateHistory, r configv1.Release) bool {
	if h.Image != "" && r.Image != "" {
		return h.Image == r.Image
	}
	return h.Version != "" && h.Version == r.Version
}

// MergeHistory records in the history (newest first) that the cluster
// works towards desired, and whether it got there: the entry of the same
// release is updated in place (Completed once done, its completion time
// set once); another release closes the current entry and starts a new
// Partial one. The history is then pruned to MaxHistory.
func MergeHistory(history []configv1.UpdateHistory, desired configv1.Release, completed, verified bool, acceptedRisks string, now metav1.Time) []configv1.UpdateHistory {
	if desired.Image == "" {
		return history
	}
	if len(history) > 0 && sameRelease(history[0], desired) {
		h := &history[0]
		if desired.Version != "" {
			h.Version = desired.Version
		}
		if completed && h.State != configv1.CompletedUpdate {
			h.State = configv1.CompletedUpdate
			h.CompletionTime = &now
		}
		return history
	}
	if len(history) > 0 && history[0].CompletionTime == nil {
		history[0].CompletionTime = &now
	}
	entry := configv1.UpdateHistory{State: configv1.PartialUpdate, StartedTime: now, Version: desired.Version,
		Image: desired.Image, Verified: verified, AcceptedRisks: acceptedRisks}
	if completed {
		entry.State, entry.CompletionTime = configv1.CompletedUpdate, &now
	}
	history = append([]configv1.UpdateHistory{entry}, history...)
	for len(history) > MaxHistory {
		history = pruneOne(history)
	}
	return history
}

// pruneOne drops the entry that says least, ranked as the CVO ranks
// them: the five newest, the first install and the newest Completed entry
// are kept; the first and last Completed of each minor, and partial
// updates across minors, weigh more; partial z-stream updates less; and
// among equals the older goes.
func pruneOne(history []configv1.UpdateHistory) []configv1.UpdateHistory {
	last := len(history) - 1
	newestCompleted := -1
	for i, h := range history {
		if h.State == configv1.CompletedUpdate {
			newestCompleted = i
			break
		}
	}
	minor := func(h configv1.UpdateHistory) (uint64, uint64, bool) {
		v, err := semver.Parse(h.Version)
		return v.Major, v.Minor, err == nil
	}
	// First and last Completed of every minor.
	edges := map[int]bool{}
	seen := map[[2]uint64]int{}
	for i, h := range history {
		if h.State != configv1.CompletedUpdate {
			continue
		}
		if maj, min, ok := minor(h); ok {
			k := [2]uint64{maj, min}
			if _, ok := seen[k]; !ok {
				edges[i] = true // the newest of this minor
			}
			seen[k] = i // ends as the oldest
		}
	}
	for _, i := range seen {
		edges[i] = true
	}
	worst, worstRank := -1, 0.0
	for i, h := range history {
		rank := -1.01 * float64(i)
		switch {
		case i < 5 || i == last || i == newestCompleted:
			rank += 1000
		case edges[i]:
			rank += 30
		case h.State == configv1.PartialUpdate && i < last:
			maj, min, ok := minor(h)
			pmaj, pmin, pok := minor(history[i+1])
			if ok && pok && (maj != pmaj || min != pmin) {
				rank += 20
			} else {
				rank -= 20
			}
		}
		if worst < 0 || rank < worstRank {
			worst, worstRank = i, rank
		}
	}
	return append(history[:worst:worst], history[worst+1:]...)
}
