package pool

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/sandbox"
)

// restoringKind is a recordingKind that restores sessions, whose Start
// with a Restore fails with startErr (given ctx); without one it starts
// as recordingKind does.
type restoringKind struct {
	recordingKind
	startErr func(ctx context.Context) error
}

func (k *restoringKind) RestoresSessions() bool { return true }

func (k *restoringKind) Start(ctx context.Context, o StartOptions) (Interpreter, error) {
	if o.Restore != nil {
		if err := k.startErr(ctx); err != nil {
			return nil, err
		}
	}
	return k.recordingKind.Start(ctx, o)
}

// TestRestoreFailures: only the kind's definite refusal of a state (an
// error wrapping sandbox.ErrNoCheckpoint) reads as no checkpoint: a
// restore that fails for any other reason — its context ended, the
// interpreter could not start, the pool is full — is reported as that
// failure, so that its caller keeps the checkpoint (issue 37, row 4).
func TestRestoreFailures(t *testing.T) {
	transient := errors.New("the worker did not start: resource temporarily unavailable")
	for _, tc := range []struct {
		name     string
		startErr func(ctx context.Context) error
		cancel   bool // the Open's context is cancelled first
		refused  bool // want ErrNoCheckpoint
		want     error
	}{
		{name: "context cancelled", cancel: true, startErr: func(ctx context.Context) error {
			return fmt.Errorf("worker start-up: %w", ctx.Err())
		}, want: context.Canceled},
		{name: "start timeout", startErr: func(context.Context) error {
			return fmt.Errorf("worker start-up: %w", context.DeadlineExceeded)
		}, want: context.DeadlineExceeded},
		{name: "the worker cannot start", startErr: func(context.Context) error { return transient }, want: transient},
		{name: "refused", refused: true, startErr: func(context.Context) error {
			return fmt.Errorf("%w: corrupt state", sandbox.ErrNoCheckpoint)
		}, want: sandbox.ErrNoCheckpoint},
		// A kind that took the context's end for a bad state is not
		// believed: the state may be fine.
		{name: "refused as its context ended", cancel: true, startErr: func(context.Context) error {
			return fmt.Errorf("%w: the state's snapshot: no base", sandbox.ErrNoCheckpoint)
		}, want: context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &restoringKind{recordingKind: recordingKind{started: make(chan struct{}, 8)}, startErr: tc.startErr}
			cfg := DefaultConfig()
			cfg.WarmWorkers, cfg.MaxSessions = 0, 1
			cfg.Isolation.Cgroup = "off"
			p, err := New(context.Background(), cfg, k, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				cancel()
			}
			_, err = p.Open(ctx, sandbox.SessionOptions{Restore: []byte("state")})
			if !errors.Is(err, tc.want) {
				t.Fatalf("Open: %v, want %v", err, tc.want)
			}
			if got := errors.Is(err, sandbox.ErrNoCheckpoint); got != tc.refused {
				t.Fatalf("Open: %v: ErrNoCheckpoint is %v, want %v", err, got, tc.refused)
			}
			// The slot was given back.
			if c := p.Capacity(); c.InUse != 0 {
				t.Fatalf("after a failed restore %d sessions are in use", c.InUse)
			}
		})
	}
	t.Run("capacity", func(t *testing.T) {
		k := &restoringKind{recordingKind: recordingKind{started: make(chan struct{}, 8)}, startErr: func(context.Context) error { return nil }}
		cfg := DefaultConfig()
		cfg.WarmWorkers, cfg.MaxSessions, cfg.QueueWait = 0, 1, 10*time.Millisecond
		cfg.Isolation.Cgroup = "off"
		p, err := New(context.Background(), cfg, k, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		s, err := p.Open(context.Background(), sandbox.SessionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		_, err = p.Open(context.Background(), sandbox.SessionOptions{Restore: []byte("state")})
		if !errors.Is(err, sandbox.ErrCapacity) || errors.Is(err, sandbox.ErrNoCheckpoint) {
			t.Fatalf("a restore on a full pool: %v, want ErrCapacity and not ErrNoCheckpoint", err)
		}
	})
}
