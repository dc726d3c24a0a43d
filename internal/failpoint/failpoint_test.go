package failpoint

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []Arm
		wantErr string
	}{
		{in: ""},
		{in: MCDMidReboot, want: []Arm{{MCDMidReboot, 1}}},
		{in: MCDMidReboot + ":3", want: []Arm{{MCDMidReboot, 3}}},
		{in: MCDMidReboot + ":3," + CVOHandover, want: []Arm{{MCDMidReboot, 3}, {CVOHandover, 1}}},
		{in: MCDMidReboot + ":0", wantErr: "must be a positive number"},
		{in: MCDMidReboot + ":x", wantErr: "must be a positive number"},
		{in: MCDMidReboot + "," + MCDMidReboot + ":2", wantErr: "mcd/mid-reboot is armed twice"},
		{in: "mcd/nowhere:1", wantErr: `"mcd/nowhere" is not a failpoint (known: autoscaler/scale-up-decided`},
	} {
		got, err := Parse(tc.in)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Parse(%q) = %v, want an error with %q", tc.in, err, tc.wantErr)
			}
		case err != nil || !slices.Equal(got, tc.want):
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	if got := Format(Arm{CVOMidApply, 2}, Arm{CVOHandover, 1}); got != "cvo/mid-apply:2,cvo/handover:1" {
		t.Errorf("Format = %q", got)
	}
	if got := ReachedPoint(Marker + CVOHandover + " reached: SIGKILL"); got != CVOHandover {
		t.Errorf("ReachedPoint = %q", got)
	}
	if got := ReachedPoint("capstan is up"); got != "" {
		t.Errorf("ReachedPoint of a plain line = %q", got)
	}
}

// helperEnv makes this test binary hit a point three times (see
// TestHelperProcess).
const helperEnv = "FAILPOINT_TEST_HELPER"

func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("run by TestHitKillsAtTheArmedHit")
	}
	fmt.Printf("fault: %v\n", Fail(EtcdNodeRead))
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
	cmd.Env = append(os.Environ(), helperEnv+"=1", Env+"="+Format(Arm{AutoscalerScaleUp, 2}))
	done, err := HandKey(cmd)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	done()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("the process was not killed (%v):\n%s", err, out.String())
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the process ended with %v, want SIGKILL:\n%s", ee, out.String())
	}
	// The hit before the armed one says so, for a campaign to count.
	want := "hit 1\n" + HitMarker + AutoscalerScaleUp + "\nhit 2\n" + Marker + AutoscalerScaleUp + " reached: SIGKILL\n"
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
		"etcd/node-read:x/2s":       "the count after x must be a positive number",
		"etcd/node-read:x0":         "the count after x must be a positive number",
		"etcd/node-read:0s/2s":      "0 < ON <= PERIOD",
		MCDMidReboot + ":1s/2s":     "is not a fault point",
		"etcd/node-read:1s/2s,oops": `"oops" is not a fault point`,
	} {
		if _, err := ParseFaults(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseFaults(%q) = %v, want an error with %q", in, err, want)
		}
	}
}

// A fault armed for its first calls fails them, then never again.
func TestFailFirstCalls(t *testing.T) {
	saved := faults
	defer func() { faults = saved }()
	var err error
	if faults, err = ParseFaults(FormatFirstFaults(CloudCreateAnswerLost, 2)); err != nil {
		t.Fatal(err)
	}
	var got []bool
	for range 4 {
		got = append(got, Fail(CloudCreateAnswerLost) != nil)
	}
	if !slices.Equal(got, []bool{true, true, false, false}) {
		t.Errorf("failed %v, want the first two calls only", got)
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

// fileHelperEnv makes this test binary hit a point before and after the
// file of FileEnv arms it (see TestFileArmsFromThenOn).
const fileHelperEnv = "FAILPOINT_TEST_FILE_HELPER"

func TestFileHelperProcess(t *testing.T) {
	if os.Getenv(fileHelperEnv) != "1" {
		t.Skip("run by TestFileArmsFromThenOn")
	}
	for i := 1; i <= 3; i++ {
		Hit(AutoscalerScaleUp) // not armed yet: never kills
	}
	fmt.Println("unarmed hits survived")
	for len(Armed()) == 0 {
		time.Sleep(PollInterval)
	}
	for i := 1; i <= 3; i++ {
		fmt.Printf("armed hit %d\n", i)
		Hit(MCDMidReboot) // armed for its third hit: the other kills first
		Hit(AutoscalerScaleUp)
	}
	fmt.Println("survived")
}

// Points armed by the file count their hits from the moment the file
// arms them: the hits before do not count, and the first point to reach
// its hit kills.
func TestFileArmsFromThenOn(t *testing.T) {
	path := t.TempDir() + "/failpoint"
	cmd := exec.Command(os.Args[0], "-test.run=^TestFileHelperProcess$")
	cmd.Env = append(os.Environ(), fileHelperEnv+"=1", Env+"=", FileEnv+"="+path)
	done, err := HandKey(cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	var out bytes.Buffer
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	// The file is written once the unarmed hits are done, as a campaign
	// arms a point once the operation started.
	buf := make([]byte, 4096)
	for !strings.Contains(out.String(), "unarmed hits survived") {
		n, err := pr.Read(buf)
		if err != nil {
			t.Fatalf("the helper ended early: %v\n%s", err, out.String())
		}
		out.Write(buf[:n])
	}
	if err := WriteArmFile(path, Arm{MCDMidReboot, 3}, Arm{AutoscalerScaleUp, 2}); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(pr)
	out.Write(rest)
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("the process was not killed (%v):\n%s", err, out.String())
	}
	want := "armed hit 1\n" + HitMarker + MCDMidReboot + "\n" + HitMarker + AutoscalerScaleUp + "\narmed hit 2\n" + HitMarker + MCDMidReboot + "\n" +
		Marker + AutoscalerScaleUp + " reached: SIGKILL\n"
	if !strings.HasSuffix(out.String(), want) {
		t.Fatalf("output:\n%s\nwant it to end with:\n%s", out.String(), want)
	}
	if b, _ := os.ReadFile(path); string(b) != "mcd/mid-reboot:3,autoscaler/scale-up-decided:2\n" {
		t.Errorf("the file holds %q", b)
	}
	if err := WriteArmFile(path); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "\n" {
		t.Errorf("disarmed, the file holds %q", b)
	}
}

// L5: failpoints and faults kill and fail the production binary, so an
// environment alone arms nothing: a process that was not handed the
// campaign's key (a plain capstan up whose environment names them), or
// that was handed another key than its environment's digest names,
// ignores them and says so.
func TestOnlyAProcessHandedTheKeyHonoursFailpoints(t *testing.T) {
	env := []string{helperEnv + "=1", Env + "=" + Format(Arm{AutoscalerScaleUp, 2}), FaultEnv + "=" + FormatFirstFaults(EtcdNodeRead, 5)}
	for name, hand := range map[string]func(*exec.Cmd) (func(), error){
		"no key": func(*exec.Cmd) (func(), error) { return func() {}, nil },
		"a digest without its key": func(cmd *exec.Cmd) (func(), error) {
			cmd.Env = append(cmd.Env, KeyEnv+"="+keyDigest([]byte("guessed")))
			return func() {}, nil
		},
		"another key than the digest's": func(cmd *exec.Cmd) (func(), error) {
			done, err := HandKey(cmd)
			cmd.Env = append(cmd.Env, KeyEnv+"="+keyDigest([]byte("guessed")))
			return done, err
		},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
		cmd.Env = append(os.Environ(), env...)
		done, err := hand(cmd)
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.CombinedOutput()
		done()
		if err != nil || !strings.Contains(string(out), "survived") || !strings.Contains(string(out), "fault: <nil>") ||
			!strings.Contains(string(out), Env+" is ignored: only a process `capstan chaos` starts honours failpoints and faults") ||
			!strings.Contains(string(out), FaultEnv+" is ignored") {
			t.Errorf("%s: the failpoint or the fault was honoured (%v):\n%s", name, err, out)
		}
	}
}

func TestHitPoint(t *testing.T) {
	if got := HitPoint(HitMarker + MCDMidReboot); got != MCDMidReboot {
		t.Errorf("HitPoint = %q", got)
	}
	if got := HitPoint(Marker + MCDMidReboot + " reached: SIGKILL"); got != "" {
		t.Errorf("a kill's marker read as a hit: %q", got)
	}
}
