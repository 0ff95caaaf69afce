package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/proxyfleet/proxy-operator/pkg/bandetect"
	"github.com/proxyfleet/proxy-operator/pkg/lease/wire"
)

// Response headers that tell a crawler what the gateway did for it. Only
// the gateway sets them: every header under headerPrefix is dropped from
// crawlers' requests and from targets' responses.
const (
	headerPrefix = "Proxy-Operator-"

	// HeaderAttempts: how many upstreams the request was sent through
	// (more than 1 after a ban or a refusal).
	HeaderAttempts = "Proxy-Operator-Attempts"
	// HeaderProxy: the Proxy that answered, namespace/name.
	HeaderProxy = "Proxy-Operator-Proxy"
	// HeaderBanned: why the answer is a ban, when it was judged one and no
	// retry was left (or allowed).
	HeaderBanned = "Proxy-Operator-Banned"
	// HeaderError: the reason of the gateway's own refusal or failure (as
	// Proxy-Status's details, and the errors metric's label).
	HeaderError = "Proxy-Operator-Error"
)

// forward sends r (absolute-form, http or https) through leased upstreams
// and answers with the response, judged by the lease's ban detection
// (bandetect): a ban ends the lease with outcome banned for the domain,
// and a request safe to send again (resendable) is sent again on a fresh
// lease, up to the rule's retries. A request that failed before any of it
// was written towards the target (the upstream unreachable, a refused
// CONNECT, a 407: our credentials for it are wrong) is tried once through
// the next proxy when its body can be sent again; one that failed after
// (a reset, the header timeout) only when it is resendable: the target
// may have acted on it. The crawler sees one response; HeaderAttempts and
// HeaderProxy say how it came.
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request, c caller) {
	logger := klog.FromContext(r.Context())
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.Close = false
	removeHopHeaders(out.Header)
	removeGatewayHeaders(out.Header)
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header.Set("User-Agent", "") // the transport must not add Go's own
	}
	replayable := r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0
	if r.ContentLength == 0 {
		out.Body = nil
	}
	resendable := replayable && safeToResend(r)
	domain := domainOf(r.URL.Host)

	var lastErr error
	refusals, bans := 0, 0
	for attempt := 1; ; attempt++ {
		u, err := g.take(r.Context(), c, domain)
		if err != nil {
			// After a ban, the site banning too many proxies is the answer:
			// the crawler learns why no other proxy was tried.
			if attempt == 1 || hasCode(err, wire.CodeSiteBanning) {
				g.acquireError(w, r, err)
				return
			}
			break
		}
		start := time.Now()
		resp, written, err := g.roundTrip(out, u)
		if err == nil && resp.StatusCode == http.StatusProxyAuthRequired {
			resp.Body.Close()
			// The upstream answered for itself: nothing went on to the target.
			written = false
			err = fmt.Errorf("%w: the upstream rejected its credentials (407)", errRefused)
		}
		if err != nil {
			if r.Context().Err() != nil {
				u.done()
				return
			}
			if isCertificateError(err) {
				// The target's fault, not the proxy's: no other proxy helps,
				// and nothing is ever sent on without verification.
				u.done()
				g.fail(w, r, http.StatusBadGateway, ReasonTargetCertificate, fmt.Sprintf("the target's certificate is not valid: %v", err), 0)
				return
			}
			lastErr = fmt.Errorf("proxy %s: %w", u.h.proxy, err)
			logger.V(2).Info("Upstream failed a request; releasing it with outcome error", "proxy", u.h.proxy, "host", r.URL.Host, "attempt", attempt, "err", err)
			u.refused()
			if refusals++; refusals > 1 || !replayable || (written && !resendable) {
				break
			}
			continue
		}
		detector := g.cfg.BanRules.For(u.h.proxy.Namespace, domain)
		prefix, verdict := g.judge(resp, time.Since(start), detector)
		removeGatewayHeaders(resp.Header) // judged as the site sent them; only ours reach the crawler
		if verdict.Banned {
			logger.V(2).Info("Response judged a ban; the lease ends banned for the domain", "proxy", u.h.proxy, "domain", domain, "attempt", attempt, "reason", verdict.Reason)
			u.banned(domain)
			if bans++; resendable && bans <= detector.Retries() {
				resp.Body.Close()
				continue
			}
			resp.Header.Set(HeaderBanned, verdict.Reason)
		}
		resp.Header.Set(HeaderAttempts, strconv.Itoa(attempt))
		resp.Header.Set(HeaderProxy, u.h.proxy.String())
		g.cfg.Metrics.ObserveGatewayConnection(u.mode, r.Method)
		g.cfg.Metrics.AddGatewayActive(1)
		g.copyResponse(w, resp, prefix, u.h)
		g.cfg.Metrics.AddGatewayActive(-1)
		if !verdict.Banned {
			u.done()
		}
		return
	}
	if lastErr == nil {
		lastErr = errors.New("every proxy tried was banned and no other could be leased")
	}
	g.fail(w, r, http.StatusBadGateway, ReasonUpstreamRefused, fmt.Sprintf("the upstream failed the request: %v", lastErr), 0)
}

// removeGatewayHeaders drops every header named like the gateway's own:
// a crawler's must not reach a target, and a target's must not pass for
// the gateway's verdict (a Proxy-Operator-Banned on a response judged
// fine).
func removeGatewayHeaders(h http.Header) {
	for name := range h {
		if len(name) >= len(headerPrefix) && strings.EqualFold(name[:len(headerPrefix)], headerPrefix) {
			delete(h, name)
		}
	}
}

// safeToResend says whether r may reach its target twice: a safe method
// (RFC 9110, 9.2.1), or a request that names its idempotency key, the
// rule net/http's Transport keeps for its own retries. PUT and DELETE are
// idempotent by the RFC but not by every API, and a POST never is.
func safeToResend(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return r.Header.Get("Idempotency-Key") != "" || r.Header.Get("X-Idempotency-Key") != ""
}

// judge reads what detector needs of resp's body (its first BodyBytes)
// and says whether resp is a ban; the bytes read are returned, to be sent
// before the rest of the body.
func (g *Gateway) judge(resp *http.Response, ttfb time.Duration, detector *bandetect.Detector) ([]byte, bandetect.Verdict) {
	var prefix []byte
	if n := detector.BodyBytes(); n > 0 && resp.Body != nil {
		prefix = make([]byte, n)
		read, _ := io.ReadFull(resp.Body, prefix)
		prefix = prefix[:read]
	}
	return prefix, detector.Judge(bandetect.Response{Status: resp.StatusCode, Header: resp.Header, TimeToFirstByte: ttfb, Body: prefix})
}

// isCertificateError: the target's certificate did not verify.
func isCertificateError(err error) bool {
	var verify *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid)
}
