//go:build unix

package filecache

import (
	"fmt"
	"io"

	"golang.org/x/sys/unix"
)

var _ Mapper = (*entry)(nil)

// MapNext implements Mapper. (codeinterp patch)
func (e *entry) MapNext(n int) ([]byte, error) {
	pos, err := e.f.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil, err
	}
	pos -= int64(e.Buffered()) // what the buffer has read ahead
	if pos%int64(unix.Getpagesize()) != 0 {
		return nil, fmt.Errorf("offset %d is not page aligned", pos)
	}
	b, err := unix.Mmap(int(e.f.Fd()), pos, n, unix.PROT_READ|unix.PROT_EXEC, unix.MAP_PRIVATE)
	if err != nil {
		return nil, err
	}
	if _, err = e.f.Seek(pos+int64(n), io.SeekStart); err != nil {
		_ = unix.Munmap(b)
		_, _ = e.f.Seek(pos+int64(e.Buffered()), io.SeekStart) // where it was
		return nil, err
	}
	e.Reset(e.f)
	return b, nil
}
