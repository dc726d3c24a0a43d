package etcd

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal has the kernel SIGKILL the member when capstan
// ends, however it ends.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
