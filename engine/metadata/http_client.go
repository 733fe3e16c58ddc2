package metadata

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/mooncake-go/mooncake/auth"
	"github.com/mooncake-go/mooncake/auth/httpauth"
)

// httpStore speaks the HTTP metadata protocol: GET|PUT|DELETE <uri>?key=<key>.
type httpStore struct {
	base   *url.URL
	client *http.Client
	token  *auth.Token // signs every request when set (Options.AuthToken)
}

func openHTTP(uri string, o Options) (*httpStore, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return nil, fmt.Errorf("metadata: bad HTTP metadata server URL %q: %w", uri, err)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("metadata: HTTP metadata server URL %q has no host (want http://host:port/metadata)", uri)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	return &httpStore{base: u, client: &http.Client{Transport: tr, Timeout: DefaultTimeout}, token: o.AuthToken}, nil
}

// url returns base?key=<key>, keeping any query the base already has. Spaces are sent as
// %20 rather than '+', which every server decodes the same way.
func (s *httpStore) url(key string) string {
	u := *s.base
	q := u.Query()
	q.Set("key", key)
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return u.String()
}

func (s *httpStore) do(ctx context.Context, method, key string, body []byte) (*http.Response, error) {
	if key == "" {
		return nil, fmt.Errorf("metadata: %s with an empty key", method)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.url(key), rd)
	if err != nil {
		return nil, fmt.Errorf("metadata: %s key %q: %w", method, key, err)
	}
	if body != nil {
		if json.Valid(body) {
			req.Header.Set("Content-Type", "application/json")
		} else {
			req.Header.Set("Content-Type", "application/octet-stream")
		}
	}
	if s.token != nil {
		httpauth.Sign(req, s.token, body)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("metadata: %s key %q at HTTP metadata server %s: %w", method, key, s.base.Redacted(), err)
	}
	return resp, nil
}

// statusError describes a non-200 answer, with the start of its body.
func (s *httpStore) statusError(method, key string, resp *http.Response) error {
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	text := strings.TrimSpace(string(msg))
	if text != "" {
		text = ": " + text
	}
	if resp.StatusCode == http.StatusUnauthorized && s.token == nil {
		text += " (this process has no MC_AUTH_TOKEN: set the metadata server's token)"
	}
	return fmt.Errorf("metadata: %s key %q at HTTP metadata server %s: %s%s", method, key, s.base.Redacted(), resp.Status, text)
}

func (s *httpStore) Get(ctx context.Context, key string) ([]byte, error) {
	resp, err := s.do(ctx, http.MethodGet, key, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil, fmt.Errorf("metadata: key %q at HTTP metadata server %s: %w", key, s.base.Redacted(), ErrNotFound)
	default:
		return nil, s.statusError(http.MethodGet, key, resp)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxValueSize+1))
	if err != nil {
		return nil, fmt.Errorf("metadata: reading key %q from HTTP metadata server %s: %w", key, s.base.Redacted(), err)
	}
	if len(data) > MaxValueSize {
		return nil, fmt.Errorf("metadata: value of key %q at HTTP metadata server %s is larger than %d bytes", key, s.base.Redacted(), MaxValueSize)
	}
	return data, nil
}

func (s *httpStore) Put(ctx context.Context, key string, value []byte) error {
	if value == nil {
		value = []byte{}
	}
	resp, err := s.do(ctx, http.MethodPut, key, value)
	if err != nil {
		return err
	}
	defer drain(resp)
	if resp.StatusCode != http.StatusOK {
		return s.statusError(http.MethodPut, key, resp)
	}
	return nil
}

// Delete removes key; a 404 (the key was not there) is not an error, as with etcd and Redis.
func (s *httpStore) Delete(ctx context.Context, key string) error {
	resp, err := s.do(ctx, http.MethodDelete, key, nil)
	if err != nil {
		return err
	}
	defer drain(resp)
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNotFound {
		return s.statusError(http.MethodDelete, key, resp)
	}
	return nil
}

func (s *httpStore) Close() error {
	s.client.CloseIdleConnections()
	return nil
}

// drain reads a little of what is left so the connection can be reused, then closes.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
}

var _ Store = (*httpStore)(nil)
