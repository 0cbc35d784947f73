package worker

import (
	"github.com/tetratelabs/wazero"

	"github.com/codeinterp/codeinterp/sandbox/memfs"
)

// withScratch mounts the session's in-memory /tmp and /mnt/data, charged to
// one budget so the guest cannot double its space by using both.
func withScratch(cfg wazero.FSConfig, scratchBytes int64) (wazero.FSConfig, error) {
	b := memfs.NewBudget(scratchBytes)
	cfg = memfs.Mount(cfg, "/tmp", b.NewFS())
	cfg = memfs.Mount(cfg, "/mnt/data", b.NewFS())
	return cfg, nil
}
