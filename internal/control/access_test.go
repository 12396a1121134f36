package control

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// rawRequest is one raw request to the API. Header values replace the
// defaults (the token, and application/json on a POST); "-" removes one.
// Host "" is the API's own address; a path of the form "/v1/x" is called
// with GET unless a method is given, "/v1/scale" etc. with POST.
type rawRequest struct {
	method, path, host, body string
	header                   map[string]string
}

// do sends r to srv with token and returns the status and the error
// message of the reply, which must be JSON and carry the Pinlab-Control
// header.
func (r rawRequest) do(t *testing.T, srv *Server, token string) (int, string) {
	t.Helper()
	method := r.method
	if method == "" {
		method = routes[r.path].method
	}
	req, err := http.NewRequest(method, "http://"+srv.Addr()+r.path, strings.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	if r.host != "" {
		req.Host = r.host
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range r.header {
		req.Header.Del(k)
		if v != "-" {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct{ Error string }
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatalf("%s %s: %s with a body that is not JSON: %v", method, r.path, resp.Status, err)
	}
	if resp.Header.Get(Header) != headerValue {
		t.Errorf("%s %s: %s without the %s header", method, r.path, resp.Status, Header)
	}
	return resp.StatusCode, e.Error
}

// scaleBody is a valid scale request body: pricing stays at one replica.
const scaleBody = `{"kind":"Deployment","namespace":"shop","name":"pricing","replicas":1}`

// TestRequests: only a token holder's well-formed request from a program
// (not a web page) is served; every mistake is a 4xx naming it, never a
// 500.
func TestRequests(t *testing.T) {
	srv, tokenFile := listen(t, Config{})
	srv.Serve(sharedLab(t))
	token, err := ReadToken(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	own := srv.Addr()
	post := func(path, body string) rawRequest { return rawRequest{path: path, body: body} }
	with := func(r rawRequest, kv ...string) rawRequest {
		r.header = map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			r.header[kv[i]] = kv[i+1]
		}
		return r
	}
	scale := post("/v1/scale", scaleBody)
	info := rawRequest{path: "/v1/info"}
	tests := []struct {
		name     string
		req      rawRequest
		wantCode int
		wantErr  string
	}{
		{name: "info", req: info, wantCode: 200},
		{name: "scale", req: scale, wantCode: 200},

		{name: "no token", req: with(scale, "Authorization", "-"), wantCode: 401, wantErr: "needs the lab's token"},
		{name: "no token on a GET", req: with(info, "Authorization", "-"), wantCode: 401},
		{name: "wrong token", req: with(scale, "Authorization", "Bearer "+NewToken()), wantCode: 401, wantErr: "wrong token"},
		{name: "token cut short", req: with(scale, "Authorization", "Bearer "+token[:20]), wantCode: 401, wantErr: "wrong token"},
		{name: "another scheme", req: with(scale, "Authorization", "Basic "+token), wantCode: 401},
		{name: "scheme in lower case", req: with(info, "Authorization", "bearer "+token), wantCode: 200},

		{name: "cross-origin POST", req: with(scale, "Origin", "http://evil.example"), wantCode: 403, wantErr: `cross-origin request from "http://evil.example"`},
		{name: "cross-origin GET", req: with(info, "Origin", "http://evil.example"), wantCode: 403},
		{name: "origin null", req: with(scale, "Origin", "null"), wantCode: 403},
		{name: "origin of another port", req: with(scale, "Origin", "http://127.0.0.1:1"), wantCode: 403},
		{name: "own origin", req: with(scale, "Origin", "http://"+own), wantCode: 200},
		{name: "cross-site fetch", req: with(scale, "Sec-Fetch-Site", "cross-site"), wantCode: 403, wantErr: "Sec-Fetch-Site"},
		{name: "same-site fetch", req: with(scale, "Sec-Fetch-Site", "same-site"), wantCode: 403},
		{name: "same-origin fetch", req: with(scale, "Sec-Fetch-Site", "same-origin"), wantCode: 200},
		{name: "text/plain body", req: with(scale, "Content-Type", "text/plain"), wantCode: 415, wantErr: "expected application/json"},
		{name: "form body", req: with(scale, "Content-Type", "application/x-www-form-urlencoded"), wantCode: 415},
		{name: "no content type", req: with(scale, "Content-Type", "-"), wantCode: 415},
		{name: "json with charset", req: with(scale, "Content-Type", "application/json; charset=UTF-8"), wantCode: 200},
		{name: "json with another charset", req: with(scale, "Content-Type", "application/json; charset=latin1"), wantCode: 415},
		{name: "foreign host", req: rawRequest{path: "/v1/info", host: "evil.example:7471"}, wantCode: 421, wantErr: `Host "evil.example:7471" is not this API's address`},
		{name: "localhost", req: rawRequest{path: "/v1/info", host: "localhost:" + own[strings.LastIndexByte(own, ':')+1:]}, wantCode: 421},

		{name: "null body", req: post("/v1/scale", "null"), wantCode: 400, wantErr: "expected a JSON object"},
		{name: "empty object", req: post("/v1/scale", "{}"), wantCode: 400, wantErr: `kind ""`},
		{name: "empty body", req: post("/v1/scale", ""), wantCode: 400},
		{name: "array", req: post("/v1/scale", "["+scaleBody+"]"), wantCode: 400},
		{name: "trailing garbage", req: post("/v1/scale", scaleBody+" x"), wantCode: 400},
		{name: "two objects", req: post("/v1/scale", scaleBody+scaleBody), wantCode: 400},
		{name: "trailing white space", req: post("/v1/scale", scaleBody+"\n"), wantCode: 200},
		{name: "unknown field", req: post("/v1/scale", `{"kind":"Deployment","namespace":"shop","name":"pricing","replicas":1,"force":true}`), wantCode: 400, wantErr: `unknown field "force"`},
		{name: "field in another case", req: post("/v1/scale", `{"Kind":"Deployment","namespace":"shop","name":"pricing","replicas":1}`), wantCode: 400},
		{name: "duplicate field", req: post("/v1/scale", `{"kind":"Deployment","namespace":"shop","name":"pricing","replicas":1,"replicas":7}`), wantCode: 400, wantErr: `duplicate field "replicas"`},
		{name: "replicas as a string", req: post("/v1/scale", `{"kind":"Deployment","namespace":"shop","name":"pricing","replicas":"1"}`), wantCode: 400},
		{name: "no replicas", req: post("/v1/scale", `{"kind":"Deployment","namespace":"shop","name":"pricing"}`), wantCode: 400, wantErr: "replicas is required"},
		{name: "too many replicas", req: post("/v1/scale", `{"kind":"Deployment","namespace":"shop","name":"pricing","replicas":1001}`), wantCode: 400},
		{name: "body too large", req: post("/v1/scale", `{"kind":"`+strings.Repeat("x", maxBody)+`"}`), wantCode: 413},
		{name: "unknown kind", req: post("/v1/scale", `{"kind":"Ingress","namespace":"shop","name":"pricing","replicas":1}`), wantCode: 400, wantErr: "expected Deployment or StatefulSet (or deployment, deployments, deploy"},
		{name: "a pod cannot scale", req: post("/v1/scale", `{"kind":"Pod","namespace":"shop","name":"pricing","replicas":1}`), wantCode: 400},
		{name: "kind in lower case", req: post("/v1/scale", `{"kind":"deployment","namespace":"shop","name":"pricing","replicas":1}`), wantCode: 200},
		{name: "kubectl short name", req: post("/v1/scale", `{"kind":"deploy","namespace":"shop","name":"pricing","replicas":1}`), wantCode: 200},
		{name: "no such deployment", req: post("/v1/scale", `{"kind":"Deployment","namespace":"shop","name":"nope","replicas":1}`), wantCode: 404},
		{name: "no such statefulset", req: post("/v1/scale", `{"kind":"sts","namespace":"shop","name":"pricing","replicas":1}`), wantCode: 404},
		{name: "no namespace", req: post("/v1/scale", `{"kind":"Deployment","name":"pricing","replicas":1}`), wantCode: 400, wantErr: `namespace ""`},
		{name: "bad name", req: post("/v1/scale", `{"kind":"Deployment","namespace":"shop","name":"../pricing","replicas":1}`), wantCode: 400},

		{name: "delete of no such pod", req: post("/v1/delete", `{"namespace":"shop","name":"nope"}`), wantCode: 404},
		{name: "delete with a readiness", req: post("/v1/delete", `{"namespace":"shop","name":"nope","ready":true}`), wantCode: 400},
		{name: "delete without a name", req: post("/v1/delete", `{"namespace":"shop"}`), wantCode: 400},
		{name: "ready of no such pod", req: post("/v1/ready", `{"namespace":"shop","name":"nope","ready":true}`), wantCode: 404},
		{name: "ready without ready", req: post("/v1/ready", `{"namespace":"shop","name":"nope"}`), wantCode: 400, wantErr: "ready is required"},

		{name: "unknown path", req: rawRequest{path: "/v1/nope"}, wantCode: 404},
		{name: "GET of a POST call", req: rawRequest{method: "GET", path: "/v1/scale"}, wantCode: 405},
		{name: "POST of a GET call", req: rawRequest{method: "POST", path: "/v1/info", body: "{}"}, wantCode: 405},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, msg := tt.req.do(t, srv, token)
			if code != tt.wantCode || !strings.Contains(msg, tt.wantErr) {
				t.Errorf("got %d %q, want %d with an error containing %q", code, msg, tt.wantCode, tt.wantErr)
			}
		})
	}
}
