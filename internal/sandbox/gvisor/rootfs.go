package gvisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/codeinterp/codeinterp/internal/buildcache"
)

// RootFSPrefix is the name prefix of runtime/build-gvisor-rootfs.sh's
// output directories (gvisor-rootfs-<recipe hash>) in the cache.
const RootFSPrefix = "gvisor-rootfs-"

// ErrRootFSMissing is matched by Prepare's error when the sandbox's root
// filesystem has not been built.
var ErrRootFSMissing = errors.New("the gVisor sandbox's root filesystem is missing: build it with `make setup` (runtime/build-gvisor-rootfs.sh)")

// DefaultRootFS finds the root filesystem the build script made:
// $CODEINTERP_GVISOR_ROOTFS if set, else the newest finished
// ${XDG_CACHE_HOME:-$HOME/.cache}/codeinterp/gvisor-rootfs-* directory.
func DefaultRootFS() (string, error) {
	d, err := buildcache.Find("CODEINTERP_GVISOR_ROOTFS", RootFSPrefix)
	if err != nil {
		return "", fmt.Errorf("gvisor: %w: %v", ErrRootFSMissing, err)
	}
	return d, nil
}

// checkRootFS refuses a root the sandbox should not get: one that is not
// a finished build (MANIFEST), lacks the interpreter, or that anyone but
// root could change (what it holds runs in every session, and its
// MANIFEST keys the checkpoints).
func checkRootFS(dir, python string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("gvisor: RootFS %q must be an absolute path", dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "MANIFEST")); err != nil {
		return fmt.Errorf("gvisor: %s is not a finished root filesystem (%v): %w", dir, err, ErrRootFSMissing)
	}
	for _, p := range []string{dir, filepath.Join(dir, "usr"), filepath.Join(dir, "usr/bin"), filepath.Join(dir, "etc"), filepath.Join(dir, "MANIFEST")} {
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return fmt.Errorf("gvisor: root filesystem: %w", err)
		}
		if st.Uid != 0 || st.Mode&0o022 != 0 {
			return fmt.Errorf("gvisor: root filesystem: %s must be owned by root and writable only by it (uid %d, mode %o)", p, st.Uid, st.Mode&0o7777)
		}
	}
	// The interpreter is resolved inside the tree: python3 is a relative
	// link there (python3 → python3.11); an absolute one would be resolved
	// by the sandbox against its own root, so check its target there too.
	p := python
	for range 8 {
		fi, err := os.Lstat(filepath.Join(dir, p))
		if err != nil {
			return fmt.Errorf("gvisor: the root filesystem %s has no %s (%v): %w", dir, python, err, ErrRootFSMissing)
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			if !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
				return fmt.Errorf("gvisor: %s in %s is not an executable file", p, dir)
			}
			return nil
		}
		target, err := os.Readlink(filepath.Join(dir, p))
		if err != nil {
			return fmt.Errorf("gvisor: root filesystem: %w", err)
		}
		if filepath.IsAbs(target) {
			p = filepath.Clean(target)
		} else {
			p = filepath.Join(filepath.Dir(p), target)
		}
	}
	return fmt.Errorf("gvisor: %s in %s: too many links", python, dir)
}
