package failpoint

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in      string
		name    string
		n       int
		wantErr string
	}{
		{in: ""},
		{in: MCDMidReboot, name: MCDMidReboot, n: 1},
		{in: MCDMidReboot + ":3", name: MCDMidReboot, n: 3},
		{in: MCDMidReboot + ":0", wantErr: "must be a positive number"},
		{in: MCDMidReboot + ":x", wantErr: "must be a positive number"},
		{in: "mcd/nowhere:1", wantErr: `"mcd/nowhere" is not a failpoint (known: autoscaler/scale-up-decided`},
	} {
		name, n, err := Parse(tc.in)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Parse(%q) = %v, want an error with %q", tc.in, err, tc.wantErr)
			}
		case err != nil || name != tc.name || n != tc.n:
			t.Errorf("Parse(%q) = %q, %d, %v; want %q, %d", tc.in, name, n, err, tc.name, tc.n)
		}
	}
	if got := Format(CVOMidApply, 2); got != "cvo/mid-apply:2" {
		t.Errorf("Format = %q", got)
	}
}

// helperEnv makes this test binary hit a point three times (see
// TestHelperProcess).
const helperEnv = "FAILPOINT_TEST_HELPER"

func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("run by TestHitKillsAtTheArmedHit")
	}
	for i := 1; i <= 3; i++ {
		Hit(AutoscalerScaleDown) // another point: never kills
		fmt.Printf("hit %d\n", i)
		Hit(AutoscalerScaleUp)
	}
	fmt.Println("survived")
}

// The armed point kills the process with SIGKILL on the armed hit, after
// printing the marker; other points and earlier hits do nothing.
func TestHitKillsAtTheArmedHit(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"=1", Env+"="+Format(AutoscalerScaleUp, 2))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("the process was not killed (%v):\n%s", err, out.String())
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the process ended with %v, want SIGKILL:\n%s", ee, out.String())
	}
	want := "hit 1\nhit 2\n" + Marker + AutoscalerScaleUp + " reached: SIGKILL\n"
	if !strings.HasSuffix(out.String(), want) {
		t.Fatalf("output:\n%s\nwant it to end with:\n%s", out.String(), want)
	}
}
