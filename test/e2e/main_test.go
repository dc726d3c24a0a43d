// Package e2e drives a real embedded capstan cluster, started once for the
// package, the way a user would: through the API, the CLI and injected
// faults.
package e2e

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/autoscaler"
	"github.com/capstan-dev/capstan/internal/cli"
	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/testenv"
)

var env *testenv.Env

// e2eNodeStartupTime is how long the test cluster's autoscaler takes a
// node that is not ready to be starting.
const e2eNodeStartupTime = 20 * time.Second

func TestMain(m *testing.M) {
	if os.Getenv(testenv.CLIEnv) == "1" {
		os.Exit(cli.Run())
	}
	var err error
	env, err = testenv.Start(testenv.Options{ControlPlaneNodes: 3, Workers: 3, Configure: func(o *cluster.Options) {
		// The Cluster Version Operator (with its release payload's
		// workloads) and the Machine Config Operator (which reboots
		// nodes) are tested in test/cvo, on a cluster of their own.
		o.Releases = nil
		o.MachineConfig = nil
		// The autoscaler's drains at test speed.
		o.Autoscaler.Drain = autoscaler.DrainOptions{MaxPodEvictionTime: 10 * time.Second, EvictionRetryTime: time.Second, PodEvictionHeadroom: 5 * time.Second}
		// Nodes boot at once here: one not ready after this long has
		// started (upstream's 15 minutes).
		o.Autoscaler.MaxNodeStartupTime = e2eNodeStartupTime
	}})
	if err != nil {
		// stdout: stderr may already point at the cluster's log file.
		fmt.Println(err)
		os.Exit(1)
	}
	os.Exit(env.Finish(m.Run()))
}

// capstan runs a capstan command in this process against the test cluster
// and returns its output.
func capstan(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return testenv.CLI(args...)
}

// capstanOK is capstan that fails the test on error.
func capstanOK(t *testing.T, args ...string) string {
	t.Helper()
	return testenv.CLIOK(t, args...)
}
