package dashboard

import (
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"html/template"
	"net/http"
	"time"

	"github.com/pinlab/pinlab/internal/chart"
)

// StreamPath is where the page reads the board's snapshots: a stream of
// server-sent events ("snapshot", then "end" when the board is done).
// PanelsPath is where it gets its panels' markup. Both need the token; the
// page itself ("/") holds nothing of the run or the lab.
const (
	StreamPath = "/ui/v1/events"
	PanelsPath = "/ui/v1/panels"
)

// writeTimeout bounds writing one event to a page.
const writeTimeout = 10 * time.Second

var (
	//go:embed page.tmpl
	pageTemplate string
	//go:embed panels.tmpl
	panelsTemplate string
	//go:embed dashboard.js
	pageJS string
	//go:embed dashboard.css
	pageCSS string
)

var (
	page   = template.Must(template.New("page").Parse(pageTemplate))
	panels = template.Must(template.Must(template.New("chart").Parse(chart.Figure)).New("panels").Parse(panelsTemplate))
)

// pageView is what the page's template renders: the same for every board.
type pageView struct {
	Nonce, Stream, PanelsPath string
	Style                     template.CSS
	Script                    template.JS
}

// panelsView is what the panels' template renders.
type panelsView struct {
	Panels []panelView
}

type panelView struct {
	Panel
	Index          int
	Rates, History chart.Chart
}

// Handler serves the page at "/" and the stream at StreamPath; everything
// else is 404. Put it behind the control API's checks (control.Config.UI).
func (b *Board) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", b.servePage)
	mux.HandleFunc("GET "+PanelsPath, b.servePanels)
	mux.HandleFunc("GET "+StreamPath, b.serveStream)
	return mux
}

// servePage serves the page: no figure of the run or the lab, which its
// script fetches with the token. Its script runs only with this
// response's nonce, and it may fetch from its own origin only.
func (b *Board) servePage(w http.ResponseWriter, r *http.Request) {
	nonce := make([]byte, 18)
	rand.Read(nonce)
	v := pageView{Stream: StreamPath, PanelsPath: PanelsPath, Nonce: base64.RawURLEncoding.EncodeToString(nonce),
		Style: chart.Style() + template.CSS(pageCSS), Script: chart.Script() + "\n" + template.JS(pageJS)}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'nonce-"+v.Nonce+"'; style-src 'unsafe-inline'; img-src data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	if err := page.Execute(w, v); err != nil {
		http.Error(w, "dashboard: "+err.Error(), http.StatusInternalServerError)
	}
}

// servePanels serves the markup of the board's panels, each with its
// charts' figures, for the page to insert.
func (b *Board) servePanels(w http.ResponseWriter, r *http.Request) {
	var v panelsView
	for i, p := range b.cfg.Panels {
		ps := newPanelState(p)
		v.Panels = append(v.Panels, panelView{Panel: p, Index: i, Rates: ps.ratesChart(i), History: ps.historyChart(i, now())})
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	if err := panels.Execute(w, v); err != nil {
		http.Error(w, "dashboard: "+err.Error(), http.StatusInternalServerError)
	}
}

// serveStream sends the latest snapshot, then each new one, until the page
// goes away or the board is done (then an "end" event).
func (b *Board) serveStream(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	// The server's read timeout would end a long stream; nothing more is
	// read from a GET.
	rc.SetReadDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	ch := b.subscribe()
	defer b.unsubscribe(ch)
	send := func(name string, data []byte) bool {
		rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := w.Write([]byte("event: " + name + "\ndata: ")); err != nil {
			return false
		}
		if _, err := w.Write(data); err != nil {
			return false
		}
		if _, err := w.Write([]byte("\n\n")); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	last := []byte("{}")
	for {
		select {
		case <-r.Context().Done():
			return
		case data, ok := <-ch:
			if !ok {
				send("end", last)
				return
			}
			last = data
			if !send("snapshot", data) {
				return
			}
		}
	}
}
