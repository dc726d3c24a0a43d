package etcd

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal has the kernel SIGKILL the member when capstan
// ends, however it ends, and starts it in a process group of its own:
// the signal a terminal sends its foreground group (Ctrl-C), or a
// supervisor the group it started, reaches capstan alone, which stops
// its API server before its members (members stopped first would leave
// it without storage, and capstan's supervision would start them again).
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
