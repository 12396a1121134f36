package stats

import (
	"time"

	"google.golang.org/grpc/codes"
)

// ErrorGap is the longest stretch without failed calls inside one error
// window: failures closer together than this belong to the same window.
const ErrorGap = time.Second

// ErrorWindow is a stretch of the run with failed calls: it starts with the
// first failed call's 100 ms bucket and ends with the last one's, and holds no
// failure-free gap of ErrorGap or longer. Calls are placed by the time they
// were due.
type ErrorWindow struct {
	From    Offset           `json:"from_s"`
	To      Offset           `json:"to_s"`
	Failed  int64            `json:"failed"`
	ByCode  map[string]int64 `json:"by_code"`
	ByCause map[string]int64 `json:"by_cause"`
}

// Seconds is the window's length.
func (w ErrorWindow) Seconds() float64 { return time.Duration(w.To - w.From).Seconds() }

// failedBuckets sums every client's failed calls per bucket.
func (r *Recorder) failedBuckets() counts {
	var all counts
	for _, c := range r.clients {
		for code, k := range c.byCode {
			if code == codes.OK {
				continue
			}
			if len(*k) > len(all) {
				all = append(all, make([]uint32, len(*k)-len(all))...)
			}
			for i, v := range *k {
				all[i] += v
			}
		}
	}
	return all
}

// errorWindows finds the run's error windows.
func (r *Recorder) errorWindows() []ErrorWindow {
	failed := r.failedBuckets()
	gap := int(ErrorGap / Bucket)
	var spans [][2]int // bucket ranges [from, to)
	for b, v := range failed {
		if v == 0 {
			continue
		}
		if n := len(spans); n > 0 && b-spans[n-1][1] < gap {
			spans[n-1][1] = b + 1
			continue
		}
		spans = append(spans, [2]int{b, b + 1})
	}
	out := make([]ErrorWindow, 0, len(spans))
	for _, s := range spans {
		w := ErrorWindow{
			From: Offset(time.Duration(s[0]) * Bucket), To: Offset(time.Duration(s[1]) * Bucket),
			ByCode: map[string]int64{}, ByCause: map[string]int64{},
		}
		for _, c := range r.clients {
			for code, k := range c.byCode {
				if n := k.sum(s[0], s[1]); code != codes.OK && n > 0 {
					w.ByCode[code.String()] += n
					w.Failed += n
				}
			}
			for cause, k := range c.byCause {
				if n := k.sum(s[0], s[1]); n > 0 {
					w.ByCause[cause] += n
				}
			}
		}
		out = append(out, w)
	}
	return out
}
