//go:build !linux

package main

import "os/exec"

// setParentDeathSignal is a no-op where the kernel has no parent-death signal: the
// sidecar runs in Linux containers, and elsewhere a killed sidecar leaves its child.
func setParentDeathSignal(*exec.Cmd) {}
