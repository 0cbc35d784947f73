package memfs

import (
	"sync"
	"time"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
)

const (
	// InodeCost is charged to the budget for every live file or directory
	// (mount roots excepted). It stands for the host memory an inode and its
	// directory entry take, so that empty files are not free.
	InodeCost = 256

	// MaxNameLen is the longest accepted path component, as NAME_MAX on
	// Linux. Longer names fail with ENAMETOOLONG.
	MaxNameLen = 255

	// DefaultMaxInodes caps live inodes per Budget unless WithMaxInodes says
	// otherwise.
	DefaultMaxInodes = 1 << 16

	// ErrNoSpace is returned when the budget (bytes or inodes) is exhausted.
	// It is EIO because wazero v1.12.0 cannot carry ENOSPC to the guest; see
	// the package documentation.
	ErrNoSpace = experimentalsys.EIO
)

// Option tunes a Budget.
type Option func(*Budget)

// WithMaxInodes caps the number of live files and directories (mount roots
// excepted). Values below one leave the default.
func WithMaxInodes(n int) Option {
	return func(b *Budget) {
		if n > 0 {
			b.maxInodes = n
		}
	}
}

// WithClock sets the source of file timestamps; the default is time.Now.
// The guest's wall clock is configured separately in wazero, so tests that
// fake one usually want to fake both.
func WithClock(now func() time.Time) Option {
	return func(b *Budget) {
		if now != nil {
			b.now = now
		}
	}
}

// Budget is a byte and inode limit shared by the file systems made from it
// with NewFS. Its mutex also serialises every operation on those file
// systems, which keeps accounting across mounts exact.
type Budget struct {
	mu sync.Mutex

	max       int64
	maxInodes int
	now       func() time.Time

	used    int64
	inodes  int
	noSpace int64
	lastDev uint64
}

// Stats is a snapshot of a Budget.
type Stats struct {
	Used      int64 // bytes charged: file sizes plus InodeCost per inode
	Max       int64 // the byte limit
	Inodes    int   // live files and directories, mount roots excepted
	MaxInodes int   // the inode limit
	NoSpace   int64 // operations refused because a limit was reached
}

// NewBudget returns a budget of maxBytes (negative counts as zero).
func NewBudget(maxBytes int64, opts ...Option) *Budget {
	b := &Budget{max: max(maxBytes, 0), maxInodes: DefaultMaxInodes, now: time.Now}
	for _, o := range opts {
		o(b)
	}
	return b
}

// New returns a file system with a budget of its own. It suits a single
// mount; use NewBudget and Budget.NewFS to share one limit across mounts.
func New(maxBytes int64, opts ...Option) *FS {
	return NewBudget(maxBytes, opts...).NewFS()
}

// NewFS returns an empty file system charged to b. Each has its own device
// number, so the guest sees mounts as distinct file systems.
func (b *Budget) NewFS() *FS {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lastDev++
	f := &FS{b: b, dev: b.lastDev}
	now := b.nowNanos()
	f.root = f.newInode(true, 0o777, now)
	f.root.nlink = 1
	return f
}

// Used returns the bytes charged so far.
func (b *Budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// Max returns the byte limit.
func (b *Budget) Max() int64 { return b.max }

// Stats returns a consistent snapshot of the budget.
func (b *Budget) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return Stats{Used: b.used, Max: b.max, Inodes: b.inodes, MaxInodes: b.maxInodes, NoSpace: b.noSpace}
}

func (b *Budget) nowNanos() int64 { return b.now().UnixNano() }

// charge reserves delta bytes, or records a refusal and reports false.
// Callers hold b.mu.
func (b *Budget) charge(delta int64) bool {
	if delta > b.max-b.used {
		b.noSpace++
		return false
	}
	b.used += delta
	return true
}

// chargeInode reserves one inode and its InodeCost. Callers hold b.mu.
func (b *Budget) chargeInode() bool {
	if b.inodes >= b.maxInodes {
		b.noSpace++
		return false
	}
	if !b.charge(InodeCost) {
		return false
	}
	b.inodes++
	return true
}
