package operator

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// TestHealthzFailsWhenTheLeaderStopsRenewing: a replica that leads and then
// hangs on its renewals (the API call never returns) fails /healthz once its
// lease has expired, so the kubelet restarts it; a standby and a replica
// without election answer ok.
func TestHealthzFailsWhenTheLeaderStopsRenewing(t *testing.T) {
	healthz := func(op *operator) (int, string) {
		rec := httptest.NewRecorder()
		op.serveHealthz(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := healthz(&operator{}); code != http.StatusOK || body != "ok\n" {
		t.Errorf("without leader election: %d %q, want 200 ok", code, body)
	}

	client := kubefake.NewClientset()
	hang := make(chan struct{})
	defer close(hang)
	acquired := make(chan struct{})
	op := &operator{electionWatchdog: leaderelection.NewLeaderHealthzAdaptor(0)}
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: "default", Name: LeaseName},
			Client:     client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: "me"},
		},
		LeaseDuration: 2 * time.Second,
		RenewDeadline: time.Second,
		RetryPeriod:   100 * time.Millisecond,
		WatchDog:      op.electionWatchdog,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { close(acquired) },
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	op.electionWatchdog.SetLeaderElection(elector)
	// Once leading, every renewal hangs, as on a wedged connection.
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		select {
		case <-acquired:
			<-hang
			return true, nil, context.Canceled
		default:
			return false, nil, nil
		}
	})
	if code, _ := healthz(op); code != http.StatusOK {
		t.Errorf("a standby: %d, want 200", code)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go elector.Run(ctx)
	select {
	case <-acquired:
	case <-time.After(time.Minute):
		t.Fatal("never acquired the lease")
	}
	if code, body := healthz(op); code != http.StatusOK {
		t.Errorf("a leader that just renewed: %d %q, want 200", code, body)
	}
	eventually.Check(t, time.Minute, 50*time.Millisecond, "a leader not renewing", func(context.Context) error {
		if code, body := healthz(op); code != http.StatusInternalServerError || !strings.HasPrefix(body, "leader election: ") {
			return fmt.Errorf("/healthz %d %q, want 500 naming leader election", code, body)
		}
		return nil
	})
}
