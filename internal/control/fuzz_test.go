package control

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// FuzzHandler feeds arbitrary methods, paths, headers and bodies to the
// API's handler, over a lab with no workloads (so that nothing it accepts
// can start pods): it never panics and never answers 500; every reply is
// a JSON object with the Pinlab-Control header, an error reply names the
// error; and nothing is served (200) without the lab's token, its own Host
// and no foreign Origin. In the inputs, $ADDR stands for the API's address
// and $TOKEN for its token. The seeds are in testdata/fuzz/FuzzHandler.
func FuzzHandler(f *testing.F) {
	l, err := startLab(nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { l.Close() })
	token := NewToken()
	srv, err := Listen(f.Context(), Config{Addr: "127.0.0.1:0", Token: token})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { srv.Shutdown(f.Context()) })
	srv.Serve(l)
	expand := strings.NewReplacer("$ADDR", srv.Addr(), "$TOKEN", token).Replace

	f.Fuzz(func(t *testing.T, method, path, host, origin, fetchSite, contentType, auth string, body []byte) {
		r := &http.Request{Method: method, URL: &url.URL{Path: path}, Host: expand(host), Header: http.Header{},
			Body: http.NoBody, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
		if len(body) > 0 {
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		}
		for k, v := range map[string]string{"Origin": expand(origin), "Sec-Fetch-Site": fetchSite, "Content-Type": contentType, "Authorization": expand(auth)} {
			if v != "" {
				r.Header.Set(k, v)
			}
		}
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		if msg := wrongReply(w, r, srv.Addr(), token); msg != "" {
			t.Fatalf("%s %q Host %q Origin %q Sec-Fetch-Site %q Content-Type %q Authorization %q body %q: %d %s: %s",
				method, path, r.Host, r.Header.Get("Origin"), fetchSite, contentType, r.Header.Get("Authorization"), body, w.Code, w.Body, msg)
		}
	})
}

// wrongReply returns what is wrong with the reply w to r, or "".
func wrongReply(w *httptest.ResponseRecorder, r *http.Request, addr, token string) string {
	var reply map[string]any
	err := json.Unmarshal(w.Body.Bytes(), &reply)
	switch {
	case w.Code == http.StatusInternalServerError:
		return "500"
	case w.Header().Get(Header) != headerValue:
		return "no " + Header + " header"
	case err != nil:
		return "not a JSON object: " + err.Error()
	case w.Code != http.StatusOK && reply["error"] == "":
		return "an error reply without its error"
	}
	if w.Code == http.StatusOK {
		scheme, got, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		origin := r.Header.Get("Origin")
		if !strings.EqualFold(scheme, "bearer") || strings.TrimSpace(got) != token || r.Host != addr || origin != "" && origin != "http://"+addr {
			return "served without the token, with a foreign Host or Origin"
		}
	}
	return ""
}
