package replica

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// Every replica serves the lease API: it authenticates, authorizes and
// decodes each call itself (pkg/lease/server), and the Router runs the
// decoded call on the working store when this replica leads, or sends it
// to the leader over the peer port, where the leader runs it on its
// working store as the identity the sending replica vouched for. A call
// whose leader went away is sent again to the next one: an acquire carries
// a request ID, so that its second sending gets the lease the first got.

const (
	// forwardTimeout bounds a forwarded call that has no deadline of its
	// own (all but acquire), its retries on the next leader included.
	forwardTimeout = 10 * time.Second
	// leaderPoll is how often a replica looks again for a leader.
	leaderPoll = 25 * time.Millisecond
	// maxForwardedBody bounds a forwarded call: session state (64 KiB) and
	// a lease's fields.
	maxForwardedBody = 1 << 20
	peerCallPath     = "/peer/v1/call"
	peerStatusPath   = "/peer/v1/status"
)

// Router is the store the lease API calls (server.Leases).
type Router struct {
	node   *Node
	client *http.Client
}

// Router routes lease calls to the leader's working store.
func (n *Node) Router() *Router { return n.router }

// call is one forwarded lease call: the method and its arguments.
type call struct {
	Op      string            `json:"op"`
	Owner   string            `json:"owner"`
	ID      string            `json:"id,omitempty"`
	TTL     time.Duration     `json:"ttl,omitempty"`
	Report  store.Report      `json:"report"`
	Outcome store.Outcome     `json:"outcome,omitempty"`
	Domain  string            `json:"domain,omitempty"`
	Scope   string            `json:"scope,omitempty"`
	Session string            `json:"session,omitempty"`
	Blob    []byte            `json:"blob,omitempty"`
	Acquire *acquireArgs      `json:"acquire,omitempty"`
	Filter  store.LeaseFilter `json:"filter"`
}

// acquireArgs is a store.AcquireRequest with its selector as a string.
type acquireArgs struct {
	store.AcquireRequest
	Selector string `json:"selector"`
	// Deadline is the caller's, so that the leader waits no longer.
	Deadline time.Time `json:"deadline"`
}

// result is a forwarded call's answer.
type result struct {
	Lease  *store.Lease  `json:"lease,omitempty"`
	Leases []store.Lease `json:"leases,omitempty"`
	Err    *callError    `json:"error,omitempty"`
}

func (r *Router) Acquire(ctx context.Context, req store.AcquireRequest) (store.Lease, error) {
	if st := r.leading(); st != nil {
		return st.Acquire(ctx, req)
	}
	if req.RequestID == "" {
		req.RequestID = newRequestID()
	}
	args := &acquireArgs{AcquireRequest: req}
	if req.Selector != nil {
		args.Selector = req.Selector.String()
	}
	args.AcquireRequest.Selector = nil
	if d, ok := ctx.Deadline(); ok {
		args.Deadline = d
	} else if req.Wait > 0 {
		args.Deadline = time.Now().Add(req.Wait)
	}
	res, err := r.forward(ctx, call{Op: "acquire", Owner: req.Owner, Acquire: args})
	return leaseOf(res), err
}

func (r *Router) RenewAs(owner, id string, ttl time.Duration, report store.Report) (store.Lease, error) {
	if st := r.leading(); st != nil {
		return st.RenewAs(owner, id, ttl, report)
	}
	res, err := r.forwardBounded(call{Op: "renew", Owner: owner, ID: id, TTL: ttl, Report: report})
	return leaseOf(res), err
}

func (r *Router) ReleaseAs(owner, id string, outcome store.Outcome, domain string, report store.Report) error {
	if st := r.leading(); st != nil {
		return st.ReleaseAs(owner, id, outcome, domain, report)
	}
	_, err := r.forwardBounded(call{Op: "release", Owner: owner, ID: id, Outcome: outcome, Domain: domain, Report: report})
	return err
}

func (r *Router) GetAs(owner, id string) (store.Lease, error) {
	if st := r.reading(); st != nil {
		return st.GetAs(owner, id)
	}
	res, err := r.forwardBounded(call{Op: "get", Owner: owner, ID: id})
	return leaseOf(res), err
}

func (r *Router) List(f store.LeaseFilter) ([]store.Lease, error) {
	if st := r.reading(); st != nil {
		return st.List(f)
	}
	res, err := r.forwardBounded(call{Op: "list", Filter: f})
	return res.Leases, err
}

func (r *Router) PutStateAs(owner, id string, blob []byte) error {
	if st := r.leading(); st != nil {
		return st.PutStateAs(owner, id, blob)
	}
	_, err := r.forwardBounded(call{Op: "putState", Owner: owner, ID: id, Blob: blob})
	return err
}

func (r *Router) PutSessionStateAs(owner, scope, session, domain string, blob []byte) error {
	if st := r.leading(); st != nil {
		return st.PutSessionStateAs(owner, scope, session, domain, blob)
	}
	_, err := r.forwardBounded(call{Op: "putSessionState", Owner: owner, Scope: scope, Session: session, Domain: domain, Blob: blob})
	return err
}

func (r *Router) SessionLeases(owner, scope, session string) []store.Lease {
	if st := r.reading(); st != nil {
		return st.SessionLeases(owner, scope, session)
	}
	res, _ := r.forwardBounded(call{Op: "sessionLeases", Owner: owner, Scope: scope, Session: session})
	return res.Leases
}

func (r *Router) ForgetSession(owner, scope, session string) {
	if st := r.leading(); st != nil {
		st.ForgetSession(owner, scope, session)
		return
	}
	_, _ = r.forwardBounded(call{Op: "forgetSession", Owner: owner, Scope: scope, Session: session})
}

// Proxies are the committed store's on a replica that does not lead: the
// proxies are replicated state, and discovery needs no round trip.
func (r *Router) Proxies(namespace string, sel labels.Selector) []store.ProxyStatus {
	if st := r.leading(); st != nil {
		return st.Proxies(namespace, sel)
	}
	return r.node.Committed().Proxies(namespace, sel)
}

// LeaseNamespace reads the ID: any replica's key does.
func (r *Router) LeaseNamespace(owner, id string) (string, error) {
	return r.node.Committed().LeaseNamespace(owner, id)
}

// leading is the working store when it decides now, else nil.
func (r *Router) leading() *store.Store {
	if !r.node.Deciding() {
		return nil
	}
	return r.node.Working()
}

// reading is the working store when it decides now and a quorum still
// follows this leader, else nil. A leader cut from its peers decides
// nothing (its decisions cannot commit), but until its leader lease ends
// it would still answer reads from a state a new leader may have moved
// past; the round of heartbeats rules that out.
func (r *Router) reading() *store.Store {
	if st := r.leading(); st != nil && r.node.confirmLeading() == nil {
		return st
	}
	return nil
}

// confirmLeading checks with a quorum that this replica still leads.
func (n *Node) confirmLeading() error {
	if err := n.raft.VerifyLeader().Error(); err != nil {
		return fmt.Errorf("%w: %w", store.ErrNotLeader, err)
	}
	return nil
}

func (r *Router) forwardBounded(c call) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), forwardTimeout)
	defer cancel()
	return r.forward(ctx, c)
}

// forward sends c to the leader, and again to the next one while the
// leader is unknown, unreachable or not leading any more, until ctx ends.
func (r *Router) forward(ctx context.Context, c call) (result, error) {
	body, err := json.Marshal(c)
	if err != nil {
		return result{}, err
	}
	for {
		res, retry, err := r.send(ctx, body)
		if !retry {
			return res, err
		}
		t := time.NewTimer(leaderPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return result{}, fmt.Errorf("%w: no leader answered in time (%v)", store.ErrNotLeader, err)
		case <-t.C:
		}
		if st := r.leading(); st != nil {
			// This replica leads now: run the call here.
			return serveCall(ctx, r.node, st, body)
		}
	}
}

// send posts one forwarded call to the leader this replica knows; retry
// says that the leader was unknown, unreachable or did not lead. The post
// is given up when the leader this replica knows changes: a stopped or
// cut-off leader answers nothing, and its successor is asked at once (an
// acquire's request ID keeps it from granting twice).
func (r *Router) send(ctx context.Context, body []byte) (res result, retry bool, err error) {
	era := r.node.currentEra()
	_, addr := r.node.Leader()
	if addr == "" {
		return result{}, true, errors.New("no leader known")
	}
	postCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(era, cancel)()
	req, err := http.NewRequestWithContext(postCtx, http.MethodPost, "https://"+addr+peerCallPath, bytes.NewReader(body))
	if err != nil {
		return result{}, false, err
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return result{}, ctx.Err() == nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return result{}, true, fmt.Errorf("leader %s answered %d: %s", addr, resp.StatusCode, b)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxForwardedBody)).Decode(&res); err != nil {
		return result{}, true, err
	}
	if res.Err != nil {
		err := res.Err.error()
		return res, errors.Is(err, store.ErrNotLeader), err
	}
	return res, false, nil
}

// PeerHandler serves the calls other replicas forward, on the peer port.
func (n *Node) PeerHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+peerCallPath, func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxForwardedBody))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var res result
		if n.Deciding() {
			res, _ = serveCall(r.Context(), n, n.Working(), body)
		} else {
			res.Err = errorOf(store.ErrNotLeader)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(res)
	})
	mux.HandleFunc("GET "+peerStatusPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(n.Status())
	})
	return mux
}

// Status is what a replica knows of the group: how far it has followed
// the log, who leads, who votes. Another replica asks for it on the peer
// port, to give a new member its vote once it has caught up, and to tell a
// group that lost its quorum from one that is only electing.
type Status struct {
	Applied, Committed uint64
	// Leader is the leader's ID, empty when this replica knows none.
	Leader string
	// Voters are the voting members' IDs in this replica's configuration.
	Voters []string
	// Reads is what this replica's release reads (versions.go); a release
	// before versions were advertised leaves it out.
	Reads store.Version
}

// Status is this replica's.
func (n *Node) Status() Status {
	applied, committed := n.Progress()
	leader, _ := n.Leader()
	s := Status{Applied: applied, Committed: committed, Leader: leader, Reads: n.cfg.Reads}
	if members, err := n.Members(); err == nil {
		for _, m := range members {
			if m.Voter {
				s.Voters = append(s.Voters, m.ID)
			}
		}
	}
	return s
}

// PeerStatus asks the replica at address (its peer port) for its Status.
func (n *Node) PeerStatus(ctx context.Context, address string) (Status, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+address+peerStatusPath, nil)
	if err != nil {
		return Status{}, err
	}
	resp, err := n.router.client.Do(req)
	if err != nil {
		return Status{}, err
	}
	defer resp.Body.Close()
	var s Status
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&s); err != nil {
		return Status{}, err
	}
	return s, nil
}

// serveCall runs a forwarded call on st, the working store of n, and
// returns its answer, the error both in it and beside it. Reads confirm
// first that n still leads (see Router.reading).
func serveCall(ctx context.Context, n *Node, st *store.Store, body []byte) (result, error) {
	var c call
	if err := json.Unmarshal(body, &c); err != nil {
		return result{Err: errorOf(err)}, err
	}
	var (
		res result
		err error
		l   store.Lease
	)
	switch c.Op {
	case "acquire":
		a := c.Acquire
		if a == nil {
			err = errors.New("an acquire without its request")
			break
		}
		req := a.AcquireRequest
		if req.Selector, err = labels.Parse(a.Selector); err != nil {
			break
		}
		if !a.Deadline.IsZero() {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, a.Deadline)
			defer cancel()
		}
		l, err = st.Acquire(ctx, req)
		res.Lease = &l
	case "renew":
		l, err = st.RenewAs(c.Owner, c.ID, c.TTL, c.Report)
		res.Lease = &l
	case "release":
		err = st.ReleaseAs(c.Owner, c.ID, c.Outcome, c.Domain, c.Report)
	case "get":
		if err = n.confirmLeading(); err == nil {
			l, err = st.GetAs(c.Owner, c.ID)
			res.Lease = &l
		}
	case "list":
		if err = n.confirmLeading(); err == nil {
			res.Leases, err = st.List(c.Filter)
		}
	case "putState":
		err = st.PutStateAs(c.Owner, c.ID, c.Blob)
	case "putSessionState":
		err = st.PutSessionStateAs(c.Owner, c.Scope, c.Session, c.Domain, c.Blob)
	case "sessionLeases":
		if err = n.confirmLeading(); err == nil {
			res.Leases = st.SessionLeases(c.Owner, c.Scope, c.Session)
		}
	case "forgetSession":
		st.ForgetSession(c.Owner, c.Scope, c.Session)
	default:
		err = fmt.Errorf("unknown forwarded call %q", c.Op)
	}
	if err != nil {
		res = result{Err: errorOf(err)}
	}
	return res, err
}

func leaseOf(res result) store.Lease {
	if res.Lease == nil {
		return store.Lease{}
	}
	return *res.Lease
}

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
