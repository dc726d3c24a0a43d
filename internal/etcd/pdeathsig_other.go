//go:build !linux

package etcd

import "os/exec"

// setParentDeathSignal: only Linux has one; elsewhere the member exits
// when its standard input ends (--exit-with-parent).
func setParentDeathSignal(*exec.Cmd) {}
