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
	"time"
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

func TestParseFaults(t *testing.T) {
	got, err := ParseFaults(FormatFault(EtcdNodeRead, 2*time.Second, 5*time.Second))
	if err != nil || got[EtcdNodeRead] != (fault{on: 2 * time.Second, period: 5 * time.Second}) {
		t.Fatalf("ParseFaults = %v, %v", got, err)
	}
	for in, want := range map[string]string{
		"etcd/node-read":            "is not NAME:ON/PERIOD",
		"etcd/node-read:2s":         "is not NAME:ON/PERIOD",
		"etcd/nowhere:1s/2s":        "is not a fault point",
		"etcd/node-read:3s/2s":      "0 < ON <= PERIOD",
		"etcd/node-read:x/2s":       "0 < ON <= PERIOD",
		"etcd/node-read:0s/2s":      "0 < ON <= PERIOD",
		MCDMidReboot + ":1s/2s":     "is not a fault point",
		"etcd/node-read:1s/2s,oops": "is not NAME:ON/PERIOD",
	} {
		if _, err := ParseFaults(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseFaults(%q) = %v, want an error with %q", in, err, want)
		}
	}
}

// A fault is on for its share of every period, and only where named.
func TestFailFollowsItsPeriod(t *testing.T) {
	saved := faults
	defer func() { faults = saved }()
	faults = map[string]fault{EtcdNodeRead: {on: 40 * time.Millisecond, period: 80 * time.Millisecond}}
	failed, passed := 0, 0
	deadline := time.Now().Add(400 * time.Millisecond)
	for time.Now().Before(deadline) {
		if err := Fail(EtcdNodeRead); err != nil {
			if !errors.Is(err, ErrInjected) {
				t.Fatalf("Fail = %v, not ErrInjected", err)
			}
			failed++
		} else {
			passed++
		}
		time.Sleep(time.Millisecond)
	}
	if failed == 0 || passed == 0 {
		t.Errorf("%d failures and %d passes in 5 periods, want both", failed, passed)
	}
	if err := Fail("elsewhere"); err != nil {
		t.Errorf("Fail of a point without a fault: %v", err)
	}
}
