package control

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

// maxTokenFile bounds the bytes ReadToken reads: a token file is one line.
const maxTokenFile = 1 << 10

// WriteToken writes token to path, readable and writable by its owner only
// (mode 0600). With mkdir, the missing directories are created with mode
// 0700 (TokenPath's default place); without, the directory must exist. The
// directory holding the file must be the user's own and writable by nobody
// else, or another local user could swap the file (a FIFO that hangs the
// lab commands, a token of their own lab). A file already at path is
// replaced only when it is a stale token file of the user's (a lab that
// did not stop cleanly); anything else there (another file, a symlink, a
// FIFO) is an error, never overwritten or written through. The new file is
// written apart and renamed over path. Another local user cannot read it:
// that is what keeps them out of the lab's control API.
func WriteToken(path, token string, mkdir bool) error {
	dir := filepath.Dir(path)
	if mkdir {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("control: token file: %w", err)
		}
	}
	if err := checkPrivateDir(dir); err != nil {
		return err
	}
	if fi, err := os.Lstat(path); err == nil {
		if _, err := readTokenFile(path, fi); err != nil {
			return fmt.Errorf("control: %s exists and is not a token file of yours; refusing to replace it (remove it or pick another path): %w", path, err)
		}
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

// checkPrivateDir says whether dir is a directory the user owns that no
// one else may write to.
func checkPrivateDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("control: token file: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("control: token file: %s is not a directory", dir)
	case ok && int(st.Uid) != os.Getuid():
		return fmt.Errorf("control: token file: directory %s belongs to uid %d, not to you (uid %d): its owner could swap the token file; pass --token-file in a directory of yours", dir, st.Uid, os.Getuid())
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("control: token file: directory %s has mode %04o: other users could swap the token file; chmod go-w it or pass --token-file in a private directory", dir, fi.Mode().Perm())
	}
	return nil
}

// ReadToken returns the token kept in path. The file must be a regular
// file of the user's, at most 1 KiB, holding one token (base64url
// characters, at least 32); it is opened without blocking, so a FIFO or a
// device at path is an error, not a wait.
func ReadToken(path string) (string, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return "", err
	}
	if fi.Mode()&os.ModeSymlink != 0 { // a symlink the user made: read its target
		if fi, err = os.Stat(path); err != nil {
			return "", err
		}
	}
	return readTokenFile(path, fi)
}

// readTokenFile reads the token file at path, whose Lstat or Stat was fi.
func readTokenFile(path string, fi os.FileInfo) (string, error) {
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s: %w (it is a %v)", path, errNotTokenFile, fi.Mode().Type())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return "", fmt.Errorf("%s: %w (it belongs to uid %d, not to you)", path, errNotTokenFile, st.Uid)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil || !fi.Mode().IsRegular() { // swapped since the Lstat
		return "", fmt.Errorf("%s: %w", path, errNotTokenFile)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err != nil {
		return "", err
	}
	if len(b) > maxTokenFile {
		return "", fmt.Errorf("%s: %w (more than %d bytes)", path, errNotTokenFile, maxTokenFile)
	}
	token := strings.TrimSpace(string(b))
	switch {
	case token == "":
		return "", fmt.Errorf("%s: %w", path, errEmptyToken)
	case len(token) < minToken || strings.TrimLeft(token, tokenChars) != "":
		return "", fmt.Errorf("%s: %w (want one line of at least %d of A-Z a-z 0-9 - _)", path, errNotTokenFile, minToken)
	}
	return token, nil
}

// tokenChars are the characters of a token: base64url's.
const tokenChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

var (
	errEmptyToken   = errors.New("the token file is empty")
	errNotTokenFile = errors.New("not a pinlab token file")
)
