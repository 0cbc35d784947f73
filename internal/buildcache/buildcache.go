// Package buildcache finds what the build scripts under runtime/ leave in
// the cache directory (the CPython-WASI runtime, the gVisor sandbox's root
// filesystem): each builds into <cache root>/codeinterp/<prefix><recipe
// hash> and writes MANIFEST last, so a directory with a MANIFEST is a
// finished build and the newest one is what the checked-out scripts
// describe.
package buildcache

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrNotBuilt is matched by Newest's error when no finished build exists.
var ErrNotBuilt = errors.New("not built")

// Root is <cache root>/codeinterp, the cache root being $XDG_CACHE_HOME,
// else $HOME/.cache. lookupEnv is os.LookupEnv outside tests.
func Root(lookupEnv func(string) (string, bool)) (string, error) {
	if x, ok := lookupEnv("XDG_CACHE_HOME"); ok && x != "" {
		return filepath.Join(x, "codeinterp"), nil
	}
	if h, ok := lookupEnv("HOME"); ok && h != "" {
		return filepath.Join(h, ".cache", "codeinterp"), nil
	}
	return "", errors.New("neither XDG_CACHE_HOME nor HOME is set")
}

// Newest returns the directory under root named prefix* whose MANIFEST is
// the newest.
func Newest(root, prefix string) (string, error) {
	return NewestMatching(root, prefix, nil)
}

// NewestMatching is Newest among the directories whose MANIFEST accept
// takes (nil: any). Several checkouts of different versions may share one
// cache (worktrees, a branch that moves a pin): the newest build is then
// not necessarily the one this checkout describes, and a caller that
// knows what it needs says so here.
func NewestMatching(root, prefix string, accept func(manifest []byte) bool) (string, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return "", fmt.Errorf("%s: %w", root, errors.Join(err, ErrNotBuilt))
	}
	best := ""
	var bestTime int64
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		dir := filepath.Join(root, e.Name())
		m := filepath.Join(dir, "MANIFEST")
		fi, err := os.Stat(m)
		if err != nil {
			continue // an unfinished build
		}
		if accept != nil {
			b, err := os.ReadFile(m)
			if err != nil || !accept(b) {
				continue
			}
		}
		if t := fi.ModTime().UnixNano(); best == "" || t > bestTime {
			best, bestTime = dir, t
		}
	}
	if best == "" {
		what := "finished"
		if accept != nil {
			what = "finished and matching"
		}
		return "", fmt.Errorf("no %s %s* directory under %s: %w", what, prefix, root, ErrNotBuilt)
	}
	return best, nil
}

// Find is the directory a build script's output is read from: $env if set
// (the script writes there too), else Newest under Root.
func Find(env, prefix string) (string, error) {
	if d := os.Getenv(env); d != "" {
		return d, nil
	}
	root, err := Root(os.LookupEnv)
	if err != nil {
		return "", fmt.Errorf("no cache directory: %w", errors.Join(err, ErrNotBuilt))
	}
	return Newest(root, prefix)
}

// FindMatching is Find with NewestMatching: $env if set, else the newest
// build under Root whose MANIFEST accept takes.
func FindMatching(env, prefix string, accept func(manifest []byte) bool) (string, error) {
	if d := os.Getenv(env); d != "" {
		return d, nil
	}
	root, err := Root(os.LookupEnv)
	if err != nil {
		return "", fmt.Errorf("no cache directory: %w", errors.Join(err, ErrNotBuilt))
	}
	return NewestMatching(root, prefix, accept)
}
