package machine

import (
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/simclock"
)

// A simulation's Machine API keeps OpenShift's timings, on its clock.
func TestTheOptionsLastAsLongAsTheirClockSays(t *testing.T) {
	o := DefaultOptions()
	if got := o.real(); got.DrainTimeout != 20*time.Second || got.DrainBackoffBase != 5*time.Second {
		t.Errorf("on the real clock: drain timeout %s, back-off from %s; want OpenShift's 20s and 5s", got.DrainTimeout, got.DrainBackoffBase)
	}
	o.Clock = simclock.Scaled{Speed: 10}
	got := o.real()
	for name, d := range map[string][2]time.Duration{
		"drain timeout":        {got.DrainTimeout, 2 * time.Second},
		"drain back-off base":  {got.DrainBackoffBase, 500 * time.Millisecond},
		"drain back-off max":   {got.DrainBackoffMax, 100 * time.Second},
		"instance poll":        {got.InstancePollInterval, 500 * time.Millisecond},
		"remediation's reboot": {got.RemediationRebootDuration, 500 * time.Millisecond},
	} {
		if d[0] != d[1] {
			t.Errorf("%s at 10x lasts %s, want %s", name, d[0], d[1])
		}
	}
}
