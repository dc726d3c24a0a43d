package mco

import (
	"context"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/simclock"
)

// A simulation's daemons keep the cluster's timings, on its clock.
func TestTheDaemonsTimingsLastAsLongAsTheirClockSays(t *testing.T) {
	d := newDaemon(context.Background(), nil, nil, DaemonOptions{DrainTimeout: 90 * time.Second, DrainRetry: time.Minute,
		ApplyDuration: 30 * time.Second, RebootDuration: 3 * time.Minute, Clock: simclock.Scaled{Speed: 10}}, nil, nil)
	want := DaemonOptions{DrainTimeout: 9 * time.Second, DrainRetry: 6 * time.Second, ApplyDuration: 3 * time.Second,
		RebootDuration: 18 * time.Second, Clock: simclock.Scaled{Speed: 10}}
	if d.opts != want {
		t.Errorf("at 10x the daemon runs %+v, want %+v", d.opts, want)
	}
	real := newDaemon(context.Background(), nil, nil, DaemonOptions{RebootDuration: 3 * time.Minute}, nil, nil)
	if real.opts.RebootDuration != 3*time.Minute {
		t.Errorf("on the real clock a reboot lasts %s, want 3m", real.opts.RebootDuration)
	}
}
