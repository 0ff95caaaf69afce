package compute

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The calls themselves are tested through pkg/testing/provider/gcetest (a
// fake built on google.golang.org/api's own types) by pkg/provider/gce's
// tests; this is what the fake cannot say: answers that are not Google's JSON.
func TestErrorAnswers(t *testing.T) {
	for name, tc := range map[string]struct {
		status int
		body   string
		want   *Error
	}{
		"google's error JSON": {
			status: http.StatusConflict,
			body:   `{"error":{"code":409,"message":"The resource 'x' already exists","errors":[{"message":"The resource 'x' already exists","domain":"global","reason":"alreadyExists"}]}}`,
			want:   &Error{Code: 409, Message: "The resource 'x' already exists", Reasons: []string{"alreadyExists"}},
		},
		"a front end's HTML page": {
			status: http.StatusBadGateway,
			body:   "<html><body>Bad Gateway</body></html>\n",
			want:   &Error{Code: 502, Message: "<html><body>Bad Gateway</body></html>"},
		},
		"an empty body": {
			status: http.StatusServiceUnavailable,
			want:   &Error{Code: 503},
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := New(serve(t, tc.status, tc.body), http.DefaultClient)
			_, err := c.GetInstance(context.Background(), "p", "z", "vm")
			got, ok := AsError(err)
			if !ok {
				t.Fatalf("GetInstance error = %v, want a *compute.Error", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSuccessThatIsNotJSONIsAnError(t *testing.T) {
	c := New(serve(t, http.StatusOK, "<html>"), http.DefaultClient)
	_, err := c.GetInstance(context.Background(), "p", "z", "vm")
	if _, isAPI := AsError(err); err == nil || isAPI {
		t.Fatalf("GetInstance error = %v, want a decoding error", err)
	}
}

func TestErrorMessage(t *testing.T) {
	err := error(&Error{Code: 403, Message: "Required 'compute.instances.create' permission", Reasons: []string{"forbidden"}})
	want := "Compute Engine API: 403 Forbidden: Required 'compute.instances.create' permission (forbidden)"
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
	if _, ok := AsError(errors.Join(errors.New("wrapped"), err)); !ok {
		t.Error("AsError does not find a wrapped *Error")
	}
}

// serve answers every request with status and body, on loopback.
func serve(t *testing.T, status int, body string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL + "/compute/v1/"
}
