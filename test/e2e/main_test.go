// Package e2e drives a real embedded capstan cluster, started once for the
// package, the way a user would: through the API, the CLI and injected
// faults.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/cli"
	"github.com/capstan-dev/capstan/internal/testenv"
)

// cliEnv makes the test binary act as the capstan binary, so tests can run
// `capstan up` in a child process without building anything else.
const cliEnv = "CAPSTAN_E2E_RUN_CLI"

var env *testenv.Env

func TestMain(m *testing.M) {
	if os.Getenv(cliEnv) == "1" {
		os.Exit(cli.Run())
	}
	var err error
	env, err = testenv.Start(testenv.Options{ControlPlaneNodes: 3, Workers: 3})
	if err != nil {
		// stdout: stderr may already point at the cluster's log file.
		fmt.Println(err)
		os.Exit(1)
	}
	code := m.Run()
	env.Stop()
	os.Exit(code)
}

// capstan runs a capstan command in this process against the test cluster
// and returns its output.
func capstan(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := cli.NewRootCommand(&out, &errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String() + errOut.String(), err
}

// capstanOK is capstan that fails the test on error.
func capstanOK(t *testing.T, args ...string) string {
	t.Helper()
	out, err := capstan(t, args...)
	if err != nil {
		t.Fatalf("capstan %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}
