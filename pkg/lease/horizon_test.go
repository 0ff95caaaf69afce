package lease

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
)

// withOptimisticConcurrency makes the fake client refuse ConfigMap updates
// with a stale resourceVersion, as the API server does (the fake's tracker
// does not).
func withOptimisticConcurrency(client *kubefake.Clientset) *kubefake.Clientset {
	client.PrependReactor("update", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		cm := a.(k8stesting.UpdateAction).GetObject().(*corev1.ConfigMap)
		stored, err := client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("configmaps"), cm.Namespace, cm.Name)
		if err != nil {
			return true, nil, err
		}
		current := stored.(*corev1.ConfigMap).ResourceVersion
		if cm.ResourceVersion != current {
			return true, nil, apierrors.NewConflict(corev1.Resource("configmaps"), cm.Name, errors.New("the object has been modified"))
		}
		n, _ := strconv.Atoi(current)
		cm = cm.DeepCopy()
		cm.ResourceVersion = strconv.Itoa(n + 1)
		return true, cm, client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("configmaps"), cm, cm.Namespace)
	})
	return client
}

func TestConfigMapHorizonFences(t *testing.T) {
	ctx := context.Background()
	client := withOptimisticConcurrency(kubefake.NewClientset())
	a := NewConfigMapHorizon(client, "ops", "lease-horizon", "a")
	b := NewConfigMapHorizon(client, "ops", "lease-horizon", "b")

	if err := a.Save(ctx, t0); err == nil {
		t.Error("Save before Claim: no error")
	}
	got, err := a.Claim(ctx)
	if err != nil || !got.IsZero() {
		t.Fatalf("first Claim = %v, %v; want zero (nothing persisted)", got, err)
	}
	horizon := t0.Add(90 * time.Second)
	if err := a.Save(ctx, horizon); err != nil {
		t.Fatal(err)
	}
	if err := a.Save(ctx, horizon.Add(time.Second)); err != nil {
		t.Fatalf("second Save: %v", err)
	}
	got, err = b.Claim(ctx)
	if err != nil || !got.Equal(horizon.Add(time.Second)) {
		t.Fatalf("b's Claim = %v, %v; want a's horizon %v", got, err, horizon.Add(time.Second))
	}
	// a is fenced off.
	if err := a.Save(ctx, horizon.Add(time.Hour)); !errors.Is(err, ErrHorizonLost) {
		t.Errorf("a's Save after b claimed: err = %v, want ErrHorizonLost", err)
	}
	if err := b.Save(ctx, time.Time{}); err != nil {
		t.Fatal(err)
	}
	cm, err := client.CoreV1().ConfigMaps("ops").Get(ctx, "lease-horizon", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data[horizonDataKey] != "" || cm.Data[horizonHolderKey] != "b" {
		t.Errorf("ConfigMap data %v, want an empty horizon held by b", cm.Data)
	}
}

func TestConfigMapHorizonUnreadable(t *testing.T) {
	ctx := context.Background()
	client := withOptimisticConcurrency(kubefake.NewClientset(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ops", Name: "wm"},
		Data:       map[string]string{horizonDataKey: "yesterday"},
	}))
	w := NewConfigMapHorizon(client, "ops", "wm", "a")
	if _, err := w.Claim(ctx); !errors.Is(err, ErrHorizonUnknown) {
		t.Fatalf("Claim: err = %v, want ErrHorizonUnknown", err)
	}
	// Claimed all the same.
	if err := w.Save(ctx, t0); err != nil {
		t.Errorf("Save after claiming an unreadable horizon: %v", err)
	}
}

// TestHorizonFollowsGrants checks that the persisted horizon stays ahead of
// every expiry handed out, with few writes, and that the next leader waits
// exactly until it (plus the clock skew).
func TestHorizonFollowsGrants(t *testing.T) {
	ts := newTestServer(t)
	const step = DefaultHorizonStep
	var latest time.Time
	for i := range 40 {
		l := ts.acquire(`{"holder":"w","ttl":"30s"}`)
		latest = l.ExpiresAt
		ts.do("DELETE", "/v1/leases/"+l.ID, "")
		ts.clk.Step(time.Second)
		// The background extension may still be writing; wait for it.
		waitUntil(t, func() bool { return !ts.srv.horizon.extending.Load() })
		horizon, _ := ts.persisted.get()
		if horizon.Before(latest) {
			t.Fatalf("grant %d: persisted horizon %v is before an expiry handed out, %v", i, horizon, latest)
		}
		if horizon.After(latest.Add(2 * step)) {
			t.Fatalf("grant %d: persisted horizon %v runs more than two steps ahead of %v", i, horizon, latest)
		}
	}
	if _, saves := ts.persisted.get(); saves > 40/int(step/time.Second)+2 {
		t.Errorf("%d horizon writes for 40 grants a second apart, want about one per %v", saves, step/2)
	}

	// A successor after a crash (no StopLeading) waits until the horizon.
	next := ts.successor(t)
	horizon, _ := ts.persisted.get()
	rec := next.do("POST", "/v1/leases", `{"holder":"w"}`)
	if e := errorOf(t, rec); rec.Code != 503 || e.Code != codeRecovering {
		t.Fatalf("successor's acquire: %d %+v, want 503 Recovering", rec.Code, e)
	}
	wantRetry := horizon.Add(DefaultMaxClockSkew).Sub(ts.clk.Now())
	if got := rec.Header().Get("Retry-After"); got != retryAfterSeconds(wantRetry) {
		t.Errorf("Retry-After %s, want %s", got, retryAfterSeconds(wantRetry))
	}
	ts.clk.Step(wantRetry)
	next.acquire(`{"holder":"w"}`)
}

func retryAfterSeconds(d time.Duration) string {
	rec := &headerRecorder{header: map[string][]string{}}
	setRetryAfter(rec, d)
	return rec.header.Get("Retry-After")
}

// successor is a second replica sharing ts's clock, key and horizon store,
// leading after ts (which is not told).
func (ts *testServer) successor(t *testing.T) *testServer {
	t.Helper()
	store, err := NewStore(Config{Clock: ts.clk, Key: testKey})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ts.store.Proxies("", nil) {
		store.Upsert(ProxyInfo{Key: p.Key, UID: newProxy(p.Key.Name).UID, Ready: true, URL: p.URL, Labels: p.Labels, LatencyMillis: p.LatencyMillis, MaxLeases: p.MaxLeases})
	}
	next := &testServer{t: t, store: store, clk: ts.clk, auth: ts.auth, persisted: ts.persisted}
	if next.srv, err = NewServer(ServerConfig{Store: store, Authenticator: ts.auth, Authorizer: ts.auth, Horizon: ts.persisted.replica()}); err != nil {
		t.Fatal(err)
	}
	next.handler = next.srv.Handler()
	ts.clk.Step(time.Millisecond) // terms start apart
	_, ctx := ktesting.NewTestContext(t)
	if err := next.srv.StartLeading(ctx); err != nil {
		t.Fatal(err)
	}
	return next
}

func TestGracefulHandoverWaitsOnlyForLiveLeases(t *testing.T) {
	for name, tc := range map[string]struct {
		live      bool
		wantRetry time.Duration // of the successor's first acquire; 0: granted at once
	}{
		"no live leases": {},
		"a live lease":   {live: true, wantRetry: 20*time.Second + DefaultMaxClockSkew},
	} {
		t.Run(name, func(t *testing.T) {
			ts := newTestServer(t)
			l := ts.acquire(`{"holder":"w","ttl":"30s"}`)
			ts.clk.Step(10 * time.Second)
			if !tc.live {
				ts.do("DELETE", "/v1/leases/"+l.ID, "")
			}
			_, ctx := ktesting.NewTestContext(t)
			if err := ts.srv.StopLeading(ctx); err != nil {
				t.Fatal(err)
			}
			next := ts.successor(t)
			rec := next.do("POST", "/v1/leases", `{"holder":"w2"}`)
			if tc.wantRetry == 0 {
				if rec.Code != 201 {
					t.Errorf("successor's acquire: %d %s, want 201", rec.Code, rec.Body)
				}
				return
			}
			if rec.Code != 503 || rec.Header().Get("Retry-After") != retryAfterSeconds(tc.wantRetry-time.Millisecond) {
				t.Errorf("successor's acquire: %d Retry-After %s, want 503 after %v", rec.Code, rec.Header().Get("Retry-After"), tc.wantRetry)
			}
			// The live lease renews on the successor meanwhile.
			if rec := next.do("POST", "/v1/leases/"+l.ID+"/renew", ""); rec.Code != 200 {
				t.Errorf("renew on the successor: %d %s", rec.Code, rec.Body)
			}
		})
	}
}

func TestHorizonWriteFailures(t *testing.T) {
	ts := newTestServer(t)
	ts.persisted.mu.Lock()
	ts.persisted.failSaves = true
	ts.persisted.mu.Unlock()
	rec := ts.do("POST", "/v1/leases", `{"holder":"w"}`)
	if e := errorOf(t, rec); rec.Code != 503 || e.Code != codeUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Errorf("acquire while the horizon cannot be persisted: %d %+v", rec.Code, e)
	}
	ts.persisted.mu.Lock()
	ts.persisted.failSaves = false
	ts.persisted.mu.Unlock()
	ts.acquire(`{"holder":"w"}`)
}

func TestWithoutAHorizonStoreRecoveryLastsTheMaxTTL(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	store, err := NewStore(Config{Clock: clk, Key: testKey})
	if err != nil {
		t.Fatal(err)
	}
	store.Upsert(newProxy("p1"))
	auth := &fakeAuth{}
	srv, err := NewServer(ServerConfig{Store: store, Authenticator: auth, Authorizer: auth})
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	if err := srv.StartLeading(ctx); err != nil {
		t.Fatal(err)
	}
	ts := &testServer{t: t, srv: srv, store: store, clk: clk, auth: auth, handler: srv.Handler()}
	rec := ts.do("POST", "/v1/leases", `{"holder":"w"}`)
	if rec.Code != 503 || rec.Header().Get("Retry-After") != retryAfterSeconds(DefaultMaxTTL+DefaultMaxClockSkew) {
		t.Errorf("acquire at start: %d Retry-After %s", rec.Code, rec.Header().Get("Retry-After"))
	}
	clk.Step(DefaultMaxTTL + DefaultMaxClockSkew)
	ts.acquire(`{"holder":"w"}`)
}

func TestEnsureKey(t *testing.T) {
	ctx := context.Background()
	client := kubefake.NewClientset()
	first, err := EnsureKey(ctx, client, "ops", "lease-key")
	if err != nil || len(first) < MinKeyLen {
		t.Fatalf("EnsureKey created %d bytes, %v", len(first), err)
	}
	second, err := EnsureKey(ctx, client, "ops", "lease-key")
	if err != nil || !bytes.Equal(first, second) {
		t.Errorf("second EnsureKey returned another key (%v)", err)
	}
	short := kubefake.NewClientset(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ops", Name: "lease-key"},
		Data:       map[string][]byte{KeySecretKey: []byte("short")},
	})
	if _, err := EnsureKey(ctx, short, "ops", "lease-key"); err == nil || strings.Contains(err.Error(), "short") {
		t.Errorf("a short key: err = %v, want an error that does not show the key", err)
	}
}
