package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
)

// CompactEtcd compacts etcd's history up to its current revision, as the API
// server does every few minutes, so that no watch can resume from a revision
// before it: a client that comes back with an older one gets 410 Gone and
// must list again. It returns the revision compacted to. It speaks etcd's
// JSON gateway (etcd here is plain http on loopback).
func (e *Environment) CompactEtcd(ctx context.Context) (int64, error) {
	if e.etcd == nil || e.stopped {
		return 0, errors.New("compact etcd: environment is not running")
	}
	// A range over the empty key answers with the store's header only.
	var current struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	if err := e.etcdCall(ctx, "/v3/kv/range", map[string]any{"key": "AA=="}, &current); err != nil {
		return 0, fmt.Errorf("compact etcd: current revision: %w", err)
	}
	revision, err := strconv.ParseInt(current.Header.Revision, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("compact etcd: current revision %q: %w", current.Header.Revision, err)
	}
	if err := e.etcdCall(ctx, "/v3/kv/compaction", map[string]any{"revision": revision, "physical": true}, nil); err != nil {
		return 0, fmt.Errorf("compact etcd to revision %d: %w", revision, err)
	}
	return revision, nil
}

// etcdCall posts body as JSON to etcd's gateway path and decodes the answer
// into out (when not nil).
func (e *Environment) etcdCall(ctx context.Context, path string, body, out any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.etcdURL+path, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", path, resp.Status, answer)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(answer, out)
}
