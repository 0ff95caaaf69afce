package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
)

//go:embed assets
var assets embed.FS

// Limits of the HTTP side.
const (
	// writeTimeout drops a viewer that cannot take one View in this long;
	// its page reconnects and starts from the latest View.
	writeTimeout = 10 * time.Second
	// keepAlive is how often an idle stream gets a comment, so that
	// proxies and the page see it alive.
	keepAlive = 15 * time.Second
)

// contentSecurityPolicy lets the page load its own script and style and
// talk to its own origin, nothing else: no inline script, no frames.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
	"form-action 'none'; frame-ancestors 'none'; base-uri 'none'"

// Config configures a Handler.
type Config struct {
	Hub *Hub
	// History feeds the pool page's charts; without one they stay empty.
	History *History
	// Authenticator and Authorizer are the lease API's (--lease-auth): a
	// viewer sees a namespace when it may list proxies/leases there.
	Authenticator auth.Authenticator
	Authorizer    auth.Authorizer
	// Bindings names the namespaces worth a review for a viewer not allowed
	// across all namespaces (RoleBindings); nil reviews every namespace of
	// the view, up to MaxNamespaceReviews.
	Bindings Bindings
	// MaxViewers, MaxViewersPerIdentity and ViewersKeptForAll bound the
	// open streams (slots.go); zero takes the defaults, and a negative
	// ViewersKeptForAll keeps none.
	MaxViewers, MaxViewersPerIdentity, ViewersKeptForAll int
	// AccessTTL and MaxNamespaceReviews bound what one identity's access
	// costs (access.go); zero takes the defaults.
	AccessTTL           time.Duration
	MaxNamespaceReviews int
	// Clock expires the kept access; default the real clock.
	Clock clock.PassiveClock
}

// Handler serves the page under /ui/ and its data under /ui/api/.
type Handler struct {
	hub     *Hub
	history *History
	authn   auth.Authenticator
	access  *access
	slots   *slots
	static  http.Handler
}

// NewHandler returns the dashboard's handler.
func NewHandler(cfg Config) (*Handler, error) {
	if cfg.Hub == nil || cfg.Authenticator == nil || cfg.Authorizer == nil {
		return nil, errors.New("dashboard: a Hub, an Authenticator and an Authorizer are required")
	}
	if cfg.ViewersKeptForAll == 0 {
		cfg.ViewersKeptForAll = DefaultViewersKeptForAll
	}
	files, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, fmt.Errorf("dashboard assets: %w", err)
	}
	return &Handler{
		hub: cfg.Hub, history: cfg.History, authn: cfg.Authenticator,
		access: newAccess(cfg.Authorizer, cfg.Bindings, cfg.AccessTTL, cfg.MaxNamespaceReviews, cfg.Clock),
		slots:  newSlots(cfg.MaxViewers, cfg.MaxViewersPerIdentity, cfg.ViewersKeptForAll),
		static: http.StripPrefix("/ui", http.FileServerFS(files)),
	}, nil
}

// Routes are the handler's patterns on a ServeMux (the lease API's).
func (h *Handler) Routes() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"GET /ui":                                func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ui/", http.StatusFound) },
		"GET /ui/":                               h.serveStatic,
		"GET /ui/api/view":                       h.serveView,
		"GET /ui/api/login":                      h.serveLogin,
		"GET /ui/api/stream":                     h.serveStream,
		"GET /ui/api/history/{namespace}/{pool}": h.serveHistory,
	}
}

func setSecurityHeaders(w http.ResponseWriter) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", contentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
}

func (h *Handler) serveStatic(w http.ResponseWriter, r *http.Request) {
	setSecurityHeaders(w)
	h.static.ServeHTTP(w, r)
}

// Message is what the API answers and each stream event carries.
type Message struct {
	User string `json:"user"`
	// AllNamespaces is true when the viewer may list every namespace.
	AllNamespaces bool `json:"allNamespaces"`
	View          View `json:"view"`
}

// serveLogin says whether the page must ask for a token: not under
// --lease-auth=none, where a request without one is accepted. The page asks
// before it opens the stream, so that a first visit is not a 401.
func (h *Handler) serveLogin(w http.ResponseWriter, r *http.Request) {
	setSecurityHeaders(w)
	w.Header().Set("Cache-Control", "no-store")
	_, err := h.authn.Authenticate(auth.WithClientAddr(r.Context(), clientAddr(r)), "")
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]bool{"tokenRequired": err != nil})
}

// serveView answers the current View once, filtered for the viewer.
func (h *Handler) serveView(w http.ResponseWriter, r *http.Request) {
	setSecurityHeaders(w)
	w.Header().Set("Cache-Control", "no-store")
	view, _, _ := h.hub.Current()
	v, status, err := h.viewerOf(r.Context(), clientAddr(r), bearerToken(r), view.Namespaces())
	if err == nil && v.may.nothing() {
		status, err = http.StatusForbidden, errNothingVisible
	}
	if err != nil {
		writeError(w, status, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v.message(view))
}

// PoolHistory is what GET /ui/api/history/NAMESPACE/POOL answers.
type PoolHistory struct {
	IntervalMillis int64    `json:"intervalMillis"`
	Samples        []Sample `json:"samples"`
}

// serveHistory answers a pool's samples when the viewer may list its
// namespace, and the same empty answer for a pool that does not exist
// and for one the viewer may not see, so that it learns nothing of the
// other namespaces. The page asks once a sample interval: the samples
// are in memory, nothing reads the API server.
func (h *Handler) serveHistory(w http.ResponseWriter, r *http.Request) {
	setSecurityHeaders(w)
	w.Header().Set("Cache-Control", "no-store")
	ns, name := r.PathValue("namespace"), r.PathValue("pool")
	v, status, err := h.viewerOf(r.Context(), clientAddr(r), bearerToken(r), []string{ns})
	if err != nil {
		writeError(w, status, err)
		return
	}
	answer := PoolHistory{Samples: []Sample{}}
	if h.history != nil {
		answer.IntervalMillis = h.history.Interval().Milliseconds()
		if v.may.see(ns) {
			answer.Samples = append(answer.Samples, h.history.Pool(ns, name)...)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(answer)
}

// serveStream writes the viewer's View as a text/event-stream event now
// and after every change, until the viewer goes, falls behind, or its
// token or role stops being accepted. It is read with fetch(), not
// EventSource, so that the token travels in the Authorization header
// (docs/decisions/0290-dashboard-plain-js-fetch-stream-session-token.md).
// A viewer takes a slot only once it is known to see something
// (docs/decisions/0420-dashboard-authorizes-per-identity-before-a-slot.md).
func (h *Handler) serveStream(w http.ResponseWriter, r *http.Request) {
	setSecurityHeaders(w)
	w.Header().Set("Cache-Control", "no-store")
	ctx, token, addr := r.Context(), bearerToken(r), clientAddr(r)
	view, _, _ := h.hub.Current()
	v, status, err := h.viewerOf(ctx, addr, token, view.Namespaces())
	if err == nil && v.may.nothing() {
		status, err = http.StatusForbidden, errNothingVisible
	}
	if err != nil {
		writeError(w, status, err)
		return
	}
	release, err := h.slots.take(v.user.Identity(), v.may.all)
	if err != nil {
		status := http.StatusServiceUnavailable
		if errors.Is(err, errIdentityFull) {
			status = http.StatusTooManyRequests
		}
		w.Header().Set("Retry-After", "5")
		writeError(w, status, err)
		return
	}
	defer release()
	leave := h.hub.Join()
	defer leave()
	view, _, changed := h.hub.Current()
	rc := http.NewResponseController(w)
	// The lease API's server bounds whole requests; a stream lives on.
	_ = rc.SetReadDeadline(time.Time{})
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	for {
		if err := writeEvent(w, rc, v.message(view)); err != nil {
			klog.FromContext(ctx).V(4).Info("Dropping a dashboard viewer", "user", v.user.Name, "err", err)
			return
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				return
			case <-changed:
				break wait
			case <-time.After(keepAlive):
				if err := writeComment(w, rc); err != nil {
					return
				}
			}
		}
		view, _, changed = h.hub.Current()
		if v, _, err = h.viewerOf(ctx, addr, token, view.Namespaces()); err != nil || v.may.nothing() {
			return // the page reconnects and learns why
		}
	}
}

func writeEvent(w http.ResponseWriter, rc *http.ResponseController, msg Message) error {
	data, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	if err := rc.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "event: view\ndata: %s\n\n", data); err != nil {
		return err
	}
	return rc.Flush()
}

func writeComment(w http.ResponseWriter, rc *http.ResponseController) error {
	if err := rc.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
		return err
	}
	if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
		return err
	}
	return rc.Flush()
}

// viewer is an authenticated caller and what it may see.
type viewer struct {
	user auth.User
	may  visibility
}

// message is view cut to what v may see.
func (v viewer) message(view View) Message {
	if v.may.all {
		return Message{User: v.user.Name, AllNamespaces: true, View: view}
	}
	return Message{User: v.user.Name, View: Filter(view, v.may.see)}
}

// viewerOf authenticates token and decides which of namespaces its user
// may see. Both answers are cached (the lease API's authenticator, and
// access per identity), so a push to many viewers costs no review per push.
func (h *Handler) viewerOf(ctx context.Context, addr, token string, namespaces []string) (viewer, int, error) {
	if addr != "" {
		ctx = auth.WithClientAddr(ctx, addr)
	}
	user, err := h.authn.Authenticate(ctx, token)
	switch {
	case errors.Is(err, auth.ErrUnauthenticated):
		return viewer{}, http.StatusUnauthorized, errors.New("a valid Kubernetes bearer token is required")
	case err != nil:
		return viewer{}, http.StatusServiceUnavailable, errors.New("authentication is unavailable; retry")
	}
	may, err := h.access.decide(ctx, user, namespaces)
	switch {
	case errors.Is(err, errBindingsUnknown):
		return viewer{}, http.StatusServiceUnavailable, err
	case err != nil:
		return viewer{}, http.StatusServiceUnavailable, errors.New("authorization is unavailable; retry")
	}
	if !may.complete {
		klog.FromContext(ctx).V(2).Info("A dashboard viewer is bound in more namespaces than are reviewed per identity; it sees the first ones",
			"user", user.Name, "maxNamespaceReviews", h.access.maxReviews)
	}
	return viewer{user: user, may: may}, 0, nil
}

func writeError(w http.ResponseWriter, status int, err error) {
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="proxy-operator dashboard"`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
}

// bearerToken is the token of an "Authorization: Bearer" header, "" if none.
func bearerToken(r *http.Request) string {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return ""
	}
	return host
}
