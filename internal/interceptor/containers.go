package interceptor

import (
	"context"

	"github.com/codeinterp/codeinterp/internal/containerapi"
)

// Containers is where a response's code runs when the server keeps
// OpenAI-style containers (package containers implements it over a store
// and the sandbox). Without one, every response runs in a fresh, unnamed
// sandbox session, and container ids and file_ids are refused.
type Containers interface {
	// Open returns the container a response uses, as spec declares it.
	// Errors matching containerapi.ErrNotFound, ErrExpired and
	// ErrFileNotFound become the client's 404 and 400 answers.
	Open(ctx context.Context, spec containerapi.Spec) (containerapi.Container, error)
}
