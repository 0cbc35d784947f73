package pool_test

import (
	"context"
	"testing"

	"github.com/codeinterp/codeinterp/sandbox"
	"github.com/codeinterp/codeinterp/sandbox/sandboxtest"
)

func TestSmoke(t *testing.T) {
	p := sandboxtest.New(t)
	s, err := p.Open(context.Background(), sandbox.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, code := range []string{"x = 25\nprint(x)", "x + 1", "import os; print(os.getuid(), sorted(os.environ))", "1/0"} {
		r, err := s.Run(context.Background(), code)
		t.Logf("%q → %+v %v", code, r, err)
	}
}
