// Package queueworker is the worker loop the operator's controllers share
// over a client-go rate-limited workqueue: take a key, sync it, and apply
// the sync's verdict (backoff on an error, forget and maybe requeue on
// success); and run N such workers until the context ends.
//
// It records no metrics: a caller that wants them wraps its sync function.
// LogSyncFailure is the one way every controller logs a failed sync.
package queueworker

import (
	"context"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// A sync's requeueAfter besides a positive duration (which brings the key
// back after that long).
const (
	// NoRequeue: the key comes back only when something adds it again.
	NoRequeue time.Duration = 0
	// RequeueNow (or any negative duration): the key comes back at once.
	RequeueNow time.Duration = -1
)

// SyncFunc reconciles one key. A non-nil error retries the key with the
// queue's backoff (requeueAfter is then ignored); otherwise requeueAfter
// says when to look again: NoRequeue, RequeueNow or a positive duration.
type SyncFunc[T comparable] func(ctx context.Context, key T) (requeueAfter time.Duration, err error)

// ProcessNext takes one key from q, calls syncKey with it and applies the
// verdict: an error → AddRateLimited; success → Forget, then AddAfter unless
// requeueAfter is NoRequeue (a negative one means at once). It marks the key
// Done before returning, and returns false, without calling syncKey, once q is
// shut down.
func ProcessNext[T comparable](ctx context.Context, q workqueue.TypedRateLimitingInterface[T], syncKey SyncFunc[T]) bool {
	key, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(key)

	requeueAfter, err := syncKey(ctx, key)
	if err != nil {
		q.AddRateLimited(key)
		return true
	}
	q.Forget(key)
	if requeueAfter != NoRequeue {
		q.AddAfter(key, max(requeueAfter, 0))
	}
	return true
}

// Run runs workers goroutines, each calling ProcessNext until q shuts down,
// until ctx ends; then it shuts q down and returns once every worker has
// finished its item.
func Run[T comparable](ctx context.Context, q workqueue.TypedRateLimitingInterface[T], workers int, syncKey SyncFunc[T]) {
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				for ProcessNext(ctx, q, syncKey) {
				}
			}, time.Second)
		})
	}
	<-ctx.Done()
	klog.FromContext(ctx).Info("Shutting down workers")
	q.ShutDown()
	wg.Wait()
}

// LogSyncFailure logs a failed sync of the object named by key as an error,
// at every verbosity, under kind ("proxy", "pool"); the queue's backoff
// rate-limits it to one line per retry. A conflict only says the cache was
// behind a write, and the retry reads the newer object, so it stays quiet
// unless asked for.
func LogSyncFailure[T any](logger klog.Logger, kind string, key T, err error) {
	if apierrors.IsConflict(err) {
		logger.V(4).Info("Sync conflicted with a newer write; retrying", kind, key, "err", err)
		return
	}
	logger.Error(err, "Sync failed; retrying with backoff", kind, key)
}
