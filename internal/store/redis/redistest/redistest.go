// Package redistest starts a real redis-server for tests: Debian's
// redis-server on a free loopback port, with a temporary directory, no
// persistence, and stopped when the test ends. A test that needs Redis
// fails (never skips) when redis-server is not installed, saying how to
// install it, so a machine without it cannot pass by testing less.
package redistest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Server is a running redis-server.
type Server struct {
	URL  string // redis://127.0.0.1:PORT/0
	Addr string // 127.0.0.1:PORT
	cmd  *exec.Cmd
	out  *syncBuffer
	bin  string
	args []string
	mu   sync.Mutex
	stop func()
}

// Start starts a redis-server for t and returns its URL; it is killed when
// t ends. extra are more redis-server arguments (e.g. "--maxmemory",
// "2mb").
func Start(t testing.TB, extra ...string) string {
	t.Helper()
	return StartServer(t, extra...).URL
}

// StartServer is Start returning the Server (to stop it early, or read
// its output).
func StartServer(t testing.TB, extra ...string) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is not installed (apt-get install redis-server): %v", err)
	}
	var last error
	// A free port found by listening can be taken by someone else before
	// redis-server binds it: try a few.
	for range 5 {
		s, err := start(t, bin, extra)
		if err == nil {
			return s
		}
		last = err
	}
	t.Fatalf("redistest: redis-server did not start: %v", last)
	return nil
}

func start(t testing.TB, bin string, extra []string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	args := append([]string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir(),
		"--daemonize", "no", "--protected-mode", "yes",
	}, extra...)
	s := &Server{URL: "redis://" + addr + "/0", Addr: addr, bin: bin, args: args}
	if err := s.run(); err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.stop()
	})
	return s, nil
}

// Restart kills the server (as kill -9 would: nothing is saved, and it
// had no persistence) and starts a new one on the same port: every key
// is gone, as after a Redis restart without persistence.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stop()
	var err error
	for range 50 { // the port is free again once the old process is reaped
		if err = s.run(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("redistest: restarting redis-server on %s: %v", s.Addr, err)
}

// RefuseWrites makes the server full (on) or not (off), as deploy/ runs
// Redis: maxmemory under noeviction, set below what it uses now, so that
// it refuses ordinary writes with OOM; off lifts the bound. Start the
// server with "--maxmemory-policy", "noeviction". It checks a write is
// refused (or taken) as asked.
func (s *Server) RefuseWrites(t testing.TB, on bool) {
	t.Helper()
	ctx := context.Background()
	rdb := goredis.NewClient(&goredis.Options{Addr: s.Addr})
	defer rdb.Close()
	limit := "0"
	if on {
		info, err := rdb.Info(ctx, "memory").Result()
		if err != nil {
			t.Fatalf("redistest: INFO memory: %v", err)
		}
		var used int64
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
				used, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		if used == 0 {
			t.Fatalf("redistest: no used_memory in INFO memory: %q", info)
		}
		limit = strconv.FormatInt(used/2, 10)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", limit).Err(); err != nil {
		t.Fatalf("redistest: CONFIG SET maxmemory %s: %v", limit, err)
	}
	err := rdb.Set(ctx, "redistest:probe", "x", 0).Err()
	if refused := err != nil && strings.HasPrefix(err.Error(), "OOM"); refused != on {
		t.Fatalf("redistest: asked to refuse writes: %v, but a write answered %v (is the server started with --maxmemory-policy noeviction?)", on, err)
	}
}

// Stop kills the server (until Restart): clients then get connection
// errors, as with a Redis that is down.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stop()
}

// run starts the server process and waits until it answers.
func (s *Server) run() error {
	bin, args, addr := s.bin, s.args, s.Addr
	cmd := exec.Command(bin, args...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var once sync.Once
	stop := func() { // once: a stopped server is stopped again by Restart and the cleanup
		once.Do(func() {
			_ = cmd.Process.Kill()
			<-exited
		})
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ping(addr) == nil {
			break
		}
		select {
		case err := <-exited:
			exited <- err
			stop()
			return fmt.Errorf("redis-server exited (%v): %s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			stop()
			return fmt.Errorf("redis-server on %s did not answer PING: %s", addr, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.cmd, s.out, s.stop = cmd, out, stop
	return nil
}

// Output is what redis-server printed so far.
func (s *Server) Output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("redistest: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ping speaks just enough RESP to learn the server is up, without a
// client library.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// syncBuffer is a bytes.Buffer the server's output goroutines and the
// test can share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
