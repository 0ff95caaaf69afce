package operator

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/client-go/tools/cache"
)

func TestServeReadyz(t *testing.T) {
	yes := func() bool { return true }
	no := func() bool { return false }
	tests := map[string]struct {
		synced   []cache.InformerSynced
		wantCode int
		wantBody string
	}{
		"all caches synced": {synced: []cache.InformerSynced{yes, yes}, wantCode: http.StatusOK, wantBody: "ok"},
		"one cache behind":  {synced: []cache.InformerSynced{yes, no}, wantCode: http.StatusServiceUnavailable, wantBody: "informer caches not synced"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			op := &operator{synced: tc.synced}
			rec := httptest.NewRecorder()
			op.serveReadyz(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			if rec.Code != tc.wantCode || strings.TrimSpace(rec.Body.String()) != tc.wantBody {
				t.Errorf("GET /readyz = %d %q, want %d %q", rec.Code, rec.Body.String(), tc.wantCode, tc.wantBody)
			}
		})
	}
}
