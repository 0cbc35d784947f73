package checkpoint

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// LoadKey returns the checkpoint key: the base64 of KeySize bytes in
// configured (from the configuration or a Secret) when it is set, else the
// key in keyFile, which is made (KeySize random bytes, mode 0600, its
// directory 0700) when it does not exist. On several replicas the key must
// be the same everywhere: configure it; a key file is for one host.
//
// A key file that others may read or write is refused: whoever reads the
// key reads every checkpoint, and whoever writes it can make the server
// restore state of their choosing.
func LoadKey(configured, keyFile string) ([]byte, error) {
	if configured != "" {
		key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(configured))
		if err != nil {
			return nil, fmt.Errorf("checkpoint key: not base64: %w", err)
		}
		if len(key) != KeySize {
			return nil, fmt.Errorf("checkpoint key: %d bytes, want %d (openssl rand -base64 32)", len(key), KeySize)
		}
		return key, nil
	}
	if keyFile == "" {
		return nil, errors.New("checkpoint key: neither a key nor a key file is configured")
	}
	key, err := readKeyFile(keyFile)
	if !errors.Is(err, fs.ErrNotExist) {
		return key, err
	}
	return makeKeyFile(keyFile)
}

func readKeyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("checkpoint key file %s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("checkpoint key file %s has mode %#o: others may read or write it; chmod 600 it", path, perm)
	}
	key := make([]byte, KeySize+1)
	n, err := f.Read(key)
	if err != nil {
		return nil, fmt.Errorf("checkpoint key file %s: %w", path, err)
	}
	if n != KeySize {
		return nil, fmt.Errorf("checkpoint key file %s holds %d bytes, want %d", path, n, KeySize)
	}
	return key[:KeySize], nil
}

// makeKeyFile writes a new key with O_EXCL, so two servers starting at
// once on one host end with one key: the loser reads the winner's.
func makeKeyFile(path string) ([]byte, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("checkpoint key file: %w", err)
	}
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".key-*")
	if err != nil {
		return nil, fmt.Errorf("checkpoint key file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(key); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	// A hard link fails if path exists: the key is never replaced.
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return readKeyFile(path)
		}
		return nil, fmt.Errorf("checkpoint key file: %w", err)
	}
	return key, nil
}
