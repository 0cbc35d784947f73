package containers_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/codeinterp/codeinterp/containers"
	"github.com/codeinterp/codeinterp/sandbox"
	"github.com/codeinterp/codeinterp/sandbox/sandboxtest"
)

// BenchmarkWarmRun is one print(25) in a warm interpreter, bare (a
// sandbox session) and in a container (the same run with the mirror before
// it and the collect after it), side by side: the difference is what
// keeping /mnt/data equal to the store costs a run, with no files and with
// 50 container files.
func BenchmarkWarmRun(b *testing.B) {
	p := sandboxtest.New(b)
	ctx := context.Background()
	b.Run("session", func(b *testing.B) {
		s, err := p.Open(ctx, sandbox.SessionOptions{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		for b.Loop() {
			if r, err := s.Run(ctx, "print(25)"); err != nil || r.Outcome != sandbox.OutcomeCompleted {
				b.Fatalf("%+v %v", r, err)
			}
		}
	})
	for _, files := range []int{0, 50} {
		b.Run(fmt.Sprintf("container-%dfiles", files), func(b *testing.B) {
			f := newFixture(b)
			owner, hdr := caller("sk-bench")
			c, err := f.m.Open(ctx, containers.Spec{Owner: owner, Header: hdr})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			if files > 0 {
				if r, err := c.Run(ctx, fmt.Sprintf("for i in range(%d):\n    open('/mnt/data/f%%d.csv' %% i, 'w').write('a,b\\n1,2\\n')", files)); err != nil || r.Outcome != sandbox.OutcomeCompleted {
					b.Fatalf("%+v %v", r, err)
				}
			}
			for b.Loop() {
				if r, err := c.Run(ctx, "print(25)"); err != nil || r.Outcome != sandbox.OutcomeCompleted {
					b.Fatalf("%+v %v", r, err)
				}
			}
		})
	}
}
