package e2e

import (
	"testing"

	"github.com/capstan-dev/capstan/internal/compat"
)

// A field capstan serves but does not act on, set by a user, is said so
// in a Warning event on the object rather than silently ignored.
func TestUnhonouredFieldIsReported(t *testing.T) {
	createClusterAutoscaler(t, `{"apiVersion":"autoscaling.openshift.io/v1","kind":"ClusterAutoscaler","metadata":{"name":"default"},
"spec":{"logVerbosity":4,"scaleDown":{"enabled":false}}}`)
	eventMessage(t, "", "default", compat.ReasonFieldNotHonoured, "spec.logVerbosity is not honoured by capstan: capstan's autoscaler logs at capstan's own verbosity (-v)")
}
