package etcd

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// MemberProcesses finds, from the operating system's process table (never
// from capstan's registry), the member processes serving the cluster of
// dataDir: each one's name and PID. It is how a fault campaign or a test
// picks a member to SIGKILL, as an operator would with ps.
func MemberProcesses(dataDir string) (map[string]int, error) {
	root, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("the process table (/proc) cannot be read here: %w", err)
	}
	out := map[string]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue // it ended meanwhile
		}
		name, dir, ok := memberOf(strings.Split(string(bytes.TrimRight(raw, "\x00")), "\x00"))
		if ok && strings.HasPrefix(dir, root+string(filepath.Separator)) {
			out[name] = pid
		}
	}
	return out, nil
}

// memberOf reads a member's name and data dir from its command line
// (`capstan etcd member --name N --data-dir D ...`).
func memberOf(args []string) (name, dir string, ok bool) {
	if len(args) < 3 || args[1] != "etcd" || args[2] != "member" {
		return "", "", false
	}
	for i := 3; i+1 < len(args); i++ {
		switch args[i] {
		case "--name":
			name = args[i+1]
		case "--data-dir":
			dir = filepath.Clean(args[i+1])
		}
	}
	return name, dir, name != "" && dir != ""
}
