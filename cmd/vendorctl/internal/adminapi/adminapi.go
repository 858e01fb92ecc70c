// Package adminapi is vendorctl's client for the backend's admin API
// (docs/CONTRACTS.md): one JSON call at a time, bearer token, bounded by a
// timeout. It returns the answer's raw JSON so that `-o json` prints exactly
// what the backend said, fields vendorctl does not know included, and turns
// every failure into one of two error types a person can act on: the API's
// own envelope (*Error) or "the backend could not be reached" (*UnreachableError).
package adminapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"vendorgate/shared/apierr"
)

// maxAnswerBytes bounds an answer read into memory. Admin answers are small
// JSON objects; a runaway body must not exhaust an operator's machine.
const maxAnswerBytes = 16 << 20

// Options configure a Client.
type Options struct {
	// BaseURL is the backend's admin listener, e.g. http://127.0.0.1:8082.
	// Required. A trailing slash is ignored; a path prefix is kept, so the
	// API may sit behind a reverse proxy under a sub-path.
	BaseURL string
	// Token is the admin token, sent as "Authorization: Bearer". Required.
	// It is never part of an error message.
	Token string
	// Timeout bounds one call from dial to the last byte of the answer.
	// Default 10s: an operator waiting on a hung backend learns so quickly.
	Timeout time.Duration
	// Transport carries the calls. Default: a clone of http.DefaultTransport.
	Transport http.RoundTripper
	// Name is what the API is called in messages. Default "the backend
	// admin API".
	Name string
	// TokenName is where Token came from (an environment variable), named
	// when the API refuses it.
	TokenName string
	// URLName is where BaseURL came from and what it should be (an
	// environment variable and the listener's setting), named when the
	// address answers as another listener does.
	URLName string
}

// Client calls the admin API. It is safe for concurrent use.
type Client struct {
	base      string
	name      string
	token     string
	tokenName string
	urlName   string
	http      *http.Client
}

// New checks o, fills its defaults and returns a Client.
func New(o Options) (*Client, error) {
	u, err := url.Parse(o.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("admin URL %q must be an http:// or https:// address", o.BaseURL)
	}
	if o.Token == "" {
		return nil, errors.New("admin token is empty")
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Transport == nil {
		o.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	if o.Name == "" {
		o.Name = "the backend admin API"
	}
	return &Client{
		base:      strings.TrimRight(o.BaseURL, "/"),
		name:      o.Name,
		token:     o.Token,
		tokenName: o.TokenName,
		urlName:   o.URLName,
		http:      &http.Client{Timeout: o.Timeout, Transport: o.Transport},
	}, nil
}

// BaseURL is the admin API address calls go to, for messages.
func (c *Client) BaseURL() string { return c.base }

// Do sends one call: method to path (already escaped, starting with "/"),
// with in marshalled as the JSON body unless nil. It returns the body of a
// 2xx answer. Any other answer becomes *Error when it is an apierr envelope
// and a plain error naming the status otherwise; a call that got no answer
// becomes *UnreachableError.
func (c *Client) Do(ctx context.Context, method, path string, in any) (json.RawMessage, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("encode %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, fmt.Errorf("build %s %s: %w", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil { // the operator interrupted: not the backend's fault
			return nil, fmt.Errorf("%s %s: interrupted: %w", method, path, ctx.Err())
		}
		return nil, &UnreachableError{URL: c.base, Name: c.name, Err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	if err != nil {
		return nil, &UnreachableError{URL: c.base, Name: c.name, Err: err}
	}
	if len(data) > maxAnswerBytes {
		return nil, fmt.Errorf("%s %s: answer larger than %d bytes", method, path, maxAnswerBytes)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		d, ok := parseEnvelope(data)
		// The API serves every path vendorctl calls: a 404 for the path
		// itself (not for an object) is another listener answering.
		if resp.StatusCode == http.StatusNotFound && (!ok || d.Message == "no such path") {
			hint := ""
			if c.urlName != "" {
				hint = "; check " + c.urlName
			}
			return nil, fmt.Errorf("%s is not %s: it has no %s %s (it answered %s%s)%s", c.base, c.name, method, pathOnly(path), resp.Status, snippet(data), hint)
		}
		if ok {
			e := &Error{Status: resp.StatusCode, Detail: d}
			if resp.StatusCode == http.StatusUnauthorized && c.tokenName != "" {
				return nil, fmt.Errorf("%s refused the token in %s: %w", c.name, c.tokenName, e)
			}
			return nil, e
		}
		return nil, fmt.Errorf("%s %s: %s answered %s%s", method, path, c.name, resp.Status, snippet(data))
	}
	if !json.Valid(data) {
		return nil, fmt.Errorf("%s %s: %s answered %s with a body that is not JSON%s", method, path, c.name, resp.Status, snippet(data))
	}
	return data, nil
}

// parseEnvelope reads an error envelope. The admin APIs have codes of
// their own beside the specification's (not_held), so any code is taken,
// where apierr.Parse takes only the specification's.
func parseEnvelope(body []byte) (apierr.Detail, bool) {
	var env struct {
		Error *apierr.Detail `json:"error"`
	}
	if err := json.Unmarshal(body, &env); err != nil || env.Error == nil || env.Error.Code == "" || env.Error.Message == "" {
		return apierr.Detail{}, false
	}
	return *env.Error, true
}

// pathOnly is path without its query.
func pathOnly(path string) string {
	p, _, _ := strings.Cut(path, "?")
	return p
}

// snippet is the start of an unexpected body on one line, so that an error
// from a proxy in front of the backend says what it was.
func snippet(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if s == "" {
		return ""
	}
	if len(s) > 120 {
		s = s[:120] + "..."
	}
	return ": " + s
}

// Error is an error answer of the admin API: its HTTP status and envelope.
type Error struct {
	Status int
	Detail apierr.Detail
}

// Error is "code: message", then the per-field messages in name order, all
// on one line.
func (e *Error) Error() string {
	s := string(e.Detail.Code) + ": " + e.Detail.Message
	if len(e.Detail.Fields) > 0 {
		names := make([]string, 0, len(e.Detail.Fields))
		for n := range e.Detail.Fields {
			names = append(names, n)
		}
		sort.Strings(names)
		parts := make([]string, len(names))
		for i, n := range names {
			parts[i] = n + ": " + e.Detail.Fields[n]
		}
		s += " (" + strings.Join(parts, "; ") + ")"
	}
	return s
}

// UnreachableError is a call that got no HTTP answer: refused, timed out,
// reset, unresolvable host.
type UnreachableError struct {
	URL string
	// Name is what the API is called ("the backend admin API" when empty).
	Name string
	Err  error
}

// Error names the admin URL once and the cause without net/http's repetition
// of method and full address.
func (e *UnreachableError) Error() string {
	cause := e.Err
	name := e.Name
	if name == "" {
		name = "the backend admin API"
	}
	var ue *url.Error
	if errors.As(cause, &ue) {
		if ue.Timeout() {
			return fmt.Sprintf("cannot reach %s at %s: no answer in time (%v)", name, e.URL, ue.Err)
		}
		cause = ue.Err
	}
	return fmt.Sprintf("cannot reach %s at %s: %v", name, e.URL, cause)
}

func (e *UnreachableError) Unwrap() error { return e.Err }
