package load

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/http2"
)

// frame is one HTTP/2 frame's bytes: header and payload.
func frame(typ http2.FrameType, streamID uint32, payload []byte) []byte {
	b := []byte{byte(len(payload) >> 16), byte(len(payload) >> 8), byte(len(payload)), byte(typ), 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[5:], streamID)
	return append(b, payload...)
}

func goAwayFrame(code http2.ErrCode, debug string) []byte {
	p := make([]byte, 8, 8+len(debug))
	binary.BigEndian.PutUint32(p, 1<<31-1)
	binary.BigEndian.PutUint32(p[4:], uint32(code))
	return frame(http2.FrameGoAway, 0, append(p, debug...))
}

func stream(frames ...[]byte) []byte {
	var b []byte
	for _, f := range frames {
		b = append(b, f...)
	}
	return b
}

// followPieces feeds pieces to a new follower and returns the reason of the
// GOAWAY it finds ("" if none) and the number of bytes fed until then.
func followPieces(pieces [][]byte) (CloseReason, int) {
	var f frameFollower
	fed := 0
	for _, p := range pieces {
		fed += len(p)
		if g, ok := f.follow(p); ok {
			return goAwayReason(g), fed
		}
	}
	return "", fed
}

// TestFrameFollower feeds crafted server streams whole, in every split in
// two and three pieces (frame headers and GOAWAY payloads split across
// reads) and a byte at a time; every way must find the same first GOAWAY.
func TestFrameFollower(t *testing.T) {
	settings := frame(http2.FrameSettings, 0, []byte{0, 4, 0, 0, 0xff, 0xff}) // INITIAL_WINDOW_SIZE
	ping := frame(http2.FramePing, 0, []byte{1, 6, 1, 8, 0, 3, 3, 9})
	data := frame(http2.FrameData, 1, []byte(strings.Repeat("x", 300)))
	empty := frame(http2.FrameSettings, 0, nil) // a SETTINGS ack
	tests := []struct {
		name   string
		stream []byte
		want   CloseReason
	}{
		{"no GOAWAY", stream(settings, empty, ping, data), ""},
		{"max_age after other frames", stream(settings, empty, data, ping, goAwayFrame(http2.ErrCodeNo, "max_age")), ReasonGoAwayMaxAge},
		{"graceful_stop first", stream(goAwayFrame(http2.ErrCodeNo, "graceful_stop"), data), ReasonGoAwayGracefulStop},
		{"max_idle", stream(settings, goAwayFrame(http2.ErrCodeNo, "max_idle")), ReasonGoAwayMaxIdle},
		{"no debug data", stream(settings, goAwayFrame(http2.ErrCodeNo, "")), ReasonGoAway},
		{"too_many_pings", stream(settings, ping, goAwayFrame(http2.ErrCodeEnhanceYourCalm, "too_many_pings")), ReasonGoAwayTooManyPings},
		{"other debug data kept", stream(goAwayFrame(http2.ErrCodeNo, "bye now")), "goaway bye now"},
		{"error code without debug data", stream(goAwayFrame(http2.ErrCodeProtocol, "")), "goaway PROTOCOL_ERROR"},
		{"the first of two", stream(goAwayFrame(http2.ErrCodeNo, "max_age"), goAwayFrame(http2.ErrCodeNo, "graceful_stop")), ReasonGoAwayMaxAge},
		{"debug data bounded", stream(goAwayFrame(http2.ErrCodeNo, strings.Repeat("d", 300)), ping), CloseReason("goaway " + strings.Repeat("d", maxDebugData))},
		{"non-printable debug bytes", stream(goAwayFrame(http2.ErrCodeNo, "a\x00b\xffc")), "goaway a?b?c"},
		{"short payload", stream(frame(http2.FrameGoAway, 0, []byte{0, 0, 0, 1})), ReasonGoAway},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			whole, wantFed := followPieces([][]byte{tt.stream})
			if diff := cmp.Diff(tt.want, whole); diff != "" {
				t.Fatalf("whole stream (-want +got):\n%s", diff)
			}
			if tt.want != "" {
				// The GOAWAY is complete at the end of its payload.
				wantFed = goAwayEnd(tt.stream)
			}
			check := func(how string, pieces [][]byte) {
				t.Helper()
				got, fed := followPieces(pieces)
				if got != tt.want {
					t.Fatalf("%s: got %q, want %q", how, got, tt.want)
				}
				if tt.want != "" && fed < wantFed {
					t.Fatalf("%s: GOAWAY found after %d bytes, before its end at %d", how, fed, wantFed)
				}
			}
			s := tt.stream
			for i := 0; i <= len(s); i++ {
				check(fmt.Sprintf("split at %d", i), [][]byte{s[:i], s[i:]})
				for j := i; j <= len(s); j++ {
					check(fmt.Sprintf("split at %d,%d", i, j), [][]byte{s[:i], s[i:j], s[j:]})
				}
			}
			bytes := make([][]byte, len(s))
			for i := range s {
				bytes[i] = s[i : i+1]
			}
			check("byte at a time", bytes)
		})
	}
}

// goAwayEnd returns the offset just past the first GOAWAY frame of s.
func goAwayEnd(s []byte) int {
	for off := 0; off+frameHeaderLen <= len(s); {
		n := int(s[off])<<16 | int(s[off+1])<<8 | int(s[off+2])
		end := off + frameHeaderLen + n
		if http2.FrameType(s[off+3]) == http2.FrameGoAway {
			return end
		}
		off = end
	}
	return len(s)
}
