package worker

import (
	"fmt"
	"strings"

	"github.com/tetratelabs/wazero"

	"github.com/codeinterp/codeinterp/internal/sandbox/memfs"
)

// The guest paths of the session's scratch space.
const (
	mountTmp  = "/tmp"
	mountData = "/mnt/data"
)

// scratch is the session's in-memory /tmp and /mnt/data: one memfs each,
// charged to one budget so the guest cannot double its space by using both.
// The worker reaches the same trees for the server's file operations.
type scratch struct {
	budget    *memfs.Budget
	tmp, data *memfs.FS
}

func newScratch(maxBytes int64) *scratch {
	b := memfs.NewBudget(maxBytes)
	return &scratch{budget: b, tmp: b.NewFS(), data: b.NewFS()}
}

// withScratch mounts the scratch space into cfg.
func withScratch(cfg wazero.FSConfig, sc *scratch) wazero.FSConfig {
	cfg = memfs.Mount(cfg, mountTmp, sc.tmp)
	return memfs.Mount(cfg, mountData, sc.data)
}

// resolve splits a clean absolute guest path into its mount, the mount's
// guest path and the path relative to the mount's root ("" for the root).
func (sc *scratch) resolve(p string) (f *memfs.FS, mount, rel string, ok bool) {
	for _, m := range []struct {
		path string
		fs   *memfs.FS
	}{{mountTmp, sc.tmp}, {mountData, sc.data}} {
		if p == m.path {
			return m.fs, m.path, "", true
		}
		if rest, found := strings.CutPrefix(p, m.path+"/"); found {
			return m.fs, m.path, rest, true
		}
	}
	return nil, "", "", false
}

// scratchFullNote explains the guest's EIO when the scratch space ran out:
// wazero cannot carry ENOSPC to the guest, so memfs reports EIO instead.
func scratchFullNote(b *memfs.Budget) string {
	return fmt.Sprintf("\n[codeinterp: /tmp and /mnt/data are full (%d MiB for this session); the I/O error above means no space left]\n", b.Max()>>20)
}
