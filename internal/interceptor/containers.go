package interceptor

import (
	"context"

	"github.com/codeinterp/codeinterp/internal/containers"
)

// Containers is where a response's code runs when the server keeps
// OpenAI-style containers (package containers implements it over a store
// and the sandbox). Without one, every response runs in a fresh, unnamed
// sandbox session, and container ids and file_ids are refused.
type Containers interface {
	// Open returns the container a response uses, as spec declares it.
	// Errors matching containers.ErrNotFound, ErrExpired and
	// ErrFileNotFound become the client's 404 and 400 answers.
	Open(ctx context.Context, spec containers.Spec) (containers.Container, error)
}

// The server's implementation.
var _ Containers = (*containers.Manager)(nil)
