package worker

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_X86_64
	x32       = true
)

// deniedArch are the x86-64-only syscalls of the denylist.
var deniedArch = []uintptr{unix.SYS_FORK, unix.SYS_VFORK, unix.SYS_ACCEPT, unix.SYS_IOPL, unix.SYS_IOPERM}
