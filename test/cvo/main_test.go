// Package cvo drives the Cluster Version Operator and the Machine Config
// Operator of a real embedded capstan cluster, started once for the
// package: recommendations, the release payload, updates from request to
// completion with faults, and node rollouts.
//
// The tests share the cluster's one ClusterVersion, so they run in order:
// the recommendation tests (at the installed 4.10.22) first, then the
// updates, each leaving the cluster at a release the next one knows.
package cvo

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	configv1 "github.com/openshift/api/config/v1"
	configclient "github.com/openshift/client-go/config/clientset/versioned"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capstan-dev/capstan/internal/cli"
	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/cvo"
	"github.com/capstan-dev/capstan/internal/mco"
	"github.com/capstan-dev/capstan/internal/testenv"
	"github.com/capstan-dev/capstan/internal/waitfor"
)

var env *testenv.Env

// Timings of the test cluster's CVO.
const (
	reconcileInterval = 2 * time.Second
	slowOperatorAfter = 20 * time.Second
)

func TestMain(m *testing.M) {
	if os.Getenv(testenv.CLIEnv) == "1" {
		os.Exit(cli.Run())
	}
	var err error
	env, err = testenv.Start(testenv.Options{ControlPlaneNodes: 3, Workers: 1, Configure: func(o *cluster.Options) {
		// The update service sees a pushed image within seconds.
		o.Releases.GraphReload = 5 * time.Second
		c := &o.Releases.CVO
		c.ReconcileInterval = reconcileInterval
		c.RetryInterval = 500 * time.Millisecond
		c.MaxRetryInterval = 2 * time.Second
		c.OperatorPollInterval = 200 * time.Millisecond
		c.SlowOperatorAfter = slowOperatorAfter
		c.SlowMachineConfigAfter = 3 * slowOperatorAfter
		// The simulated machine-config-daemons at test speed.
		o.MachineConfig.Daemon = mco.DaemonOptions{DrainTimeout: 2 * time.Second, DrainRetry: 500 * time.Millisecond,
			ApplyDuration: 200 * time.Millisecond, RebootDuration: time.Second}
	}})
	if err == nil {
		err = waitInstalled()
	}
	if err != nil {
		// stdout: stderr may already point at the cluster's log file.
		fmt.Println(err)
		if env != nil {
			env.Stop()
		}
		os.Exit(1)
	}
	os.Exit(env.Finish(m.Run()))
}

// waitInstalled waits until the CVO has applied the installed release.
func waitInstalled() error {
	client, err := configclient.NewForConfig(env.Config)
	if err != nil {
		return err
	}
	return waitfor.Poll(context.Background(), 200*time.Millisecond, 3*time.Minute, waitfor.Simple(func(ctx context.Context) (bool, string) {
		cv, err := client.ConfigV1().ClusterVersions().Get(ctx, cvo.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		h := cv.Status.History
		return len(h) == 1 && h[0].State == configv1.CompletedUpdate, fmt.Sprintf("the installed release is not applied: %+v", h)
	}))
}

// capstan runs a capstan command in this process and returns its output.
func capstan(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return testenv.CLI(args...)
}

// capstanOK is capstan that fails the test on error.
func capstanOK(t *testing.T, args ...string) string {
	t.Helper()
	return testenv.CLIOK(t, args...)
}
