package redistest

import (
	"os/exec"
	"syscall"
)

// setProcAttr makes the kernel kill redis-server if the test binary dies
// without running its cleanups (a timeout panic, a SIGKILL), so no server
// outlives its test.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
