package cvo

import (
	"fmt"
	"strings"
	"time"

	configv1 "github.com/openshift/api/config/v1"

	"github.com/capstan-dev/capstan/internal/cvo/payload"
)

// FailAfter is how long an error that fails only after an interval (a
// degraded operator during an update) may last before the update is
// Failing.
const FailAfter = 40 * time.Minute

// SyncState is where the application of a release stands.
type SyncState struct {
	Version, Image string
	Mode           payload.Mode
	// Done of Total manifests applied.
	Done, Total int
	// Completed: the whole payload was applied and its operators are
	// done.
	Completed bool
	// Err is what holds it, with how long it has held.
	Err      *payload.UpdateError
	ErrSince time.Duration
}

// summary words an error's reason for the Progressing condition, as the
// CVO's SummaryForReason does.
func summary(reason, name string) string {
	switch reason {
	case "ClusterOperatorDegraded":
		if name != "" {
			return fmt.Sprintf("the cluster operator %s is degraded", name)
		}
		return "a cluster operator is degraded"
	case "ClusterOperatorsDegraded":
		return "some cluster operators are degraded"
	case "ClusterOperatorNotAvailable":
		if name != "" {
			return fmt.Sprintf("the cluster operator %s is not available", name)
		}
		return "a cluster operator is not available"
	case "ClusterOperatorsNotAvailable":
		return "some cluster operators are not available"
	case "ClusterOperatorNoVersions", "ClusterOperatorsNoVersions":
		return "some cluster operators have not yet declared versions"
	case "WorkloadNotAvailable":
		return fmt.Sprintf("the workload %s has not yet successfully rolled out", name)
	case "WorkloadNotProgressing":
		return fmt.Sprintf("the workload %s cannot roll out", name)
	case "UpdatePayloadResourceNotFound", "UpdatePayloadResourceConflict":
		return "some resources could not be updated"
	case "UpdatePayloadClusterDown":
		return "the control plane is down or not responding"
	case "UpdatePayloadClusterError":
		return "the control plane is reporting an internal error"
	case "UpdatePayloadClusterOverloaded":
		return "the control plane is overloaded and is not responding"
	case "UpdatePayloadClusterUnauthorized":
		return "could not authenticate to the server"
	case "UpdatePayloadRetrievalFailed":
		return "could not download the update"
	case "UpdatePayloadResourceForbidden":
		return "forbidden from making changes"
	case "UpdatePayloadResourceTypeMissing":
		return "a required extension is not available to update"
	case "UpdatePayloadResourceInvalid":
		return "some cluster configuration is invalid"
	case "UpdatePayloadIntegrity":
		return "the contents of the update are invalid"
	case "ImageVerificationFailed":
		return "the image may not be safe to use"
	case "UpgradePreconditionCheckFailed":
		return "it may not be safe to apply this update"
	}
	if strings.HasPrefix(reason, "UpdatePayload") {
		return "the update could not be applied"
	}
	return "an unknown error has occurred: " + reason
}

// Conditions gives the Progressing, Failing and Available conditions of a
// sync state, in the CVO's words.
func Conditions(s SyncState) (progressing, failing, available configv1.ClusterOperatorStatusCondition) {
	progressing = configv1.ClusterOperatorStatusCondition{Type: configv1.OperatorProgressing}
	failing = configv1.ClusterOperatorStatusCondition{Type: "Failing", Status: configv1.ConditionFalse}
	available = configv1.ClusterOperatorStatusCondition{Type: configv1.OperatorAvailable, Status: configv1.ConditionFalse}
	if s.Completed {
		available.Status, available.Message = configv1.ConditionTrue, "Done applying "+s.Version
	}
	failed := s.Err != nil && (s.Err.Effect == payload.EffectFail || (s.Err.Effect == payload.EffectFailAfterInterval && s.ErrSince >= FailAfter))
	if failed {
		failing.Status, failing.Reason, failing.Message = configv1.ConditionTrue, s.Err.Reason, s.Err.Message
	}
	reconciling := s.Mode == payload.Reconciling
	switch {
	case failed && reconciling:
		progressing.Status, progressing.Reason = configv1.ConditionFalse, s.Err.Reason
		progressing.Message = fmt.Sprintf("Error while reconciling %s: %s", s.Version, summary(s.Err.Reason, s.Err.Name))
	case failed:
		progressing.Status, progressing.Reason = configv1.ConditionTrue, s.Err.Reason
		progressing.Message = fmt.Sprintf("Unable to apply %s: %s", s.Version, summary(s.Err.Reason, s.Err.Name))
	case reconciling || s.Completed:
		progressing.Status, progressing.Message = configv1.ConditionFalse, "Cluster version is "+s.Version
	default:
		progressing.Status = configv1.ConditionTrue
		progressing.Message = "Working towards " + s.Version
		if s.Total > 0 {
			progressing.Message += fmt.Sprintf(": %d of %d done (%d%% complete)", s.Done, s.Total, s.Done*100/s.Total)
		}
		if s.Err != nil {
			switch s.Err.Effect {
			case payload.EffectNone:
				progressing.Message += ", waiting on " + s.Err.Name
			case payload.EffectFailAfterInterval:
				progressing.Message += fmt.Sprintf(", waiting up to 40 minutes on %s", s.Err.Name)
			}
		}
	}
	return progressing, failing, available
}
