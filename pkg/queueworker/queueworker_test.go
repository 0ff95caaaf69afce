package queueworker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
)

// recorder is a real client-go queue that also notes the calls ProcessNext
// makes on it, in order.
type recorder struct {
	workqueue.TypedRateLimitingInterface[string]
	mu    sync.Mutex
	calls []string
}

func (r *recorder) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, fmt.Sprintf(format, args...))
}

func (r *recorder) Done(key string) {
	r.note("Done %s", key)
	r.TypedRateLimitingInterface.Done(key)
}

func (r *recorder) Forget(key string) {
	r.note("Forget %s", key)
	r.TypedRateLimitingInterface.Forget(key)
}

func (r *recorder) AddRateLimited(key string) {
	r.note("AddRateLimited %s", key)
	r.TypedRateLimitingInterface.AddRateLimited(key)
}

func (r *recorder) AddAfter(key string, d time.Duration) {
	r.note("AddAfter %s %v", key, d)
	r.TypedRateLimitingInterface.AddAfter(key, d)
}

func (r *recorder) Add(key string) {
	r.note("Add %s", key)
	r.TypedRateLimitingInterface.Add(key)
}

// newQueue is a real rate-limiting queue on a fake clock: a delayed key
// comes back only when the test steps the clock, so nothing here waits on
// real time. Backoff is 1s, doubling.
func newQueue(t *testing.T) (*recorder, workqueue.TypedRateLimiter[string], *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	limiter := workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Second, time.Hour)
	q := workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[string]{Clock: clk})
	t.Cleanup(q.ShutDown)
	return &recorder{TypedRateLimitingInterface: q}, limiter, clk
}

// getWithin is q.Get with a generous timeout; ok is false if nothing came.
func getWithin(t *testing.T, q workqueue.TypedRateLimitingInterface[string]) (key string, ok bool) {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		if k, shutdown := q.Get(); !shutdown {
			got <- k
		}
	}()
	select {
	case k := <-got:
		return k, true
	case <-time.After(30 * time.Second):
		return "", false
	}
}

func TestProcessNext(t *testing.T) {
	errSync := errors.New("sync failed")
	tests := []struct {
		name         string
		requeueAfter time.Duration
		err          error
		shutDown     bool // the queue is shut down before ProcessNext

		want         bool
		wantSynced   []string
		wantCalls    []string
		wantRequeues int  // NumRequeues after ProcessNext; the key has failed once before
		wantLen      int  // queue length right after ProcessNext, before the clock moves
		wantBack     bool // after the clock steps past any delay, the key is on the queue again
	}{{
		name:       "success: forgotten, not re-added",
		want:       true,
		wantSynced: []string{"k"},
		wantCalls:  []string{"Forget k", "Done k"},
	}, {
		name:         "requeue after a delay: forgotten, back once the delay has passed",
		requeueAfter: 5 * time.Second,
		want:         true,
		wantSynced:   []string{"k"},
		wantCalls:    []string{"Forget k", "AddAfter k 5s", "Done k"},
		wantBack:     true,
	}, {
		name:         "requeue now: forgotten, back at once",
		requeueAfter: RequeueNow,
		want:         true,
		wantSynced:   []string{"k"},
		wantCalls:    []string{"Forget k", "AddAfter k 0s", "Done k"},
		wantLen:      1,
		wantBack:     true,
	}, {
		name:         "any negative requeue is now",
		requeueAfter: -time.Hour,
		want:         true,
		wantSynced:   []string{"k"},
		wantCalls:    []string{"Forget k", "AddAfter k 0s", "Done k"},
		wantLen:      1,
		wantBack:     true,
	}, {
		name:         "error: rate-limited, back after the backoff",
		err:          errSync,
		want:         true,
		wantSynced:   []string{"k"},
		wantCalls:    []string{"AddRateLimited k", "Done k"},
		wantRequeues: 2,
		wantBack:     true,
	}, {
		name:         "error with a requeue: the requeue is ignored",
		requeueAfter: 5 * time.Second,
		err:          errSync,
		want:         true,
		wantSynced:   []string{"k"},
		wantCalls:    []string{"AddRateLimited k", "Done k"},
		wantRequeues: 2,
		wantBack:     true,
	}, {
		name:         "shut-down queue: false, no sync",
		shutDown:     true,
		want:         false,
		wantRequeues: 1,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, limiter, clk := newQueue(t)
			limiter.When("k") // one earlier failure, so Forget shows
			if tt.shutDown {
				q.ShutDown()
			} else {
				q.TypedRateLimitingInterface.Add("k")
			}
			var synced []string
			syncKey := func(_ context.Context, key string) (time.Duration, error) {
				synced = append(synced, key)
				return tt.requeueAfter, tt.err
			}

			got := ProcessNext(t.Context(), q, syncKey)

			if got != tt.want {
				t.Errorf("ProcessNext() = %v, want %v", got, tt.want)
			}
			if diff := cmp.Diff(tt.wantSynced, synced); diff != "" {
				t.Errorf("synced keys (-want +got):\n%s", diff)
			}
			q.mu.Lock()
			calls := q.calls
			q.mu.Unlock()
			if diff := cmp.Diff(tt.wantCalls, calls); diff != "" {
				t.Errorf("queue calls (-want +got):\n%s", diff)
			}
			if n := q.NumRequeues("k"); n != tt.wantRequeues {
				t.Errorf("NumRequeues = %d, want %d", n, tt.wantRequeues)
			}
			if tt.shutDown {
				return
			}
			if n := q.Len(); n != tt.wantLen {
				t.Errorf("queue length = %d, want %d", n, tt.wantLen)
			}
			if !tt.wantBack {
				return
			}
			clk.Step(time.Hour) // past any delay or backoff here
			if key, ok := getWithin(t, q); !ok || key != "k" {
				t.Errorf("after the delay: got %q (came: %v), want k back", key, ok)
			}
		})
	}
}

func TestRun(t *testing.T) {
	q, _, _ := newQueue(t)
	synced := make(chan string, 3)
	syncKey := func(_ context.Context, key string) (time.Duration, error) {
		synced <- key
		return NoRequeue, nil
	}
	for _, k := range []string{"a", "b", "c"} {
		q.Add(k)
	}

	ctx, cancel := context.WithCancel(t.Context())
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		Run(ctx, q, 2, syncKey)
	}()

	got := map[string]bool{}
	for range 3 {
		select {
		case k := <-synced:
			got[k] = true
		case <-time.After(30 * time.Second):
			t.Fatalf("workers synced only %v", got)
		}
	}
	if diff := cmp.Diff(map[string]bool{"a": true, "b": true, "c": true}, got); diff != "" {
		t.Errorf("synced keys (-want +got):\n%s", diff)
	}

	cancel()
	select {
	case <-returned:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after the context ended")
	}
	if !q.ShuttingDown() {
		t.Error("Run returned with the queue not shut down")
	}
}

// TestLogSyncFailure: a failed sync is an error at the default verbosity,
// under the controller's kind and the object's key, for every controller;
// a conflict (the cache was behind) is not.
func TestLogSyncFailure(t *testing.T) {
	key := cache.ObjectName{Namespace: "crawl", Name: "p1"}
	conflict := apierrors.NewConflict(schema.GroupResource{Group: "crawl.proxyfleet.io", Resource: "proxies"}, "p1", errors.New("the object has been modified"))
	tests := map[string]struct {
		kind string
		err  error
		want []string
	}{
		"a Proxy's failure is an error": {kind: "proxy", err: errors.New("boom"), want: []string{`"msg"="Sync failed; retrying with backoff" "error"="boom" "proxy"="crawl/p1"`}},
		"a pool's failure is an error":  {kind: "pool", err: errors.New("boom"), want: []string{`"msg"="Sync failed; retrying with backoff" "error"="boom" "pool"="crawl/p1"`}},
		"a conflict is quiet":           {kind: "proxy", err: conflict},
		"a wrapped conflict, too":       {kind: "pool", err: fmt.Errorf("status write: %w", conflict)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var lines []string
			logger := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: 0})
			LogSyncFailure(logger, tc.kind, key, tc.err)
			if diff := cmp.Diff(tc.want, lines, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("log lines at the default verbosity (-want +got):\n%s", diff)
			}
		})
	}
}
