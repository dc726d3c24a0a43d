package memlimit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMemTotalReadsKilobytes(t *testing.T) {
	got, err := memTotal([]byte("MemTotal:       24683772 kB\nMemFree:         1000 kB\n"))
	if err != nil || got != 24683772<<10 {
		t.Fatalf("memTotal = %d, %v; want %d", got, err, int64(24683772)<<10)
	}
	for _, bad := range []string{"MemFree: 10 kB\n", "MemTotal: lots\n", "MemTotal: 10 MB\n"} {
		if _, err := memTotal([]byte(bad)); err == nil || !strings.Contains(err.Error(), "MemTotal") {
			t.Errorf("memTotal(%q) = %v; want an error naming MemTotal", bad, err)
		}
	}
}

func TestCgroupLimitIsReadOnlyWhenSet(t *testing.T) {
	dir := t.TempDir()
	for content, want := range map[string]int64{"max\n": 0, "8589934592\n": 8 << 30, "9223372036854771712\n": 0, "junk": 0} {
		path := filepath.Join(dir, "memory.max")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, ok := parseCgroupLimit(path)
		if ok != (want != 0) || got != want {
			t.Errorf("parseCgroupLimit(%q) = %d, %v; want %d", content, got, ok, want)
		}
	}
	if _, ok := parseCgroupLimit(filepath.Join(dir, "absent")); ok {
		t.Error("a missing file reads as a limit")
	}
}

func TestAMemberGetsAnEighthOfTheServersShare(t *testing.T) {
	const machine = 24 << 30
	if got := Limit(Server, machine); got != 12<<30 {
		t.Errorf("server limit on 24 GiB = %s, want 12 GiB", Bytes(got))
	}
	if got := Limit(EtcdMember, machine); got != 1536<<20 {
		t.Errorf("member limit on 24 GiB = %s, want 1536MiB", Bytes(got))
	}
}

func TestEnvLeavesWhatTheEnvironmentSets(t *testing.T) {
	t.Setenv("GOGC", "150")
	t.Setenv("GOMEMLIMIT", "")
	env := strings.Join(Env(EtcdMember), " ")
	if strings.Contains(env, "GOGC") {
		t.Errorf("Env = %q; it overrides the GOGC the environment sets", env)
	}
	if mem, err := MachineMemory(); err == nil && !strings.Contains(env, "GOMEMLIMIT="+Bytes(Limit(EtcdMember, mem))) {
		t.Errorf("Env = %q; want a member's share of %s", env, Bytes(mem))
	}
}
