package controlplane

import (
	"errors"
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

// A kube-controller-manager that stopped as it started fails the start,
// and its result stays for Stop to read; one that runs does not.
func TestAControllerManagerThatStoppedFailsTheStart(t *testing.T) {
	stopped := make(chan error, 1)
	stopped <- errors.New(`unable to register configz: register config "kubecontrollermanager.config.k8s.io" twice`)
	cp := &ControlPlane{kcmDone: stopped}
	err := cp.controllerManagerRuns()
	if err == nil || !strings.Contains(err.Error(), "kube-controller-manager stopped as it started: unable to register configz") {
		t.Errorf("err %v", err)
	}
	select {
	case again := <-cp.kcmDone:
		if again == nil || !strings.Contains(again.Error(), "twice") {
			t.Errorf("Stop would read %v", again)
		}
	default:
		t.Error("the result is gone: Stop would wait for it")
	}
	running := &ControlPlane{kcmDone: make(chan error, 1)}
	if err := running.controllerManagerRuns(); err != nil {
		t.Errorf("a running controller manager: %v", err)
	}
}
