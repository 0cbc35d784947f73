package sandboxtest

import (
	"context"

	"github.com/codeinterp/codeinterp/internal/sandbox"
)

// Observed wraps a provider so a test sees every run of its sessions:
// Started (if set) is called as a run starts, Ended (if set) with its
// result once it returns.
type Observed struct {
	sandbox.Provider
	Started func()
	Ended   func(sandbox.Result)
}

// Open implements sandbox.Provider.
func (p *Observed) Open(ctx context.Context, o sandbox.SessionOptions) (sandbox.Session, error) {
	s, err := p.Provider.Open(ctx, o)
	if err != nil {
		return nil, err
	}
	return &observedSession{Session: s, p: p}, nil
}

type observedSession struct {
	sandbox.Session
	p *Observed
}

func (s *observedSession) Run(ctx context.Context, code string) (sandbox.Result, error) {
	if s.p.Started != nil {
		s.p.Started()
	}
	r, err := s.Session.Run(ctx, code)
	if s.p.Ended != nil {
		s.p.Ended(r)
	}
	return r, err
}

// Shell implements sandbox.Sheller: the wrapped session's shell, observed
// as a run (a wrapper without it would hide the provider's shell).
func (s *observedSession) Shell(ctx context.Context, req sandbox.ShellRequest) (sandbox.Result, error) {
	if s.p.Started != nil {
		s.p.Started()
	}
	r, err := sandbox.Shell(ctx, s.Session, req)
	if s.p.Ended != nil {
		s.p.Ended(r)
	}
	return r, err
}
