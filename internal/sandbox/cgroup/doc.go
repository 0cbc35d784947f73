// Package cgroup confines sandbox worker processes with Linux control groups,
// through github.com/containerd/cgroups/v3, on both the legacy (v1) and the
// unified (v2) hierarchy.
//
// One Group is made per worker: a memory limit with no swap, a pids limit and
// a CPU quota. The caller adds the worker's pid and must call Verify before
// any untrusted code runs in it; Delete removes the group once the worker has
// been reaped. Nothing here falls back silently: a controller that is missing
// or a limit that cannot be written is an error, so start-up fails closed.
//
// Files: cgroup.go holds the Driver and Group interfaces, Open and what both
// hierarchies share (where groups go, mountinfo, /proc/PID/cgroup, the kill
// loop); v1.go the legacy hierarchy (a mount per controller); v2.go the
// unified one (controllers delegated through cgroup.subtree_control).
package cgroup
