package controlplane

import (
	"strings"
	"testing"
)

func TestValidateConfig(t *testing.T) {
	good := DefaultConfig()
	if err := validateConfig(good); err != nil {
		t.Fatalf("default config invalid: %v", err)
	}
	bad := good
	bad.NodeMonitorPeriod = bad.NodeMonitorGracePeriod
	bad.UnhealthyZoneThreshold = 2
	bad.BindAddress = "nowhere"
	err := validateConfig(bad)
	for _, want := range []string{"--node-monitor-period", "--unhealthy-zone-threshold", "--bind-address"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
}
