package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/pinlab/pinlab/internal/loopback"
)

// Client calls a lab's control API.
type Client struct {
	// Addr is the API's "IP:port"; it must be inside 127.0.0.0/8.
	Addr string
	// TokenFile is the file holding the lab's token (`pinlab lab up` writes
	// it and prints its path); empty means TokenPath(Addr). It is read at
	// every call (see ReadToken); without a token no request is sent, and
	// the error says whether anything listens at Addr.
	TokenFile string
	// HTTP is the client to use; nil means one with a 10 s timeout.
	HTTP *http.Client
}

// token reads the token and returns it with the file's path.
func (c *Client) token() (token, path string, err error) {
	path = c.TokenFile
	if path == "" {
		if path, err = TokenPath(c.Addr); err != nil {
			return "", "", err
		}
	}
	token, err = ReadToken(path)
	return token, path, err
}

func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	if err := loopback.CheckAddr(c.Addr); err != nil {
		return fmt.Errorf("control: %w", err)
	}
	var rd bytes.Buffer
	if body != nil {
		if err := json.NewEncoder(&rd).Encode(body); err != nil {
			return err
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+c.Addr+path, &rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	token, tokenFile, tokenErr := c.token()
	if tokenErr != nil {
		return noToken(ctx, c.Addr, tokenErr)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return dialError(c.Addr, err)
	}
	defer resp.Body.Close()
	if resp.Header.Get(Header) == "" {
		return fmt.Errorf("control: %s answers HTTP (%s) but is not a pinlab lab control endpoint; pass the --control address `pinlab lab up` printed", c.Addr, resp.Status)
	}
	if resp.StatusCode != http.StatusOK {
		err := replyError(resp)
		if resp.StatusCode == http.StatusUnauthorized {
			err = unauthorized(c.Addr, err, tokenFile)
		}
		return err
	}
	if out == nil {
		return nil
	}
	// Whatever listens at Addr is read no further than maxReply: a server
	// that is not the lab (another user's, bound while the lab was down)
	// cannot exhaust the client's memory.
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxReply)).Decode(out); err != nil {
		return fmt.Errorf("control: reading the reply of %s: %w", c.Addr, err)
	}
	return nil
}

// replyError returns the error of a reply that is not 200.
func replyError(resp *http.Response) error {
	var e struct{ Error string }
	if json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&e) == nil && e.Error != "" {
		return errors.New(e.Error)
	}
	return fmt.Errorf("control: %s", resp.Status)
}

// maxReply bounds the bytes of a reply the client reads: 16 MiB, far
// above the objects of a lab of 1000 pods (about 2 MB).
const maxReply = 16 << 20

// noToken explains why no request was sent: no lab listens at addr, or one
// does and the token for it could not be read. It connects to addr, and
// sends nothing, to tell the two apart.
func noToken(ctx context.Context, addr string, tokenErr error) error {
	probe, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := loopback.Dialer{}.DialContext(probe, addr)
	if err != nil {
		return dialError(addr, err)
	}
	conn.Close()
	return fmt.Errorf("control: no token to send to the lab at %s, so nothing was sent: %w (pass --token-file with the path `pinlab lab up` printed; the file is readable by the user who ran lab up only)", addr, tokenErr)
}

// unauthorized explains a 401: the token sent is not the lab's.
func unauthorized(addr string, err error, tokenFile string) error {
	return fmt.Errorf("control: the lab at %s refused the token in %s (%v): is it another lab's? pass --token-file with the path `pinlab lab up` printed", addr, tokenFile, err)
}

// dialError explains a failed request: nothing listening (or no answer)
// means no lab runs there; anything else answered in a way no lab does.
func dialError(addr string, err error) error {
	var nerr net.Error
	if errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &nerr) && nerr.Timeout() {
		return fmt.Errorf("control: no lab answers at %s (is `pinlab lab up` running? use --control if it listens elsewhere): %w", addr, err)
	}
	return fmt.Errorf("control: %s is not a pinlab lab control endpoint (it did not answer HTTP as a lab does; pass the --control address `pinlab lab up` printed): %w", addr, err)
}

// Info describes the lab.
func (c *Client) Info(ctx context.Context) (Info, error) {
	var i Info
	return i, c.do(ctx, http.MethodGet, "/v1/info", nil, &i)
}

// Objects lists the lab's API objects.
func (c *Client) Objects(ctx context.Context) (Objects, error) {
	var o Objects
	return o, c.do(ctx, http.MethodGet, "/v1/objects", nil, &o)
}

// Scale sets a Deployment's or StatefulSet's replicas (r.Replicas must be
// set).
func (c *Client) Scale(ctx context.Context, r ScaleRequest) error {
	return c.do(ctx, http.MethodPost, "/v1/scale", r, nil)
}

// DeletePod deletes a pod gracefully, as kubectl delete pod does.
func (c *Client) DeletePod(ctx context.Context, namespace, name string) error {
	return c.do(ctx, http.MethodPost, "/v1/delete", PodRequest{Namespace: namespace, Name: name}, nil)
}

// SetReady forces a pod not ready (false) or gives its readiness back to
// its probe (true).
func (c *Client) SetReady(ctx context.Context, namespace, name string, ready bool) error {
	return c.do(ctx, http.MethodPost, "/v1/ready", ReadyRequest{Namespace: namespace, Name: name, Ready: &ready}, nil)
}
