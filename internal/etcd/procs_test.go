package etcd

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/waitfor"
)

// fakeMember runs, in the background, a process whose command line is
// that of a member of dataDir (`sh etcd member --name NAME --data-dir
// ...`) and which lives for seconds. Orphaned, it is started by a shell
// that exits at once, as a killed capstan leaves its members; otherwise
// this process is its parent. It returns the process's PID.
func fakeMember(t *testing.T, dataDir, name, seconds string, orphaned bool) int {
	t.Helper()
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "etcd"), []byte("sleep \"$SLEEP\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"etcd", "member", "--name", name, "--data-dir", filepath.Join(dataDir, name)}
	if orphaned {
		script := `cd "$0" && SLEEP="$1" sh ` + strings.Join(args, " ") + ` >/dev/null 2>&1 &`
		if out, err := exec.Command("sh", "-c", script, bin, seconds).CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	} else {
		cmd := exec.Command("sh", args...)
		cmd.Dir, cmd.Env = bin, append(os.Environ(), "SLEEP="+seconds)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	// The stand-in's shell forks its sleep: until the child execs, it
	// shows the same command line, and may be the one found. The PID
	// counts once three reads in a row agree on it.
	var pid, same int
	err := waitfor.Poll(context.Background(), 20*time.Millisecond, 10*time.Second, waitfor.Simple(func(context.Context) (bool, string) {
		procs, err := MemberProcesses(dataDir)
		if err != nil {
			return false, err.Error()
		}
		if now := procs[name]; now != 0 && now == pid {
			same++
		} else {
			pid, same = now, 0
		}
		return pid != 0 && same >= 2, "no such process yet, or not settled"
	}))
	if err != nil {
		t.Fatalf("the stand-in member never showed in the process table: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	return pid
}

// A start waits for the members a killed capstan left running to end,
// names those that do not, and never waits for its own.
func TestStartWaitsForTheMembersOfAKilledCapstan(t *testing.T) {
	ctx := context.Background()
	t.Run("they end: the start goes on", func(t *testing.T) {
		dir := t.TempDir()
		fakeMember(t, dir, "m0", "1", true)
		if err := waitForOthersMembers(ctx, dir, time.Minute); err != nil {
			t.Fatal(err)
		}
		if procs, err := MemberProcesses(dir); err != nil || len(procs) != 0 {
			t.Errorf("the wait ended with member processes running: %v %v", procs, err)
		}
	})
	t.Run("one that stays is named", func(t *testing.T) {
		dir := t.TempDir()
		pid := fakeMember(t, dir, "m0", "60", true)
		err := waitForOthersMembers(ctx, dir, 300*time.Millisecond)
		if err == nil || !strings.Contains(err.Error(), "m0 (PID "+strconv.Itoa(pid)+")") {
			t.Errorf("a member that stays: %v", err)
		}
	})
	t.Run("its own are not waited for", func(t *testing.T) {
		dir := t.TempDir()
		fakeMember(t, dir, "m0", "60", false)
		if err := waitForOthersMembers(ctx, dir, 300*time.Millisecond); err != nil {
			t.Errorf("a member this process started: %v", err)
		}
	})
}
