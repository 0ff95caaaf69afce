package operator

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestTransientAPIError(t *testing.T) {
	secrets := schema.GroupResource{Resource: "secrets"}
	// What client-go returns when the dial fails: *url.Error around *net.OpError.
	dialFailure := func(errno syscall.Errno) error {
		return &url.Error{Op: "Get", URL: "https://127.0.0.1:6443/api", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", errno)}}
	}
	tests := map[string]struct {
		err  error
		want bool
	}{
		"connection refused":       {dialFailure(syscall.ECONNREFUSED), true},
		"connection reset":         {dialFailure(syscall.ECONNRESET), true},
		"host unreachable":         {dialFailure(syscall.EHOSTUNREACH), true},
		"network unreachable":      {dialFailure(syscall.ENETUNREACH), true},
		"unexpected EOF":           {&url.Error{Op: "Get", URL: "https://x", Err: io.ErrUnexpectedEOF}, true},
		"client timeout":           {&url.Error{Op: "Get", URL: "https://x", Err: context.DeadlineExceeded}, true},
		"wrapped by the caller":    {fmt.Errorf("lease ID key: %w", dialFailure(syscall.ECONNREFUSED)), true},
		"503 while starting":       {apierrors.NewServiceUnavailable("starting"), true},
		"500":                      {apierrors.NewInternalError(errors.New("etcd")), true},
		"429":                      {apierrors.NewTooManyRequests("slow down", 1), true},
		"server timeout":           {apierrors.NewServerTimeout(secrets, "get", 1), true},
		"gateway timeout":          {apierrors.NewTimeoutError("etcd", 1), true},
		"not found":                {apierrors.NewNotFound(secrets, "key"), false},
		"forbidden":                {apierrors.NewForbidden(secrets, "key", errors.New("RBAC")), false},
		"unauthorized":             {apierrors.NewUnauthorized("no token"), false},
		"already exists":           {apierrors.NewAlreadyExists(secrets, "key"), false},
		"TLS misconfiguration":     {&url.Error{Op: "Get", URL: "https://x", Err: x509.UnknownAuthorityError{}}, false},
		"a bad key in the Secret":  {errors.New("lease ID key: key \"key\" has 3 bytes, want at least 32"), false},
		"canceled by the operator": {context.Canceled, false},
	}
	got, want := map[string]bool{}, map[string]bool{}
	for name, tc := range tests {
		got[name], want[name] = transientAPIError(tc.err), tc.want
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("transientAPIError (-want +got):\n%s", diff)
	}
}

func TestUntilAPIAnswers(t *testing.T) {
	refused := &url.Error{Op: "Get", URL: "https://x", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "key", errors.New("RBAC"))
	tests := map[string]struct {
		results   []error // what fn returns, call by call; nil after the last
		cancelAt  int     // cancel ctx during this call (1-based); 0 never
		wantErr   error
		wantCalls int
	}{
		"answers at once":              {results: nil, wantCalls: 1},
		"answers after two refusals":   {results: []error{refused, refused}, wantCalls: 3},
		"a permanent error is final":   {results: []error{refused, forbidden}, wantErr: forbidden, wantCalls: 2},
		"shutdown while unreachable":   {results: []error{refused, refused, refused}, cancelAt: 2, wantErr: context.Canceled, wantCalls: 2},
		"answer after shutdown counts": {results: []error{refused}, cancelAt: 2, wantCalls: 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			calls := 0
			err := untilAPIAnswers(ctx, "test call", func(context.Context) error {
				calls++
				if calls == tc.cancelAt {
					cancel()
				}
				if calls <= len(tc.results) {
					return tc.results[calls-1]
				}
				return nil
			})
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Errorf("error = %v, want %v", err, tc.wantErr)
			}
			if calls != tc.wantCalls {
				t.Errorf("calls = %d, want %d", calls, tc.wantCalls)
			}
		})
	}
}
