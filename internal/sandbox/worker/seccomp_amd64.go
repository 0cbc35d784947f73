package worker

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_X86_64
	x32       = true
)

// deniedArch are the x86-64-only syscalls of the denylist.
var deniedArch = []uintptr{unix.SYS_FORK, unix.SYS_VFORK, unix.SYS_ACCEPT, unix.SYS_IOPL, unix.SYS_IOPERM,
	unix.SYS_MKDIR, unix.SYS_RMDIR, unix.SYS_UNLINK, unix.SYS_RENAME, unix.SYS_LINK, unix.SYS_SYMLINK,
	unix.SYS_CHMOD, unix.SYS_CHOWN, unix.SYS_LCHOWN, unix.SYS_CREAT, unix.SYS_MKNOD}

// argRulesArch: the legacy open(2) has its flags in the second argument.
var argRulesArch = []argRule{{nr: unix.SYS_OPEN, arg: offArg1, value: writeFlags}}
