// Package memfs is an in-memory, size-bounded, writable file system for a
// WASI guest run by wazero. It gives each Python session its scratch space
// (/tmp and /mnt/data) without touching any host file: everything lives in
// Go memory and is dropped with the session.
//
// # Mounting
//
// A Budget is the unit of accounting: one byte limit and one inode limit
// shared by every FS made from it. The intended wiring is one Budget per
// session and one FS per mount point, so that a guest cannot escape the
// limit by spreading files over mounts and cannot create entries outside the
// mounted directories:
//
//	b := memfs.NewBudget(64 << 20)
//	cfg := wazero.NewFSConfig()
//	cfg = memfs.Mount(cfg, "/tmp", b.NewFS())
//	cfg = memfs.Mount(cfg, "/mnt/data", b.NewFS())
//	modCfg := wazero.NewModuleConfig().WithFSConfig(cfg)
//
// wazero refuses renames between two mounts (ENOSYS), as it does for any two
// preopens; Python's shutil.move falls back to copy+delete in that case.
//
// # Accounting
//
// Used() counts the logical size of every live regular file (holes count as
// if written, so a sparse truncate cannot promise more than the budget) plus
// InodeCost for every live file or directory other than the mount roots. A
// file stays live while it has a name or an open handle: an unlinked file
// that is still open keeps its bytes charged until its last handle closes, as
// on POSIX. The number of live inodes is capped too (WithMaxInodes), so a
// flood of empty files cannot exhaust host memory through per-inode overhead.
// Names are limited to MaxNameLen bytes for the same reason.
//
// A write that does not fit writes the prefix that does and returns the
// short count with no error; the next write then fails. This is POSIX
// behaviour, and it is also the only shape wazero's fd_write can report: when
// a sys.File write returns a count together with an error, wazero drops the
// count. Truncate (ftruncate, posix_fallocate) is all-or-nothing.
//
// # Errors
//
// wazero v1.12.0's sys.Errno has no ENOSPC, and its WASI layer turns any
// unknown errno into EIO, so "file system full" reaches the guest as EIO
// (Python: OSError errno 29 "I/O error" under wasi-libc). ErrNoSpace names
// that choice in one place. The host can tell the cause apart with
// Stats().NoSpace, which counts how often the budget refused an operation.
//
// Other errnos follow Linux (tmpfs), which is what wasi-libc and CPython are
// written against: unlink of a directory is EISDIR, rmdir of a non-empty
// directory ENOTEMPTY, a trailing slash on a regular file ENOTDIR, rename of
// a directory into its own subtree EINVAL, hard and symbolic links EPERM (the
// answer of a Linux file system without link support). Permission bits are
// stored and reported but never enforced. Reads do not update atime.
//
// Directory handles list entries in name order without "." and "..", which
// wazero synthesizes itself. A listing is a snapshot taken at the first read
// after open or rewind; entries removed since are skipped.
//
// All methods are safe for concurrent use: one mutex per Budget serialises
// them, which costs nothing for the single-threaded guest and lets the host
// read Stats while the guest runs.
package memfs
