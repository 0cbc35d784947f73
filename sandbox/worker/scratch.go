package worker

import (
	"fmt"

	"github.com/tetratelabs/wazero"

	"github.com/codeinterp/codeinterp/sandbox/memfs"
)

// withScratch mounts the session's in-memory /tmp and /mnt/data, charged to
// one budget so the guest cannot double its space by using both.
func withScratch(cfg wazero.FSConfig, b *memfs.Budget) wazero.FSConfig {
	cfg = memfs.Mount(cfg, "/tmp", b.NewFS())
	return memfs.Mount(cfg, "/mnt/data", b.NewFS())
}

// scratchFullNote explains the guest's EIO when the scratch space ran out:
// wazero cannot carry ENOSPC to the guest, so memfs reports EIO instead.
func scratchFullNote(b *memfs.Budget) string {
	return fmt.Sprintf("\n[codeinterp: /tmp and /mnt/data are full (%d MiB for this session); the I/O error above means no space left]\n", b.Max()>>20)
}
