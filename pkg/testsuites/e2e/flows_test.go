package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/retry"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/gc"
	"github.com/proxyfleet/proxy-operator/pkg/operator"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	podprovider "github.com/proxyfleet/proxy-operator/pkg/provider/kubernetes"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
)

// A flow is what a user of the operator sees happen, as a sequence of
// steps; each step must show within its bound. The bounds are several times
// what a healthy operator needs on a loaded 2-core machine, and shorter
// than what a degraded one (polling through relists, say) would need: a
// flow that misses a bound is broken.
type flow struct {
	name  string
	steps []step
}

// step is one observable outcome of a flow.
type step struct {
	name string
	// act, optional, is the test's part of the step (an edit, a deletion),
	// done before the wait.
	act func(ctx context.Context) error
	// done returns nil once the outcome shows, else what is missing.
	done  func(ctx context.Context) error
	bound time.Duration
}

// flowResult is how far a flow got.
type flowResult struct {
	flow string
	// passed are the steps that showed, with how long each took.
	passed []string
	// broken is the step that did not show within its bound, "" if the flow
	// completed; reason is the step's last complaint.
	broken string
	reason error
	// canceled: the run was stopped before the flow finished.
	canceled bool
	// testErr: the test's own part of a step failed; the flow says nothing.
	testErr error
	took    time.Duration
}

func (res flowResult) completed() bool {
	return res.broken == "" && !res.canceled && res.testErr == nil
}

func (res flowResult) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: ", res.flow)
	switch {
	case res.testErr != nil:
		fmt.Fprintf(&b, "TEST ERROR at %q: %v", res.broken, res.testErr)
	case res.canceled:
		fmt.Fprintf(&b, "stopped early")
	case res.broken != "":
		fmt.Fprintf(&b, "BROKEN at %q: %v", res.broken, res.reason)
	default:
		fmt.Fprintf(&b, "completed in %v", res.took.Round(100*time.Millisecond))
	}
	if len(res.passed) > 0 {
		fmt.Fprintf(&b, " [passed: %s]", strings.Join(res.passed, "; "))
	}
	return b.String()
}

// runFlow runs f's steps in order; onFirstStep is called once the first
// step has shown. A step still missing once alive complains (the operator
// exited) is broken at once.
func runFlow(ctx context.Context, f flow, onFirstStep func(), alive func() error) flowResult {
	res := flowResult{flow: f.name}
	start := time.Now()
	for i, s := range f.steps {
		stepStart := time.Now()
		if s.act != nil {
			if err := s.act(ctx); err != nil {
				res.broken, res.testErr = s.name, err
				if ctx.Err() != nil {
					res.testErr, res.canceled = nil, true
				}
				return res
			}
		}
		stepCtx, cancel := context.WithTimeout(ctx, s.bound)
		err := eventually.Poll(stepCtx, pollInterval, func(ctx context.Context) error {
			err := s.done(ctx)
			if err != nil {
				if dead := alive(); dead != nil {
					return fmt.Errorf("%w; the step: %v", dead, err)
				}
			}
			return err
		})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				res.canceled = true
				return res
			}
			res.broken, res.reason = s.name, err
			return res
		}
		res.passed = append(res.passed, fmt.Sprintf("%s (%v)", s.name, time.Since(stepStart).Round(100*time.Millisecond)))
		if i == 0 && onFirstStep != nil {
			onFirstStep()
		}
	}
	res.took = time.Since(start)
	return res
}

// runFlows runs the leader flow and, once the operator leads, the others,
// all at once. It returns every flow's result by name once all have
// finished, or once stop accepts a result (the rest are canceled).
func (r *operatorRun) runFlows(ctx context.Context, stop func(flowResult) bool) map[string]flowResult {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	leader := r.leaderFlow()
	others := []flow{r.externalFlow(), r.managedFlow(), r.retryFlow(), r.gcFlow(), r.poolFlow(), r.policyFlow(), r.dashboardFlow()}

	leading, leaderDone := make(chan struct{}), make(chan struct{})
	results := make(chan flowResult, 1+len(others))
	go func() {
		defer close(leaderDone)
		results <- runFlow(ctx, leader, func() { close(leading) }, r.op.alive)
	}()
	for _, f := range others {
		go func() {
			select {
			case <-leading:
				results <- runFlow(ctx, f, nil, r.op.alive)
			case <-leaderDone:
				select {
				case <-leading: // led, then broke a later step
					results <- runFlow(ctx, f, nil, r.op.alive)
				default:
					results <- flowResult{flow: f.name, broken: f.steps[0].name, reason: errors.New("the operator never led")}
				}
			case <-ctx.Done():
				results <- flowResult{flow: f.name, canceled: true}
			}
		}()
	}
	out := map[string]flowResult{}
	for range 1 + len(others) {
		res := <-results
		out[res.flow] = res
		if stop != nil && stop(res) {
			cancel()
		}
	}
	return out
}

// leaderFlow: the process takes the Lease, labels its Pod so that the lease
// Service selects it, and keeps renewing.
func (r *operatorRun) leaderFlow() flow {
	var lastRenew *metav1.MicroTime
	renewals := 0
	return flow{name: "leader", steps: []step{
		{
			name:  "holds the leader Lease",
			bound: 15 * time.Second, // from the process start: a race-built binary starts slowly on a busy machine
			done: func(ctx context.Context) error {
				lease, err := r.s.kube.CoordinationV1().Leases(r.ns).Get(ctx, operator.LeaseName, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
					return errors.New("the Lease has no holder")
				}
				if v, err := r.op.metric(ctx, "proxy_operator_leader", nil); err != nil || v != 1 {
					return fmt.Errorf("proxy_operator_leader = %v (%v)", v, err)
				}
				return nil
			},
		},
		{
			name:  "labels its Pod for the lease Service",
			bound: 10 * time.Second,
			done: func(ctx context.Context) error {
				return r.leaderLabelled(ctx, true)
			},
		},
		{
			name:  "keeps renewing the Lease",
			bound: 8 * time.Second, // two renewals at --leader-elect-retry-period=500ms
			done: func(ctx context.Context) error {
				lease, err := r.s.kube.CoordinationV1().Leases(r.ns).Get(ctx, operator.LeaseName, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if renew := lease.Spec.RenewTime; renew != nil && (lastRenew == nil || !renew.Equal(lastRenew)) {
					if lastRenew != nil {
						renewals++
					}
					lastRenew = renew.DeepCopy()
				}
				if renewals < 2 {
					return fmt.Errorf("renewed %d times since first seen", renewals)
				}
				return nil
			},
		},
	}}
}

// leaderLabelled checks that the placeholder Pod carries the leader label
// (want) or not, and that the lease Service selects it accordingly: a
// Service that selects the leader label (--lease-replication=none
// installs) selects the Pod only while it leads; the artifacts' default,
// which selects every replica (raft: every ready replica serves the lease
// API, docs/decisions/0381), selects it either way and leaves the choice
// to readiness.
func (r *operatorRun) leaderLabelled(ctx context.Context, want bool) error {
	pod, err := r.s.kube.CoreV1().Pods(r.ns).Get(ctx, r.podName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if got := pod.Labels[operator.LeaderLabel] == "true"; got != want {
		return fmt.Errorf("Pod %s/%s labels %v: leader label present = %v, want %v", r.ns, r.podName, pod.Labels, got, want)
	}
	svc, err := r.s.kube.CoreV1().Services(r.ns).Get(ctx, r.leaseServiceName(), metav1.GetOptions{})
	if err != nil {
		return err
	}
	_, byLeader := svc.Spec.Selector[operator.LeaderLabel]
	if got := labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)); got != (want || !byLeader) {
		return fmt.Errorf("lease Service %s (selector %v) selects the Pod = %v, want %v", svc.Name, svc.Spec.Selector, got, want || !byLeader)
	}
	return nil
}

// leaseServiceName is the artifacts' Service of the lease API.
func (r *operatorRun) leaseServiceName() string {
	for _, svc := range r.artifacts.services {
		if svc.Name == leaseServiceName {
			return svc.Name
		}
	}
	return "(no " + leaseServiceName + " Service in the artifacts)"
}

// leaseServiceName is the name of the lease API's Service in the
// artifacts (artifacts/deploy/services.yaml).
const leaseServiceName = "proxy-operator-leases"

// externalFlow: an External Proxy gets its status, and the status follows
// each edit of the endpoint within seconds. Several edits in a row tell an
// operator that watches from one that relists with backoff (a watch it may
// not open): each relist comes later than the previous one.
func (r *operatorRun) externalFlow() flow {
	ports := r.s.externalPorts
	steps := []step{{
		name: "status written",
		act: func(ctx context.Context) error {
			_, err := r.s.crawl.CrawlV1alpha1().Proxies(r.proxies).Create(ctx, r.externalProxy(ports[0]), metav1.CreateOptions{})
			return err
		},
		done:  func(ctx context.Context) error { return r.externalConverged(ctx, ports[0]) },
		bound: 10 * time.Second,
	}}
	for i := 1; i <= editsInARow; i++ {
		port := ports[i%2]
		steps = append(steps, step{
			name: fmt.Sprintf("status follows endpoint edit %d", i),
			act: func(ctx context.Context) error {
				return r.updateProxy(ctx, externalProxy, func(p *crawlv1alpha1.Proxy) { p.Spec.Endpoint.Port = port })
			},
			done:  func(ctx context.Context) error { return r.externalConverged(ctx, port) },
			bound: editBound,
		})
	}
	return flow{name: "external", steps: steps}
}

func (r *operatorRun) externalConverged(ctx context.Context, port int32) error {
	p, err := r.s.crawl.CrawlV1alpha1().Proxies(r.proxies).Get(ctx, externalProxy, metav1.GetOptions{})
	if err != nil {
		return err
	}
	c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned)
	if p.Status.ObservedGeneration != p.Generation || p.Status.IP != "127.0.0.1" || p.Status.Port != port ||
		c == nil || c.Status != metav1.ConditionTrue {
		return fmt.Errorf("generation %d, status %+v; want %s:%d, Provisioned=True", p.Generation, p.Status, "127.0.0.1", port)
	}
	return nil
}

// managedFlow: a kubernetes-provider Proxy with credentials and cloud-init
// from Secrets gets a finalizer and a Pod; once the Pod runs, its address
// is the status; an event says so; probes through it succeed; a crawler
// leases it over the lease API (and gets its credentials) and releases it;
// deleting the Proxy deletes the Pod and the cloud-init Secret the provider
// made, then the Proxy goes.
func (r *operatorRun) managedFlow() flow {
	var (
		instance, leaseID string
		released          int
		releaseAnswer     []byte
	)
	return flow{name: "managed", steps: []step{
		{
			name: "finalizer and Pod",
			act: func(ctx context.Context) error {
				p, err := r.s.crawl.CrawlV1alpha1().Proxies(r.proxies).Create(ctx,
					r.managedProxy(managedProxy, cloudInitSecret, withAuth(credentialsSecret), allowFromCrawlers), metav1.CreateOptions{})
				if err == nil {
					instance = provider.InstanceName(p.UID)
				}
				return err
			},
			done: func(ctx context.Context) error {
				p, err := r.s.crawl.CrawlV1alpha1().Proxies(r.proxies).Get(ctx, managedProxy, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if len(p.Finalizers) == 0 {
					return errors.New("no finalizer yet")
				}
				if _, err := r.s.kube.NetworkingV1().NetworkPolicies(r.proxies).Get(ctx, instance, metav1.GetOptions{}); err != nil {
					return fmt.Errorf("NetworkPolicy of spec.kubernetes.allowFrom: %w", err)
				}
				_, err = r.s.kube.CoreV1().Pods(r.proxies).Get(ctx, instance, metav1.GetOptions{})
				return err
			},
			bound: 10 * time.Second,
		},
		{
			name: "status holds the running Pod's address",
			done: func(ctx context.Context) error {
				return r.runsWith(ctx, managedProxy, instance, cloudInitWith(secretValues.cloudInitMarker))
			},
			bound: 15 * time.Second, // a 5 s provisioning poll
		},
		{
			name:  "Created event",
			done:  func(ctx context.Context) error { return r.hasEvent(ctx, managedProxy, "Created", 1) },
			bound: 5 * time.Second,
		},
		{
			// The probe goes through the Pod's proxy with the credentials
			// from the Secret: both reached their places.
			name:  "healthy: probed through the proxy with its credentials",
			done:  func(ctx context.Context) error { return r.healthy(ctx, managedProxy) },
			bound: 10 * time.Second,
		},
		{
			name: "leased over the lease API, with its credentials",
			done: func(ctx context.Context) error {
				id, err := r.acquireLease(ctx, managedProxy)
				leaseID = id
				return err
			},
			bound: 10 * time.Second,
		},
		{
			name: "lease released",
			act: func(ctx context.Context) error {
				// The answer is the operator's part: done judges it.
				var err error
				released, releaseAnswer, err = r.leaseCall(ctx, http.MethodDelete, "/v1/leases/"+leaseID+"?outcome=ok", nil)
				return err
			},
			done: func(ctx context.Context) error {
				if released != http.StatusNoContent {
					return fmt.Errorf("DELETE /v1/leases/…: %d %s", released, releaseAnswer)
				}
				code, body, err := r.leaseCall(ctx, http.MethodGet, "/v1/leases/"+leaseID, nil)
				if err == nil && code != http.StatusNotFound {
					err = fmt.Errorf("GET /v1/leases/… after the release: %d %s", code, body)
				}
				return err
			},
			bound: 5 * time.Second,
		},
		{
			name: "deleted with its Pod and cloud-init Secret",
			act: func(ctx context.Context) error {
				return r.s.crawl.CrawlV1alpha1().Proxies(r.proxies).Delete(ctx, managedProxy, metav1.DeleteOptions{})
			},
			done: func(ctx context.Context) error {
				var left []string
				if _, err := r.s.crawl.CrawlV1alpha1().Proxies(r.proxies).Get(ctx, managedProxy, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					left = append(left, fmt.Sprintf("Proxy (%v)", err))
				}
				if _, err := r.s.kube.CoreV1().Pods(r.proxies).Get(ctx, instance, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					left = append(left, fmt.Sprintf("Pod (%v)", err))
				}
				if _, err := r.s.kube.CoreV1().Secrets(r.proxies).Get(ctx, podprovider.CloudInitSecretName(instance), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					left = append(left, fmt.Sprintf("cloud-init Secret (%v)", err))
				}
				if _, err := r.s.kube.NetworkingV1().NetworkPolicies(r.proxies).Get(ctx, instance, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					left = append(left, fmt.Sprintf("NetworkPolicy (%v)", err))
				}
				if len(left) > 0 {
					return fmt.Errorf("still there: %s", strings.Join(left, ", "))
				}
				return nil
			},
			bound: 15 * time.Second, // a 5 s deletion poll
		},
	}}
}

// runsWith checks that the kubelet runs the instance with the given
// cloud-init and that the Proxy's status holds its address.
func (r *operatorRun) runsWith(ctx context.Context, proxy, instance, cloudInit string) error {
	pod, ok := r.s.kubelet.Pod(r.proxies, instance)
	if !ok {
		return fmt.Errorf("the kubelet runs no Pod %s", instance)
	}
	if string(pod.Files[podprovider.CloudInitPath]) != cloudInit {
		return errors.New("the Pod's cloud-init is not the Secret's current content")
	}
	host, _, err := net.SplitHostPort(pod.Addr)
	if err != nil {
		return err
	}
	p, err := r.s.crawl.CrawlV1alpha1().Proxies(r.proxies).Get(ctx, proxy, metav1.GetOptions{})
	if err != nil {
		return err
	}
	c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned)
	if p.Status.IP != host || c == nil || c.Status != metav1.ConditionTrue {
		return fmt.Errorf("status %+v, want ip %s and Provisioned=True", p.Status, host)
	}
	return nil
}

// retryFlow: a Pod the quota refuses is retried, the repeated refusal is
// one event counting up, cloud-init edits made meanwhile reach the
// provider's Secret within seconds (several in a row, like the External
// flow's edits), and once the quota is gone the next edit brings the Pod up
// with the latest cloud-init.
func (r *operatorRun) retryFlow() flow {
	var instance string
	markers := secretValues.retryMarkers
	steps := []step{
		{
			name: "refused Pod retried, cloud-init Secret made",
			act: func(ctx context.Context) error {
				p, err := r.s.crawl.CrawlV1alpha1().Proxies(r.proxies).Create(ctx,
					r.managedProxy(retryProxy, retryCloudInitSecret, bestEffort, allowFromCrawlers), metav1.CreateOptions{})
				if err == nil {
					instance = provider.InstanceName(p.UID)
				}
				return err
			},
			done: func(ctx context.Context) error {
				if err := r.providerCloudInit(ctx, instance, markers[0]); err != nil {
					return err
				}
				return r.hasEvent(ctx, retryProxy, "ProviderError", 1)
			},
			bound: 10 * time.Second,
		},
		{
			name:  "repeated refusals counted on one event",
			done:  func(ctx context.Context) error { return r.hasEvent(ctx, retryProxy, "ProviderError", 2) },
			bound: 8 * time.Second,
		},
	}
	for i := 1; i <= editsInARow; i++ {
		marker := markers[i]
		steps = append(steps, step{
			name:  fmt.Sprintf("cloud-init edit %d applied while refused", i),
			act:   func(ctx context.Context) error { return r.setRetryCloudInit(ctx, marker) },
			done:  func(ctx context.Context) error { return r.providerCloudInit(ctx, instance, marker) },
			bound: editBound,
		})
	}
	last := markers[editsInARow+1]
	steps = append(steps, step{
		name: "runs once the quota is gone",
		act: func(ctx context.Context) error {
			if err := r.liftQuota(ctx); err != nil {
				return err
			}
			// The retries have backed off by now; the edit brings the
			// Proxy back at once, as a user's fix would.
			return r.setRetryCloudInit(ctx, last)
		},
		done:  func(ctx context.Context) error { return r.runsWith(ctx, retryProxy, instance, cloudInitWith(last)) },
		bound: 15 * time.Second, // a 5 s provisioning poll
	})
	return flow{name: "retry", steps: steps}
}

// healthy checks the Proxy's Healthy condition.
func (r *operatorRun) healthy(ctx context.Context, name string) error {
	p, err := r.s.crawl.CrawlV1alpha1().Proxies(r.proxies).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionHealthy)
	if c == nil || c.Status != metav1.ConditionTrue {
		return fmt.Errorf("Healthy condition %+v, phase %q", c, p.Status.Phase)
	}
	return nil
}

// acquireLease leases the proxy with credentials as the crawler, checks the
// grant (the proxy, its credentials) and returns the lease's id.
func (r *operatorRun) acquireLease(ctx context.Context, proxy string) (string, error) {
	req := map[string]string{"holder": "e2e", "namespace": r.proxies, "selector": authLabel + "=yes", "ttl": "30s"}
	code, body, err := r.leaseCall(ctx, http.MethodPost, "/v1/leases", req)
	if err != nil {
		return "", err
	}
	if code != http.StatusCreated {
		return "", fmt.Errorf("POST /v1/leases: %d %s", code, body)
	}
	var grant struct {
		ID    string `json:"id"`
		Proxy struct {
			Namespace, Name, URL string
		} `json:"proxy"`
		Credentials *struct{ Username, Password string } `json:"credentials"`
	}
	if err := json.Unmarshal(body, &grant); err != nil {
		return "", err
	}
	if grant.Proxy.Namespace != r.proxies || grant.Proxy.Name != proxy {
		return grant.ID, fmt.Errorf("leased %s/%s, want %s/%s", grant.Proxy.Namespace, grant.Proxy.Name, r.proxies, proxy)
	}
	if c := grant.Credentials; c == nil || c.Username != secretValues.username || c.Password != secretValues.password {
		return grant.ID, errors.New("the grant does not carry the proxy's credentials")
	}
	return grant.ID, nil
}

// leaseCall calls the lease API as the crawler.
func (r *operatorRun) leaseCall(ctx context.Context, method, path string, body any) (int, []byte, error) {
	return r.leaseCallAs(ctx, r.crawlerToken, method, path, body)
}

// leaseCallAs calls the lease API with token.
func (r *operatorRun) leaseCallAs(ctx context.Context, token, method, path string, body any) (int, []byte, error) {
	var reader io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		reader = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+r.op.LeaseAddr+path, reader)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// providerCloudInit checks the cloud-init Secret the provider made for instance.
func (r *operatorRun) providerCloudInit(ctx context.Context, instance, marker string) error {
	s, err := r.s.kube.CoreV1().Secrets(r.proxies).Get(ctx, podprovider.CloudInitSecretName(instance), metav1.GetOptions{})
	if err != nil {
		return err
	}
	if string(s.Data[podprovider.CloudInitKey]) != cloudInitWith(marker) {
		return errors.New("the provider's cloud-init Secret does not hold the latest content")
	}
	return nil
}

func (r *operatorRun) setRetryCloudInit(ctx context.Context, marker string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := r.s.kube.CoreV1().Secrets(r.proxies).Get(ctx, retryCloudInitSecret, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Data = map[string][]byte{"user-data": []byte(cloudInitWith(marker))}
		_, err = r.s.kube.CoreV1().Secrets(r.proxies).Update(ctx, s, metav1.UpdateOptions{})
		return err
	})
}

// liftQuota deletes the quota and waits until admission lets a BestEffort
// Pod in (a server-side dry run), so that the operator's next attempt is
// not refused by an admission cache that has not seen the deletion yet.
func (r *operatorRun) liftQuota(ctx context.Context) error {
	err := r.s.kube.CoreV1().ResourceQuotas(r.proxies).Delete(ctx, bestEffortQuota, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	probe := orphanPod(r.proxies)
	probe.Name, probe.Labels = "quota-probe", nil
	probe.Spec.Containers[0].Resources = corev1.ResourceRequirements{} // BestEffort, as the retry flow's Pod
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return eventually.Poll(waitCtx, pollInterval, func(ctx context.Context) error {
		_, err := r.s.kube.CoreV1().Pods(r.proxies).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
}

// gcFlow: the orphan Pod made before the operator started is collected by
// this operator's first round, with an event and a count in its metrics.
func (r *operatorRun) gcFlow() flow {
	return flow{name: "gc", steps: []step{{
		name: "orphan collected",
		done: func(ctx context.Context) error {
			if _, err := r.s.kube.CoreV1().Pods(r.proxies).Get(ctx, r.orphan, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("orphan Pod still there (%v)", err)
			}
			n, err := r.op.metric(ctx, "proxy_operator_gc_collected_total", map[string]string{"provider": "kubernetes", "reason": gc.CollectedOrphaned})
			if err != nil || n < 1 {
				return fmt.Errorf("this operator collected %v instances (%v)", n, err)
			}
			return r.hasEvent(ctx, vanishedProxy, gc.ReasonOrphanDeleted, 1)
		},
		bound: 12 * time.Second,
	}}}
}

// hasEvent checks for an event about the named object (in the Proxy
// namespace) with the reason, counted at least minCount times.
func (r *operatorRun) hasEvent(ctx context.Context, name, reason string, minCount int32) error {
	events, err := r.s.kube.CoreV1().Events(r.proxies).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var seen []string
	for _, e := range events.Items {
		if e.InvolvedObject.Name != name {
			continue
		}
		if e.Reason == reason && eventCount(e) >= minCount {
			return nil
		}
		seen = append(seen, fmt.Sprintf("%s×%d", e.Reason, eventCount(e)))
	}
	return fmt.Errorf("no %s event counted %d times for %s; events: %v", reason, minCount, name, seen)
}

func eventCount(e corev1.Event) int32 {
	if e.Series != nil {
		return e.Series.Count
	}
	return max(e.Count, 1)
}

func (r *operatorRun) updateProxy(ctx context.Context, name string, change func(*crawlv1alpha1.Proxy)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := r.s.crawl.CrawlV1alpha1().Proxies(r.proxies).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(p)
		_, err = r.s.crawl.CrawlV1alpha1().Proxies(r.proxies).Update(ctx, p, metav1.UpdateOptions{})
		return err
	})
}
