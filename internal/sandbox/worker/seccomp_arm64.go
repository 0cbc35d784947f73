package worker

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_AARCH64
	x32       = false
)

// deniedArch: arm64 has no fork, vfork or accept syscalls of its own.
var deniedArch = []uintptr{}

var argRulesArch = []argRule{}
