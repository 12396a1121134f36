package load

import (
	"encoding/binary"

	"golang.org/x/net/http2"
)

const (
	// frameHeaderLen is an HTTP/2 frame header's size (RFC 9113 section
	// 4.1): length (24 bits), type, flags, stream id (32 bits).
	frameHeaderLen = 9
	// goAwayFixedLen is the part of a GOAWAY payload before its debug data:
	// last stream id and error code, 4 bytes each (RFC 9113 section 6.8).
	goAwayFixedLen = 8
	// maxDebugData bounds the GOAWAY debug data kept; the rest is skipped.
	// grpc-go's servers send a few words ("max_age", "graceful_stop").
	maxDebugData = 128
)

// goAway is a GOAWAY frame's error code and (up to maxDebugData bytes of)
// debug data.
type goAway struct {
	code  http2.ErrCode
	debug string
}

// frameFollower follows an HTTP/2 server-to-client byte stream as it is
// read, in pieces split anywhere, to find the first GOAWAY frame. It copies
// only frame headers split across reads and GOAWAY payloads (bounded by
// maxDebugData); every other payload is skipped by length. The zero value
// expects a frame header, as a server's stream starts with its SETTINGS
// frame. Not safe for concurrent use.
type frameFollower struct {
	hdr    [frameHeaderLen]byte
	nhdr   int    // header bytes collected; frameHeaderLen while in a payload
	left   int    // payload bytes of the current frame still to come
	goAway bool   // the current frame is a GOAWAY
	buf    []byte // the GOAWAY payload so far, bounded
}

// follow consumes the next bytes of the stream. It returns the first
// GOAWAY and true once its payload is complete; the caller needs to follow
// no further.
func (f *frameFollower) follow(p []byte) (goAway, bool) {
	for len(p) > 0 {
		if f.nhdr < frameHeaderLen {
			n := copy(f.hdr[f.nhdr:], p)
			f.nhdr += n
			p = p[n:]
			if f.nhdr < frameHeaderLen {
				return goAway{}, false
			}
			f.start()
		} else {
			n := min(f.left, len(p))
			if f.goAway {
				keep := min(n, goAwayFixedLen+maxDebugData-len(f.buf))
				f.buf = append(f.buf, p[:keep]...)
			}
			f.left -= n
			p = p[n:]
		}
		if f.nhdr == frameHeaderLen && f.left == 0 {
			if f.goAway {
				return parseGoAway(f.buf), true
			}
			f.nhdr = 0 // the next frame's header
		}
	}
	return goAway{}, false
}

// start begins the payload of the frame whose header is in f.hdr.
func (f *frameFollower) start() {
	f.left = int(f.hdr[0])<<16 | int(f.hdr[1])<<8 | int(f.hdr[2])
	f.goAway = http2.FrameType(f.hdr[3]) == http2.FrameGoAway
	f.buf = f.buf[:0]
}

// parseGoAway reads a GOAWAY payload: error code at bytes 4-7, debug data
// after. A payload shorter than 8 bytes (a FRAME_SIZE_ERROR to the client)
// gives code NO_ERROR and no debug data.
func parseGoAway(p []byte) goAway {
	if len(p) < goAwayFixedLen {
		return goAway{}
	}
	return goAway{code: http2.ErrCode(binary.BigEndian.Uint32(p[4:8])), debug: printable(p[goAwayFixedLen:])}
}

// printable is b with bytes outside printable ASCII replaced by '?'.
func printable(b []byte) string {
	out := make([]byte, len(b))
	for i, c := range b {
		if c < ' ' || c > '~' {
			c = '?'
		}
		out[i] = c
	}
	return string(out)
}
