package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// TestAReplicaTakesNoCallBeforeItsListersSynced: a replica of a replicated
// store signs a lease's credentials from its own Proxy and Secret listers.
// Before they have listed, it answers every /v1 call 503 NotLeader (retry
// through the Service) and is unready, rather than have the leader grant
// a lease it then cannot sign (a CredentialsUnavailable answer, and a
// lease given back for nothing); once synced, it serves.
func TestAReplicaTakesNoCallBeforeItsListersSynced(t *testing.T) {
	st, err := store.New(store.Config{Clock: clocktesting.NewFakeClock(t0), Key: testKey})
	if err != nil {
		t.Fatal(err)
	}
	st.Upsert(newProxy("p1"))
	st.Lead(time.Time{}, time.Time{}) // the replication's part: this store decides
	var synced atomic.Bool
	auth := &fakeAuth{}
	srv, err := New(Config{Store: st, Authenticator: auth, Authorizer: auth, Replicated: &Replication{
		Leases: st,
		Synced: synced.Load,
		Ready:  synced.Load,
	}})
	if err != nil {
		t.Fatal(err)
	}
	call := func(method, path, body string) fenceAnswer {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+goodToken)
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		return fenceAnswerOf(t, rec)
	}
	type answers struct{ Acquire, List, Readyz fenceAnswer }
	calls := func() answers {
		return answers{
			Acquire: call(http.MethodPost, "/v1/leases", `{"holder":"h","ttl":"30s"}`),
			List:    call(http.MethodGet, "/v1/leases", ""),
			Readyz:  call(http.MethodGet, "/readyz", ""),
		}
	}
	if diff := cmp.Diff(answers{notLeaderAnswer, notLeaderAnswer, notLeaderAnswer}, calls()); diff != "" {
		t.Errorf("before the listers synced (-want +got):\n%s", diff)
	}
	if n := len(st.Proxies("", nil)); n != 1 || st.Proxies("", nil)[0].FreeLeases != 1 {
		t.Errorf("a call before the sync took a lease: %+v", st.Proxies("", nil))
	}
	synced.Store(true)
	ok := answers{fenceAnswer{Status: http.StatusCreated}, fenceAnswer{Status: http.StatusOK}, fenceAnswer{Status: http.StatusOK}}
	if diff := cmp.Diff(ok, calls()); diff != "" {
		t.Errorf("once synced (-want +got):\n%s", diff)
	}
}
