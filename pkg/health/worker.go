package health

import (
	"context"
	"fmt"
	"net/url"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/proxyfleet/proxy-operator/pkg/leasecred"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// work runs the jobs it is handed until the channel closes, and after each
// the next job waiting for the same endpoint (endpoint.go).
func (e *Engine) work(ctx context.Context, jobs <-chan job) {
	for j := range jobs {
		for more := true; more; {
			e.runJob(ctx, j)
			e.mu.Lock()
			j, more = e.endpoints.finished(j.state.address)
			e.mu.Unlock()
		}
	}
}

func (e *Engine) runJob(ctx context.Context, j job) {
	started := e.clock.Now()
	e.metrics.ObserveScheduleDelay(started.Sub(j.due))
	r := e.runCheck(ctx, j)
	if ctx.Err() != nil {
		return // shutting down: the failure is ours, not the proxy's
	}
	r.ExitCountry = resolveExitCountry(r, e.geo)
	e.record(ctx, j, r, started, e.clock.Now())
}

// runCheck adds the proxy's credentials to the target and probes it. When
// the job must prove the proxy closed, a successful probe is followed by
// one without credentials, which must fail: a Managed instance that serves
// anyone (a cloud-init that ignores the credentials, say) is never Ready.
// A successful probe also says whether the instance checks lease
// credentials (Result.Lease).
func (e *Engine) runCheck(ctx context.Context, j job) Result {
	t := j.check.target
	if j.check.authSecret == "" {
		r := e.probe(ctx, t)
		if r.OK {
			r.Lease = LeaseNoKey
		}
		return r
	}
	creds, err := e.credentials(ctx, j.key.Namespace, j.check.authSecret)
	if err != nil {
		return Result{Class: ResultError, Message: err.Error()}
	}
	var keys []leasecred.Key
	if creds.LeaseKeys != "" {
		if keys, err = e.leaseKeys.Parse(creds.LeaseKeys); err != nil {
			return Result{Class: ResultError, Message: fmt.Sprintf("credentials Secret %q key %q: %v", j.check.authSecret, leasecred.SecretKey, err)}
		}
	}
	user, pass := proxyaccess.SessionUsername(creds.Username, j.check.session), creds.Password
	if keys != nil && j.check.signs {
		// A credential of no lease, for this probe: the instance admits
		// nothing else to a session's exit or from its ranges. Its end
		// leaves room for the instance's clock to run ahead of ours.
		pass = leasecred.Sign(keys[0], user, leasecred.Claims{End: e.clock.Now().Add(t.Timeout + probeCredentialSlack)})
	}
	withAuth := t
	proxyURL := *t.Proxy
	proxyURL.User = url.UserPassword(user, pass)
	withAuth.Proxy = &proxyURL
	r := e.probe(ctx, withAuth)
	if r.Class == ResultProxyRefused && j.check.refusalHint != "" {
		r.Message += ": " + j.check.refusalHint
	}
	if r.OK {
		r.Lease = leaseCheck(keys, r.AnnouncedKeys)
	}
	if !r.OK || !j.proveClosed {
		return r
	}
	if anonymous := e.probe(ctx, t); anonymous.OK {
		return Result{Class: ResultOpen, Latency: r.Latency, Status: anonymous.Status, Message: fmt.Sprintf(
			"the instance answers without credentials too: anyone who can reach it can use it; configure it to require those of Secret %q", j.check.authSecret)}
	}
	return r
}

// probeCredentialSlack is how long a probe's own credential outlives the
// probe's timeout: room for the instance's clock to run ahead of ours.
const probeCredentialSlack = time.Minute

// leaseCheck is whether an instance that announced the key IDs announced
// checks the credentials signed with keys (the Secret's, the first signs).
func leaseCheck(keys []leasecred.Key, announced string) LeaseCheck {
	switch {
	case len(keys) == 0:
		return LeaseNoKey
	case leasecred.Announces(announced, keys[0]):
		return LeaseChecked
	}
	return LeaseNotChecked
}

// credentials reads the spec.auth Secret. Its errors name the Secret and
// the key, never a value.
func (e *Engine) credentials(ctx context.Context, namespace, name string) (*proxyaccess.Credentials, error) {
	if e.secrets == nil {
		return nil, fmt.Errorf("credentials Secret %q: the engine has no Secret reader", name)
	}
	return proxyaccess.ReadCredentials(name, func(name string) (*corev1.Secret, error) { return e.secrets(ctx, namespace, name) })
}

// record applies a probe result to the proxy's state and reports the
// verdict when it is worth a status write.
func (e *Engine) record(ctx context.Context, j job, r Result, started, now time.Time) {
	e.mu.Lock()
	st := j.state
	if st.gone {
		// Pruned or replaced while the probe ran: the result is about an
		// instance or address that is no longer the proxy's.
		e.mu.Unlock()
		return
	}
	st.inFlight = false
	st.counters = observeLatency(transition(st.counters, r.OK, j.check.thresholds), r.Latency, r.OK)
	why := reportReason(st.reported, st.reportedAt, st.counters, r.Latency, r.OK, now, e.minReportInterval)
	if why == reportLatency && !e.latencyBudget.AllowN(now, 1) {
		why = "" // over the fleet's budget: a later probe reports it
	}
	if why == "" && exitIPChanged(st.reported, st.counters, r) {
		why = reportExitIP
	}
	if why == "" && leaseCheckChanged(st.reported, st.counters, r) {
		why = reportLease
	}
	// Made only when reported: most probes report nothing (docs/decisions/0164-engine-own-work-probe-measured-alone.md).
	var v *Verdict
	if why != "" {
		v = &Verdict{
			Address:   st.address,
			Healthy:   st.counters.verdict == verdictHealthy,
			Message:   r.Message,
			CheckedAt: started,
		}
		if v.Healthy {
			v.Latency = r.Latency // a failed probe's duration is not a latency
			v.ExitIP, v.ExitCountry = r.ExitIP, r.ExitCountry
			v.Lease = r.Lease
		}
		st.reported, st.reportedAt = v, now
	}
	failures := st.counters.failures
	e.mu.Unlock()

	e.metrics.ObserveProbe(j.key, r.Class, r.Latency, started)
	e.metrics.SetConsecutiveFailures(j.key, failures)
	if why == "" {
		return
	}
	e.metrics.ObserveReport(why)
	klog.FromContext(ctx).V(2).Info("Reporting health verdict", "proxy", klog.KRef(j.key.Namespace, j.key.Name),
		"why", why, "healthy", v.Healthy, "latency", v.Latency, "message", v.Message)
	e.enqueue(j.key)
}
