package redistest_test

import (
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/codeinterp/codeinterp/internal/store/redis/redistest"
)

func TestStart(t *testing.T) {
	srv := redistest.StartServer(t, "--maxmemory", "2mb")
	c, err := net.Dial("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONFIG GET maxmemory\r\n")
	buf := make([]byte, 128)
	n, _ := c.Read(buf)
	if !strings.Contains(string(buf[:n]), "2097152") {
		t.Errorf("the extra arguments did not reach redis-server: %q", buf[:n])
	}
	if !strings.HasPrefix(srv.URL, "redis://127.0.0.1:") {
		t.Errorf("URL %q", srv.URL)
	}
}

// fatalTB records Fatalf and stops its goroutine, as testing.T does.
type fatalTB struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// TestMissingServerFails: without redis-server the helper fails the test
// and says what to install; it never skips.
func TestMissingServerFails(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		redistest.Start(f)
	}()
	<-done
	if !strings.Contains(f.msg, "apt-get install redis-server") {
		t.Errorf("message %q does not say how to install redis-server", f.msg)
	}
}
