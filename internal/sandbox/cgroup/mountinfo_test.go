package cgroup

import (
	"strings"
	"testing"
)

// TestMountRoot: the cgroup each mount shows as its "/", from mountinfo as
// a host, a private cgroup namespace and a container without one (podman
// --cgroupns=host on cgroup v1, where the pool refused every session: the
// worker was in /libpod_parent/libpod-…/codeinterp/wasm-1, the pool wanted
// /codeinterp/wasm-1) list it.
func TestMountRoot(t *testing.T) {
	const host = `25 30 0:23 / /sys rw,nosuid - sysfs sysfs rw
31 25 0:26 / /sys/fs/cgroup ro,nosuid shared:9 - tmpfs tmpfs ro,mode=755
33 31 0:28 / /sys/fs/cgroup/unified rw,nosuid shared:10 - cgroup2 cgroup2 rw,nsdelegate
36 31 0:31 / /sys/fs/cgroup/memory rw,nosuid shared:14 - cgroup cgroup rw,memory
37 31 0:32 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:15 - cgroup cgroup rw,cpu,cpuacct
`
	const noNamespace = `612 611 0:63 / / rw - overlay overlay rw
620 619 0:31 /libpod_parent/libpod-4f2a /sys/fs/cgroup/memory rw,nosuid master:14 - cgroup cgroup rw,memory
621 619 0:32 /libpod_parent/libpod-4f2a /sys/fs/cgroup/cpu,cpuacct rw,nosuid master:15 - cgroup cgroup rw,cpu,cpuacct
622 619 0:33 /libpod_parent/libpod-4f2a /sys/fs/cgroup/pids rw,nosuid master:16 - cgroup cgroup rw,pids
623 619 0:28 /machine.slice/libpod-4f2a.scope /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw
`
	const shadowed = `36 31 0:31 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
90 36 0:31 /sub\040dir /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
`
	for _, tc := range []struct {
		name, mountinfo, mountpoint, want string
	}{
		{"host v1", host, "/sys/fs/cgroup/memory", "/"},
		{"host v1, joined controllers", host, "/sys/fs/cgroup/cpu,cpuacct", "/"},
		{"host v2 (hybrid)", host, "/sys/fs/cgroup/unified", "/"},
		{"container without a cgroup namespace, v1", noNamespace, "/sys/fs/cgroup/memory", "/libpod_parent/libpod-4f2a"},
		{"container without a cgroup namespace, pids", noNamespace, "/sys/fs/cgroup/pids", "/libpod_parent/libpod-4f2a"},
		{"container without a cgroup namespace, v2", noNamespace, "/sys/fs/cgroup/unified", "/machine.slice/libpod-4f2a.scope"},
		{"a later mount hides an earlier one; escapes", shadowed, "/sys/fs/cgroup/memory", "/sub dir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := mountRoot(strings.NewReader(tc.mountinfo), tc.mountpoint)
			if err != nil || got != tc.want {
				t.Errorf("mountRoot(%s) = %q, %v; want %q", tc.mountpoint, got, err, tc.want)
			}
		})
	}
	for _, mp := range []string{"/sys/fs/cgroup", "/sys", "/sys/fs/cgroup/blkio"} {
		if got, err := mountRoot(strings.NewReader(host), mp); err == nil {
			t.Errorf("mountRoot(%s) = %q: not a cgroup mount, want an error", mp, got)
		}
	}
	// This machine: the groups the tests make are verified against it.
	if _, err := mountRootOf("/sys/fs/cgroup/memory"); err != nil {
		t.Errorf("this host's memory hierarchy: %v", err)
	}
}

func TestNestedParent(t *testing.T) {
	tests := []struct {
		name, self, root, parent, want string
		err                            bool
	}{
		{"host root", "/", "/", "/codeinterp", "/codeinterp", false},
		{"server in a service", "/system.slice/codeinterp.service", "/", "/codeinterp", "/system.slice/codeinterp.service/codeinterp", false},
		{"pod on v1 without a namespace: the mount shows the pod", "/kubepods/pod1/c1", "/kubepods/pod1/c1", "/codeinterp", "/codeinterp", false},
		{"privileged pod seeing the node's hierarchy", "/kubepods/pod1/c1", "/", "/codeinterp", "/kubepods/pod1/c1/codeinterp", false},
		{"mount shows an ancestor", "/kubepods/pod1/c1", "/kubepods", "/codeinterp", "/pod1/c1/codeinterp", false},
		{"server moved to its leaf", "/kubepods/pod1/c1/codeinterp-server", "/", "/codeinterp", "/kubepods/pod1/c1/codeinterp", false},
		{"private namespace, leaf", "/codeinterp-server", "/", "/codeinterp", "/codeinterp", false},
		{"outside the mount", "/other/x", "/kubepods", "/codeinterp", "", true},
		{"prefix is not an ancestor", "/kubepods2/x", "/kubepods", "/codeinterp", "", true},
		{"unknown", "", "/", "/codeinterp", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := nestedParent(tt.self, tt.root, tt.parent)
			if got != tt.want || (err != nil) != tt.err {
				t.Fatalf("nestedParent(%q, %q, %q) = %q, %v; want %q (error %v)", tt.self, tt.root, tt.parent, got, err, tt.want, tt.err)
			}
		})
	}
}
