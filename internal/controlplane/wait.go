package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// pollInterval is how often Start asks a component whether it is ready.
const pollInterval = 100 * time.Millisecond

// waitAPIServer waits until the API server's self-signed certificate
// exists and /readyz answers 200 with the admin token. It fails early when
// api or etcd exits.
func (cp *ControlPlane) waitAPIServer(ctx context.Context, api, etcd *process) error {
	var client *http.Client
	defer func() {
		if client != nil {
			client.CloseIdleConnections()
		}
	}()
	last := "no answer yet"
	return poll(ctx, func() (bool, error) {
		for _, p := range []*process{etcd, api} {
			if p.exited() {
				return false, p.exitFailure("before kube-apiserver's /readyz answered ok")
			}
		}
		if client == nil {
			ca, err := os.ReadFile(cp.path("certs/apiserver.crt"))
			if err != nil {
				return false, nil
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(ca) {
				return false, nil
			}
			cp.ca = ca
			client = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
				TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: tlsServerName},
			}}
		}
		var ok bool
		ok, last = answer(get(ctx, client, cp.host+"/readyz", cp.token))
		return ok, nil
	}, func(cause error) error {
		return api.failure(fmt.Sprintf("was not ready (%v); its last /readyz answer: %s", cause, last))
	})
}

// waitHealthz waits until p's /healthz at url answers 200. It checks only
// that p runs and answers: the certificate is p's own self-signed one,
// on 127.0.0.1.
func (cp *ControlPlane) waitHealthz(ctx context.Context, p *process, url string) error {
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Timeout: 2 * time.Second, Transport: tr}
	last := "no answer yet"
	return poll(ctx, func() (bool, error) {
		if p.exited() {
			return false, p.exitFailure("before its /healthz answered ok")
		}
		var ok bool
		ok, last = answer(get(ctx, client, url, ""))
		return ok, nil
	}, func(cause error) error {
		return p.failure(fmt.Sprintf("was not healthy (%v); its last /healthz answer: %s", cause, last))
	})
}

// answer reads one /readyz or /healthz reply: ok (200), or what it said.
func answer(code int, body string, err error) (ok bool, said string) {
	switch {
	case err != nil:
		return false, err.Error()
	case code != http.StatusOK:
		return false, fmt.Sprintf("%d: %s", code, body)
	}
	return true, "ok"
}

// poll calls check every pollInterval until it returns true or an error,
// or ctx ends (then it returns timedOut(ctx.Err())).
func poll(ctx context.Context, check func() (bool, error), timedOut func(error) error) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		ok, err := check()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return timedOut(context.Cause(ctx))
		case <-t.C:
		}
	}
}

// get GETs url with an optional bearer token and returns the status and
// the body's first 2 KB.
func get(ctx context.Context, c *http.Client, url, token string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
	return resp.StatusCode, strings.TrimSpace(string(b)), nil
}
