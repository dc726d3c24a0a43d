package cvo

import (
	"fmt"
	"strings"

	"github.com/blang/semver/v4"
	configv1 "github.com/openshift/api/config/v1"
)

// PreconditionError is a precondition that does not hold for an update.
type PreconditionError struct {
	Name, Reason, Message string
	// NonBlocking errors are warnings: recorded, not holding the update.
	NonBlocking bool
}

func (e *PreconditionError) Error() string { return e.Message }

// Preconditions checks an update from the ClusterVersion's current target
// to target, in the CVO's order: no rollback but to the previous z-stream
// release, no more than one minor version at a time, no minor or major
// update while the cluster says it is not Upgradeable.
func Preconditions(cv *configv1.ClusterVersion, target string) []*PreconditionError {
	current, err := semver.Parse(cv.Status.Desired.Version)
	if err != nil {
		return []*PreconditionError{{Name: "ClusterVersionRollback", Reason: "InvalidCurrentVersion", Message: err.Error()}}
	}
	want, err := semver.Parse(target)
	if err != nil {
		return []*PreconditionError{{Name: "ClusterVersionRollback", Reason: "InvalidDesiredVersion", Message: err.Error()}}
	}
	var out []*PreconditionError
	if e := rollback(cv, current, want); e != nil {
		out = append(out, e)
	}
	switch {
	case want.Major > current.Major:
		out = append(out, &PreconditionError{Name: "ClusterVersionGiantHop", Reason: "MajorVersionUpdate",
			Message: fmt.Sprintf("%s has a larger major version than the current target %s (%d > %d), and only updates within the current major version are supported.", want, current, want.Major, current.Major)})
	case want.Major == current.Major && want.Minor > current.Minor+1:
		out = append(out, &PreconditionError{Name: "ClusterVersionGiantHop", Reason: "MultipleMinorVersionsUpdate",
			Message: fmt.Sprintf("%s is more than one minor version beyond the current target %s (%d.%d > %d.(%d+1)), and only updates within the current minor version or to the next minor version are supported.", want, current, want.Major, want.Minor, current.Major, current.Minor)})
	}
	if want.Major != current.Major || want.Minor != current.Minor {
		if c := FindCondition(cv.Status.Conditions, configv1.OperatorUpgradeable); c != nil && c.Status == configv1.ConditionFalse {
			out = append(out, &PreconditionError{Name: "ClusterVersionUpgradeable", Reason: c.Reason, Message: c.Message})
		}
	}
	return out
}

func rollback(cv *configv1.ClusterVersion, current, want semver.Version) *PreconditionError {
	if !want.LT(current) {
		return nil
	}
	fail := func(msg string) *PreconditionError {
		return &PreconditionError{Name: "ClusterVersionRollback", Reason: "LowDesiredVersion", Message: msg}
	}
	for _, h := range cv.Status.History {
		if h.Version == current.String() && h.Image == cv.Status.Desired.Image {
			continue
		}
		previous, err := semver.Parse(h.Version)
		if err != nil {
			break
		}
		switch {
		case !want.EQ(previous):
			return fail(fmt.Sprintf("%s is less than the current target %s, and the only supported rollback is to the cluster's previous version %s (%s)", want, current, previous, h.Image))
		case previous.Major == current.Major && previous.Minor == current.Minor:
			return nil
		}
		return fail(fmt.Sprintf("%s is less than the current target %s and matches the cluster's previous version, but rollbacks that change major or minor versions are not recommended", want, current))
	}
	return fail(fmt.Sprintf("%s is less than the current target %s, and the cluster has no previous Semantic Version", want, current))
}

// SummarizePreconditions words failed preconditions as the CVO does, and
// says whether they block.
func SummarizePreconditions(errs []*PreconditionError) (message string, blocking bool) {
	for _, e := range errs {
		blocking = blocking || !e.NonBlocking
	}
	switch len(errs) {
	case 0:
		return "", false
	case 1:
		return fmt.Sprintf("Precondition %q failed because of %q: %s", errs[0].Name, errs[0].Reason, errs[0].Message), blocking
	}
	lines := make([]string, len(errs))
	for i, e := range errs {
		lines[i] = fmt.Sprintf("* Precondition %q failed because of %q: %s", e.Name, e.Reason, e.Message)
	}
	return "Multiple precondition checks failed:\n" + strings.Join(lines, "\n"), blocking
}
