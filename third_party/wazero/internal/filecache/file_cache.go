package filecache

import (
	"bufio"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
)

// New returns a new Cache implemented by fileCache.
func New(dir string) Cache {
	return newFileCache(dir)
}

func newFileCache(dir string) *fileCache {
	return &fileCache{dirPath: dir}
}

// fileCache persists compiled functions into dirPath.
//
// Note: this can be expanded to do binary signing/verification, set TTL on each entry, etc.
type fileCache struct {
	dirPath string
}

func (fc *fileCache) path(key Key) string {
	return path.Join(fc.dirPath, hex.EncodeToString(key[:]))
}

func (fc *fileCache) Get(key Key) (content io.ReadCloser, ok bool, err error) {
	f, err := os.Open(fc.path(key))
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	} else if err != nil {
		return nil, false, err
	} else {
		// Buffered: the compiled module is read a few bytes at a time
		// (eight per function offset), a system call each unbuffered.
		// The native code itself is mapped (see Mapper). (codeinterp patch)
		return newEntry(f), true, nil
	}
}

func (fc *fileCache) Add(key Key, content io.Reader) (err error) {
	path := fc.path(key)
	dirPath, fileName := filepath.Split(path)

	file, err := os.CreateTemp(dirPath, fileName+".*.tmp")
	if err != nil {
		return
	}
	defer func() {
		file.Close()
		if err != nil {
			_ = os.Remove(file.Name())
		}
	}()
	if _, err = io.Copy(file, content); err != nil {
		return
	}
	if err = file.Sync(); err != nil {
		return
	}
	if err = file.Close(); err != nil {
		return
	}
	err = os.Rename(file.Name(), path)
	return
}

func (fc *fileCache) Delete(key Key) (err error) {
	err = os.Remove(fc.path(key))
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	return
}

// Mapper is implemented by a cache entry that can map its next bytes
// instead of reading them. (codeinterp patch)
type Mapper interface {
	// MapNext maps the next n bytes of the entry privately, readable and
	// executable, as unix.Mmap would (unmap with unix.Munmap), and moves
	// past them. The entry's position must be a multiple of the page size.
	// On error the position has not moved.
	MapNext(n int) ([]byte, error)
}

// entry reads a cache entry through a buffer. (codeinterp patch)
type entry struct {
	*bufio.Reader
	f *os.File
}

func newEntry(f *os.File) *entry {
	return &entry{Reader: bufio.NewReaderSize(f, 64<<10), f: f}
}

func (e *entry) Close() error { return e.f.Close() }
