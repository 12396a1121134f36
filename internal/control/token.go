package control

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// NewToken returns a new bearer token: 32 bytes from crypto/rand, 43
// characters of unpadded base64url.
func NewToken() string {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand crashes the program instead)
	return base64.RawURLEncoding.EncodeToString(b)
}

// minToken is the shortest token Listen accepts.
const minToken = 32

// TokenPath returns where the token of the lab serving its control API at
// addr is kept by default: a file per address in $XDG_RUNTIME_DIR/pinlab
// when XDG_RUNTIME_DIR is set (a per-user directory that is emptied at
// logout), else in os.UserConfigDir()/pinlab (~/.config/pinlab on Linux).
func TokenPath(addr string) (string, error) {
	dir := os.Getenv("XDG_RUNTIME_DIR")
	if !filepath.IsAbs(dir) {
		cfg, err := os.UserConfigDir()
		if err != nil {
			return "", fmt.Errorf("control: no directory for the token file (%w); pass a token file path", err)
		}
		dir = cfg
	}
	name := "control-" + strings.ReplaceAll(addr, ":", "-") + ".token"
	return filepath.Join(dir, "pinlab", name), nil
}

// WriteToken writes token to path, readable and writable by its owner only
// (mode 0600), creating the missing directories with mode 0700. It writes
// a new file and renames it over path, so a file or symlink already there
// is replaced, never written through. Another local user cannot read the
// file: that is what keeps them out of the lab's control API.
func WriteToken(path, token string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("control: token file: %w", err)
	}
	f, err := os.CreateTemp(dir, ".token-*") // mode 0600
	if err != nil {
		return fmt.Errorf("control: token file: %w", err)
	}
	_, err = f.WriteString(token + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("control: token file: %w", err)
	}
	return nil
}

// ReadToken returns the token kept in path.
func ReadToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("%s: %w", path, errEmptyToken)
	}
	return token, nil
}

var errEmptyToken = errors.New("the token file is empty")
