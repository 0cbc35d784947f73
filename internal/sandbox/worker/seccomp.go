package worker

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The seccomp filter is the worker's last wall: it only matters if guest
// code ever escaped wasm and wazero and ran as native code in this process.
// It denies what such code would reach for first — starting programs,
// opening sockets, creating processes or namespaces, tracing others,
// loading kernel code — none of which the worker itself needs once the
// guest is set up. It is a denylist so that the Go runtime's own needs
// (threads, signals, memory) keep working across Go versions.

// BPF instruction classes and fields used below (linux/filter.h).
const (
	bpfLD   = 0x00
	bpfJMP  = 0x05
	bpfRET  = 0x06
	bpfW    = 0x00
	bpfABS  = 0x20
	bpfJEQ  = 0x10
	bpfJGE  = 0x30
	bpfJSET = 0x40
	bpfK    = 0x00

	// offsets in struct seccomp_data
	offNr   = 0
	offArch = 4
	offArg0 = 16 // low 32 bits on little-endian
	offArg1 = 24
	offArg2 = 32

	x32SyscallBit = 0x40000000
)

func stmt(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
func jump(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
}

// argRule allows a syscall only when its argument passes a test.
type argRule struct {
	nr  uintptr
	arg uint32 // offset of the argument in seccomp_data
	// equal: allow only when the argument's low 32 bits equal value;
	// otherwise: deny when any bit of value is set in the argument.
	equal bool
	value uint32
}

// seccompProgram builds the filter for the denied syscall numbers and the
// argument rules.
func seccompProgram(denied []uintptr, rules []argRule) []unix.SockFilter {
	errno := func(e unix.Errno) uint32 { return unix.SECCOMP_RET_ERRNO | uint32(e) }
	prog := []unix.SockFilter{
		// Another architecture's syscall numbers would mean something else.
		stmt(bpfLD|bpfW|bpfABS, offArch),
		jump(bpfJMP|bpfJEQ|bpfK, auditArch, 1, 0),
		stmt(bpfRET|bpfK, unix.SECCOMP_RET_KILL_PROCESS),
		stmt(bpfLD|bpfW|bpfABS, offNr),
	}
	if x32 {
		// x32 ABI numbers alias the x86-64 ones with a high bit set.
		prog = append(prog,
			jump(bpfJMP|bpfJGE|bpfK, x32SyscallBit, 0, 1),
			stmt(bpfRET|bpfK, errno(unix.EPERM)))
	}
	// clone without CLONE_THREAD is fork: deny it; threads stay allowed.
	prog = append(prog,
		jump(bpfJMP|bpfJEQ|bpfK, uint32(unix.SYS_CLONE), 0, 4),
		stmt(bpfLD|bpfW|bpfABS, offArg0),
		jump(bpfJMP|bpfJSET|bpfK, unix.CLONE_THREAD, 0, 1),
		stmt(bpfRET|bpfK, unix.SECCOMP_RET_ALLOW),
		stmt(bpfRET|bpfK, errno(unix.EPERM)),
		// clone3 carries its flags in memory a filter cannot read: ENOSYS
		// makes callers fall back to clone, which is checked above.
		jump(bpfJMP|bpfJEQ|bpfK, uint32(unix.SYS_CLONE3), 0, 1),
		stmt(bpfRET|bpfK, errno(unix.ENOSYS)),
	)
	for _, r := range rules {
		prog = append(prog,
			jump(bpfJMP|bpfJEQ|bpfK, uint32(r.nr), 0, 4),
			stmt(bpfLD|bpfW|bpfABS, r.arg))
		if r.equal {
			prog = append(prog, jump(bpfJMP|bpfJEQ|bpfK, r.value, 0, 1))
		} else {
			prog = append(prog, jump(bpfJMP|bpfJSET|bpfK, r.value, 1, 0))
		}
		prog = append(prog,
			stmt(bpfRET|bpfK, unix.SECCOMP_RET_ALLOW),
			stmt(bpfRET|bpfK, errno(unix.EPERM)))
	}
	for _, nr := range denied {
		prog = append(prog,
			jump(bpfJMP|bpfJEQ|bpfK, uint32(nr), 0, 1),
			stmt(bpfRET|bpfK, errno(unix.EPERM)))
	}
	return append(prog, stmt(bpfRET|bpfK, unix.SECCOMP_RET_ALLOW))
}

// deniedSyscalls is the denylist common to every architecture.
var deniedCommon = []uintptr{
	unix.SYS_EXECVE, unix.SYS_EXECVEAT,
	unix.SYS_SOCKET, unix.SYS_SOCKETPAIR, unix.SYS_CONNECT, unix.SYS_BIND, unix.SYS_LISTEN,
	unix.SYS_ACCEPT4, unix.SYS_SENDTO, unix.SYS_SENDMSG, unix.SYS_RECVFROM, unix.SYS_RECVMSG,
	unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV,
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_CHROOT,
	unix.SYS_UNSHARE, unix.SYS_SETNS,
	unix.SYS_SETUID, unix.SYS_SETGID, unix.SYS_SETREUID, unix.SYS_SETREGID,
	unix.SYS_SETRESUID, unix.SYS_SETRESGID, unix.SYS_SETGROUPS,
	unix.SYS_KEXEC_LOAD, unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN, unix.SYS_USERFAULTFD,
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_NAME_TO_HANDLE_AT,
	unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
	unix.SYS_MEMFD_CREATE, unix.SYS_PIDFD_GETFD, unix.SYS_PIDFD_OPEN, unix.SYS_PIDFD_SEND_SIGNAL,
	unix.SYS_TKILL, unix.SYS_OPENAT2,
	// The host filesystem is read-only to the worker.
	unix.SYS_MKDIRAT, unix.SYS_UNLINKAT, unix.SYS_RENAMEAT, unix.SYS_RENAMEAT2, unix.SYS_LINKAT,
	unix.SYS_SYMLINKAT, unix.SYS_FCHMODAT, unix.SYS_FCHOWNAT, unix.SYS_TRUNCATE, unix.SYS_MKNODAT,
}

// writeFlags are the open flags that would change the host filesystem.
const writeFlags = unix.O_WRONLY | unix.O_RDWR | unix.O_CREAT | unix.O_TRUNC | unix.O_APPEND

// argRules: signals only to the worker itself (other workers share its
// uid), and opens only for reading.
func argRules(pid uint32) []argRule {
	return append([]argRule{
		{nr: unix.SYS_KILL, arg: offArg0, equal: true, value: pid},
		{nr: unix.SYS_TGKILL, arg: offArg0, equal: true, value: pid},
		{nr: unix.SYS_RT_SIGQUEUEINFO, arg: offArg0, equal: true, value: pid},
		{nr: unix.SYS_RT_TGSIGQUEUEINFO, arg: offArg0, equal: true, value: pid},
		{nr: unix.SYS_OPENAT, arg: offArg2, value: writeFlags},
	}, argRulesArch...)
}

// installSeccomp applies the filter to every thread of the process.
// no_new_privs and the filter are per-thread; both are set on one locked
// thread and TSYNC carries them to all the others.
func installSeccomp() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	prog := seccompProgram(append(append([]uintptr(nil), deniedCommon...), deniedArch...), argRules(uint32(unix.Getpid())))
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r1, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	// With TSYNC a positive return is the id of a thread that could not be
	// synchronised; errno stays 0 then, so r1 is checked too.
	if errno != 0 {
		return fmt.Errorf("seccomp: %w", errno)
	}
	if r1 != 0 {
		return fmt.Errorf("seccomp: thread %d could not be synchronised", r1)
	}
	return nil
}
