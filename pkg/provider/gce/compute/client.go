package compute

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// DefaultEndpoint is the API's base URL.
const DefaultEndpoint = "https://compute.googleapis.com/compute/v1/"

// Scope is the OAuth scope the calls need.
const Scope = "https://www.googleapis.com/auth/compute"

// userAgent names us in Google's request logs.
const userAgent = "proxy-operator"

// maxErrorBody bounds how much of an error answer is read.
const maxErrorBody = 64 << 10

// Client calls the Compute Engine API. It is safe for concurrent use.
type Client struct {
	base string
	http *http.Client
}

// New returns a client of the API at endpoint (DefaultEndpoint when empty)
// that sends its requests through hc, which adds the credentials.
func New(endpoint string, hc *http.Client) *Client {
	if endpoint == "" {
		endpoint = DefaultEndpoint
	}
	if !strings.HasSuffix(endpoint, "/") {
		endpoint += "/"
	}
	return &Client{base: endpoint, http: hc}
}

// Error is an answer of the API that is not a success: its HTTP status and,
// when the body is Google's error JSON, its message and reasons.
type Error struct {
	Code    int
	Message string
	// Reasons are the reason of each item of the answer's error.errors
	// ("notFound", "alreadyExists", "quotaExceeded", ...).
	Reasons []string
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("Compute Engine API: %d %s", e.Code, http.StatusText(e.Code))
	if e.Message != "" {
		msg += ": " + e.Message
	}
	if len(e.Reasons) > 0 {
		msg += " (" + strings.Join(e.Reasons, ", ") + ")"
	}
	return msg
}

// InsertInstance asks for a new VM; the answer is the insert's operation.
func (c *Client) InsertInstance(ctx context.Context, project, zone string, vm *Instance) (*Operation, error) {
	var op Operation
	return &op, c.do(ctx, http.MethodPost, zonePath(project, zone, "instances"), nil, vm, &op)
}

// GetInstance reads a VM.
func (c *Client) GetInstance(ctx context.Context, project, zone, name string) (*Instance, error) {
	var vm Instance
	return &vm, c.do(ctx, http.MethodGet, zonePath(project, zone, "instances", name), nil, nil, &vm)
}

// DeleteInstance asks for a VM's deletion; the answer is its operation.
func (c *Client) DeleteInstance(ctx context.Context, project, zone, name string) (*Operation, error) {
	var op Operation
	return &op, c.do(ctx, http.MethodDelete, zonePath(project, zone, "instances", name), nil, nil, &op)
}

// GetZoneOperation reads an operation of a zone.
func (c *Client) GetZoneOperation(ctx context.Context, project, zone, name string) (*Operation, error) {
	var op Operation
	return &op, c.do(ctx, http.MethodGet, zonePath(project, zone, "operations", name), nil, nil, &op)
}

// ListInstances calls instances.aggregatedList with filter, pageSize VMs a
// page, and hands each page to f until the last page or f's first error.
func (c *Client) ListInstances(ctx context.Context, project, filter string, pageSize int64, f func(*InstanceAggregatedList) error) error {
	query := url.Values{}
	if filter != "" {
		query.Set("filter", filter)
	}
	if pageSize > 0 {
		query.Set("maxResults", strconv.FormatInt(pageSize, 10))
	}
	path := "projects/" + url.PathEscape(project) + "/aggregated/instances"
	for {
		var page InstanceAggregatedList
		if err := c.do(ctx, http.MethodGet, path, query, nil, &page); err != nil {
			return err
		}
		if err := f(&page); err != nil {
			return err
		}
		if page.NextPageToken == "" {
			return nil
		}
		query.Set("pageToken", page.NextPageToken)
	}
}

func zonePath(project, zone string, rest ...string) string {
	parts := []string{"projects", url.PathEscape(project), "zones", url.PathEscape(zone)}
	for _, r := range rest {
		parts = append(parts, url.PathEscape(r))
	}
	return strings.Join(parts, "/")
}

// do sends one request with in (if any) as its JSON body and decodes a
// success into out.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, in, out any) error {
	if query == nil {
		query = url.Values{}
	}
	query.Set("alt", "json")
	query.Set("prettyPrint", "false")
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encoding the %s request: %w", method, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path+"?"+query.Encode(), body)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return errorOf(resp)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decoding the answer to %s %s: %w", method, path, err)
	}
	return nil
}

// errorOf reads an error answer: Google's {"error": {...}} when it is one,
// else the status with the start of the body.
func errorOf(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var answer struct {
		Error *struct {
			Message string `json:"message"`
			Errors  []struct {
				Reason string `json:"reason"`
			} `json:"errors"`
		} `json:"error"`
	}
	e := &Error{Code: resp.StatusCode}
	if json.Unmarshal(b, &answer) == nil && answer.Error != nil {
		e.Message = answer.Error.Message
		for _, item := range answer.Error.Errors {
			if item.Reason != "" {
				e.Reasons = append(e.Reasons, item.Reason)
			}
		}
		return e
	}
	e.Message = strings.TrimSpace(string(b[:min(len(b), 512)]))
	return e
}

// AsError returns err's *Error, if it has one.
func AsError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}
