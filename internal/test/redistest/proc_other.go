//go:build !linux

package redistest

import "os/exec"

// setProcAttr does nothing where the parent-death signal is not available.
func setProcAttr(cmd *exec.Cmd) {}
