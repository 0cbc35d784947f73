// Package checkpointtest gives tests real checkpoint stores: a Keeper over
// a directory (checkpoint/blob/dir) with a key, as every replica of one
// deployment has them (a shared volume, one Secret).
package checkpointtest

import (
	"crypto/rand"
	"path/filepath"
	"testing"

	"github.com/codeinterp/codeinterp/internal/checkpoint"
	"github.com/codeinterp/codeinterp/internal/checkpoint/blob/dir"
)

// Key returns a new random checkpoint key.
func Key(tb testing.TB) []byte {
	tb.Helper()
	k := make([]byte, checkpoint.KeySize)
	if _, err := rand.Read(k); err != nil {
		tb.Fatal(err)
	}
	return k
}

// Keeper returns a Keeper of origin's checkpoints in the directory root,
// sealed with key, bounded by maxBytes (0: none).
func Keeper(tb testing.TB, root string, key []byte, origin string, maxBytes int) *checkpoint.Keeper {
	tb.Helper()
	st, err := dir.New(root)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := checkpoint.NewSealer(key)
	if err != nil {
		tb.Fatal(err)
	}
	return checkpoint.NewKeeper(s, st, origin, maxBytes)
}

// States returns the files of container's sealed states in the directory
// store at root, of any owner: one per checkpointed container, a state
// per write named "state-<fence>-<random>" ("state" before format 2).
func States(root, container string) []string {
	files, _ := filepath.Glob(filepath.Join(root, "v1", "*", container, "state*~"))
	return files
}
