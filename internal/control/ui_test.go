package control

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestUI: a UI handler gets the requests outside /v1/ that pass the API's
// checks; the page itself needs no token, everything else does.
func TestUI(t *testing.T) {
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ui "+r.Method+" "+r.URL.Path) })
	srv, tokenFile := listen(t, Config{UI: ui})
	token, err := ReadToken(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	own := srv.Addr()
	tests := []struct {
		name, method, path, host string
		header                   map[string]string
		code                     int
		body                     string
	}{
		{name: "page without a token", method: "GET", path: "/", code: 200, body: "ui GET /"},
		{name: "page, HEAD", method: "HEAD", path: "/", code: 200},
		{name: "page navigated to", method: "GET", path: "/", header: map[string]string{"Sec-Fetch-Site": "none"}, code: 200},
		{name: "page from another site", method: "GET", path: "/", header: map[string]string{"Sec-Fetch-Site": "cross-site"}, code: 403},
		{name: "page with a foreign origin", method: "GET", path: "/", header: map[string]string{"Origin": "http://evil.example"}, code: 403},
		{name: "page through a rebound name", method: "GET", path: "/", host: "evil.example:7471", code: 421},
		{name: "page POSTed", method: "POST", path: "/", code: 401},
		{name: "stream without a token", method: "GET", path: "/ui/events", code: 401},
		{name: "stream with a wrong token", method: "GET", path: "/ui/events", header: map[string]string{"Authorization": "Bearer " + NewToken()}, code: 401},
		{name: "stream with the token", method: "GET", path: "/ui/events", header: map[string]string{"Authorization": "Bearer " + token}, code: 200, body: "ui GET /ui/events"},
		{name: "stream from the page", method: "GET", path: "/ui/events", header: map[string]string{"Authorization": "Bearer " + token, "Origin": "http://" + own, "Sec-Fetch-Site": "same-origin"}, code: 200},
		{name: "stream from another site", method: "GET", path: "/ui/events", header: map[string]string{"Authorization": "Bearer " + token, "Sec-Fetch-Site": "cross-site"}, code: 403},
		{name: "the API is still the API", method: "GET", path: "/v1/info", header: map[string]string{"Authorization": "Bearer " + token}, code: 503},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, "http://"+own+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.host != "" {
				req.Host = tt.host
			}
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.code || !strings.Contains(string(body), tt.body) {
				t.Errorf("%s %s: %d %q, want %d %q", tt.method, tt.path, resp.StatusCode, body, tt.code, tt.body)
			}
			if resp.Header.Get(Header) != headerValue {
				t.Errorf("no %s header", Header)
			}
		})
	}
}
