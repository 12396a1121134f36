package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Limits on one scenario or manifest file, so that loading it stays quick
// and small whatever it holds. Measured on the 2-core development machine.
const (
	// MaxFileSize bounds a file, from a path or standard input: 3 MiB, the
	// API server's limit on a request body (one object). Time and memory
	// grow with the YAML values of a file, not its bytes: the worst case
	// at this size, one flow list of 1.5 million numbers, is refused by
	// MaxValues after 2.8 s and 370 MB. With the 16 MiB of earlier
	// versions it took 13 s and 1.5 GB, and 93 s and 10 GB before
	// MaxValues.
	MaxFileSize = 3 << 20
	// MaxObjects bounds the Kubernetes objects of a file: as many as the
	// pods a lab runs (plan.MaxPods). A lab up started 1000 Services in
	// 5.7 s (92 MB), 1000 Namespaces in 5 s and 3000 in 13 s; 200,000
	// never finished starting.
	MaxObjects = 1000
	// MaxValues bounds the YAML values (scalars, lists, mappings,
	// documents) of a file: 1000 objects of 100 values each and the
	// largest EndpointSlice the API server takes (1000 endpoints of 100
	// addresses) fit twice over. 200,000 values in one list took 1.8 s and
	// 310 MB to load and refuse.
	MaxValues = 200_000
)

// ReadFile reads a file: a regular file, or anything else os.Open opens
// (a FIFO, a device, /dev/stdin), up to MaxFileSize. A regular file
// larger than that is refused before it is read. It returns when ctx ends,
// even while it waits for a FIFO's writer or for more from a FIFO or
// terminal that never ends; the error then wraps ctx's. (os.File waits
// for those through the runtime's poller, which a read deadline ends.)
func ReadFile(ctx context.Context, path string) ([]byte, error) {
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return nil, err
	case fi.IsDir():
		return nil, fmt.Errorf("%s is a directory; expected a file", path)
	case fi.Mode().IsRegular() && fi.Size() > MaxFileSize:
		return nil, fmt.Errorf("%s: %w", path, tooLarge(fi.Size()))
	}
	fifo := fi.Mode().Type() == fs.ModeNamedPipe
	flag := os.O_RDONLY
	if fifo {
		flag |= syscall.O_NONBLOCK // a blocking open waits for a writer, beyond any deadline
	}
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	stop := context.AfterFunc(ctx, func() { f.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	if fifo {
		err = awaitWriter(f)
	}
	var data []byte
	if err == nil {
		data, err = readMax(f)
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("reading %s: %w", path, ctx.Err())
	}
	if err := checkSize(path, data, err); err != nil {
		return nil, err
	}
	return data, nil
}

// awaitWriter waits until the FIFO f, opened without waiting for a
// writer, has something to say: data, or a writer that came and went.
// Until a writer comes, a read would return end of file at once, but
// Linux's poll reports neither data nor a hang-up (pipe_poll), so the
// runtime's poller waits as a blocking open would, and a read deadline
// ends it. Each check polls the FIFO's state itself: the poller reports
// only changes, and one that came before the wait is not kept for it.
func awaitWriter(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Read(func(fd uintptr) bool {
		for {
			n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
			if err != unix.EINTR {
				return err != nil || n > 0 // an error: let the read report it
			}
		}
	})
}

// ReadAll reads r, standard input for example, up to MaxFileSize; name
// names it in errors. It returns as soon as ctx ends, leaving the read it
// started to end when r returns (closing r, if the caller owns it, ends a
// read that blocks on a pipe).
func ReadAll(ctx context.Context, name string, r io.Reader) ([]byte, error) {
	type result struct {
		data []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		data, err := readMax(r)
		done <- result{data, err}
	}()
	select {
	case res := <-done:
		if err := checkSize(name, res.data, res.err); err != nil {
			return nil, err
		}
		return res.data, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("reading %s: %w", name, ctx.Err())
	}
}

// readMax reads r to its end or to one byte past MaxFileSize.
func readMax(r io.Reader) ([]byte, error) {
	return io.ReadAll(io.LimitReader(r, MaxFileSize+1))
}

func checkSize(name string, data []byte, err error) error {
	switch {
	case err != nil:
		return fmt.Errorf("reading %s: %w", name, err)
	case len(data) > MaxFileSize:
		return fmt.Errorf("%s: %w", name, tooLarge(-1))
	}
	return nil
}

// ErrTooLarge is wrapped by the errors for input beyond MaxFileSize.
var ErrTooLarge = errors.New("file too large")

// tooLarge describes input of size bytes (-1: unknown, more than
// MaxFileSize).
func tooLarge(size int64) error {
	got := ""
	if size >= 0 {
		got = fmt.Sprintf("%.1f MiB, ", float64(size)/(1<<20))
	}
	return fmt.Errorf("%w: %smore than %d MiB (the API server's limit for one object; a lab runs at most %d objects), so split the file", ErrTooLarge, got, MaxFileSize>>20, MaxObjects)
}
