//go:build wasip1

// Command guest exercises the scratch mounts from inside a WASI module, the
// way a Python program would through wasi-libc: it prints one line per
// check and the host test compares the transcript.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
)

func main() {
	check("mkdir /tmp/work", os.Mkdir("/tmp/work", 0o755))
	check("write a.txt", os.WriteFile("/tmp/work/a.txt", []byte("alpha"), 0o644))
	b, err := os.ReadFile("/tmp/work/a.txt")
	fmt.Printf("read a.txt: %q %v\n", b, errText(err))
	check("rename a.txt b.txt", os.Rename("/tmp/work/a.txt", "/tmp/work/b.txt"))
	ls("/tmp/work")
	check("write out.csv", os.WriteFile("/mnt/data/out.csv", []byte("x,y\n1,2\n"), 0o644))

	// Errors a program meets when it misuses the file system.
	_, err = os.Stat("/tmp/work/a.txt")
	fmt.Printf("stat renamed-away: %v\n", errno(err))
	fmt.Printf("rmdir non-empty: %v\n", errno(syscall.Rmdir("/tmp/work")))
	fmt.Printf("unlink dir: %v\n", errno(syscall.Unlink("/tmp/work")))
	fmt.Printf("mkdir existing: %v\n", errno(os.Mkdir("/tmp/work", 0o755)))
	_, err = os.OpenFile("/tmp/work/b.txt", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	fmt.Printf("create excl existing: %v\n", errno(err))
	fmt.Printf("rename across mounts: %v\n", errno(os.Rename("/tmp/work/b.txt", "/mnt/data/b.txt")))
	fmt.Printf("write outside mounts: %v\n", errno(os.WriteFile("/etc/evil", []byte("x"), 0o644)))

	// Append and seek.
	f, err := os.OpenFile("/tmp/work/b.txt", os.O_APPEND|os.O_WRONLY, 0)
	check("open append", err)
	_, err = f.WriteString("+beta")
	check("append", err)
	check("close append", f.Close())
	f, err = os.Open("/tmp/work/b.txt")
	check("open b.txt", err)
	_, err = f.Seek(3, io.SeekStart)
	check("seek", err)
	rest, err := io.ReadAll(f)
	fmt.Printf("read after seek: %q %v\n", rest, errText(err))
	st, err := f.Stat()
	check("fstat", err)
	fmt.Printf("stat b.txt: size=%d regular=%v\n", st.Size(), st.Mode().IsRegular())
	check("close b.txt", f.Close())

	// Fill the shared budget through the second mount. The odd chunk size
	// makes the last write partial: Go's os.File retries the rest and gets
	// the error.
	f, err = os.Create("/mnt/data/fill.bin")
	check("create fill.bin", err)
	chunk := []byte(strings.Repeat("f", 4000))
	total := 0
	for {
		n, err := f.Write(chunk)
		total += n
		if err != nil {
			fmt.Printf("fill: wrote %d then %v\n", total, errno(err))
			break
		}
	}
	st, err = f.Stat()
	check("stat fill.bin", err)
	fmt.Printf("fill.bin size matches: %v\n", st.Size() == int64(total))
	_, err = os.Create("/tmp/another")
	fmt.Printf("create when full: %v\n", errno(err))
	fmt.Printf("mkdir when full: %v\n", errno(os.Mkdir("/tmp/d2", 0o755)))

	// Unlinking an open file keeps its data readable but frees nothing yet.
	check("remove fill.bin", os.Remove("/mnt/data/fill.bin"))
	_, err = os.Create("/tmp/another")
	fmt.Printf("create while unlinked fill.bin open: %v\n", errno(err))
	head := make([]byte, 4)
	n, err := f.ReadAt(head, 0)
	fmt.Printf("read unlinked: %q %v\n", head[:n], errText(err))
	check("close fill.bin", f.Close())
	check("create after close", os.WriteFile("/tmp/another", []byte("ok"), 0o644))
	ls("/tmp")
	ls("/mnt/data")
	fmt.Println("done")
}

func check(what string, err error) {
	if err != nil {
		fmt.Printf("%s: FAILED %v\n", what, err)
		os.Exit(1)
	}
	fmt.Printf("%s: ok\n", what)
}

func ls(dir string) {
	ents, err := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() {
			name += "/"
		}
		names = append(names, name)
	}
	fmt.Printf("ls %s: %s %v\n", dir, strings.Join(names, " "), errText(err))
}

// errno names the syscall error inside err, or "ok".
func errno(err error) string {
	if err == nil {
		return "ok"
	}
	var e syscall.Errno
	if !errors.As(err, &e) {
		return "non-errno " + err.Error()
	}
	names := map[syscall.Errno]string{
		syscall.EBADF: "EBADF", syscall.EEXIST: "EEXIST", syscall.EINVAL: "EINVAL",
		syscall.EIO: "EIO", syscall.EISDIR: "EISDIR", syscall.ENOENT: "ENOENT",
		syscall.ENOSPC: "ENOSPC", syscall.ENOSYS: "ENOSYS", syscall.ENOTDIR: "ENOTDIR",
		syscall.ENOTEMPTY: "ENOTEMPTY", syscall.EPERM: "EPERM", syscall.ENOTCAPABLE: "ENOTCAPABLE",
	}
	if name, ok := names[e]; ok {
		return name
	}
	return fmt.Sprintf("errno(%d)", uint32(e))
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}
