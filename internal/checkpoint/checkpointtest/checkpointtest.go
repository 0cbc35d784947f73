// Package checkpointtest gives tests real checkpoint stores: a Keeper over
// a directory (checkpoint/blob/dir) with a key, as every replica of one
// deployment has them (a shared volume, one Secret).
package checkpointtest

import (
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
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

// Head reads the head of container's checkpoint in the directory store at
// root, of any owner: its token and whether code runs on its state
// (Keeper.MarkRunning); ok is false when there is no head (or several).
// It reads format 2 heads (JSON) and format 1 ("<token>[ running]").
func Head(root, container string) (token string, running, ok bool) {
	files, _ := filepath.Glob(filepath.Join(root, "v1", "*", container, "head~"))
	if len(files) != 1 {
		return "", false, false
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		return "", false, false
	}
	var h struct {
		Token   string `json:"token"`
		Running bool   `json:"running"`
	}
	if json.Unmarshal(b, &h) == nil {
		return h.Token, h.Running, h.Token != ""
	}
	token, running = strings.CutSuffix(string(b), " running")
	return token, running, token != ""
}
