package upstream

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// deletedFor is how long Get reports a deleted session gone: long enough
// for the controller to see it (it polls every few seconds), short enough
// that the record stays small. After an operator restart a Proxy still
// being deleted calls Delete again, which records it anew.
const deletedFor = time.Hour

// Book is the provider side of "a Proxy is one session of a shared proxy",
// for every provider whose instance is such a session (this package's, a
// proxy network's; pkg/provider/session's, a ranged instance's): the
// instance ID is the shared proxy's address plus the session id of the
// Proxy's UID, made and parsed without a call, and the sessions deleted in
// the last hour are remembered so that Get says they are gone. It gives
// such a provider its Get, Delete and ListByTag.
type Book struct {
	provider string // for errors: "upstream provider"
	of       string // for messages: "the super proxy"
	clock    func() time.Time

	mu      sync.Mutex
	deleted map[string]time.Time // session ID -> when Delete was called
}

// NewBook returns the book of the provider named providerName, whose
// sessions are sessions of the shared proxy described by of.
func NewBook(providerName, of string) *Book {
	return &Book{provider: providerName + " provider", of: of, clock: time.Now, deleted: map[string]time.Time{}}
}

// Open returns the session of the Proxy with uid on the shared proxy at
// ep: the same Proxy always gets the same ID, so a provider's Create is
// idempotent by name as the contract asks.
func (b *Book) Open(ep crawlv1alpha1.Endpoint, uid types.UID, specHash string) (provider.Instance, error) {
	id := net.JoinHostPort(ep.Host, strconv.Itoa(int(ep.Port))) + "/" + SessionID(uid)
	inst, err := b.instanceOf(id)
	inst.SpecHash = specHash
	b.mu.Lock()
	delete(b.deleted, id) // a replace deletes and creates the same session
	b.mu.Unlock()
	return inst, err
}

// Get parses the ID back: a session is there to be used until Delete.
func (b *Book) Get(_ context.Context, id string) (provider.Instance, error) {
	b.mu.Lock()
	_, gone := b.deleted[id]
	b.mu.Unlock()
	if gone {
		return provider.Instance{}, provider.ErrNotFound
	}
	return b.instanceOf(id)
}

// Delete has nothing to call: the shared proxy keeps no state per session
// (a network lets an unused one lapse). It is remembered, so that Get says
// it is gone.
func (b *Book) Delete(_ context.Context, id string) error {
	now := b.clock()
	b.mu.Lock()
	defer b.mu.Unlock()
	for old, at := range b.deleted {
		if now.Sub(at) > deletedFor {
			delete(b.deleted, old)
		}
	}
	b.deleted[id] = now
	return nil
}

// ListByTag lists nothing: there is nothing to orphan.
func (*Book) ListByTag(context.Context, string, string) ([]provider.Instance, error) {
	return nil, nil
}

// instanceOf is the running instance of an ID "host:port/session".
func (b *Book) instanceOf(id string) (provider.Instance, error) {
	addr, session, ok := strings.Cut(id, "/")
	host, portText, err := net.SplitHostPort(addr)
	port, perr := strconv.ParseUint(portText, 10, 16)
	if !ok || err != nil || perr != nil || session == "" || port == 0 {
		return provider.Instance{}, provider.Permanent(fmt.Errorf("%s: malformed instance ID %q (want host:port/session)", b.provider, id))
	}
	return provider.Instance{
		ID: id, State: provider.StateRunning, IP: host, Port: int32(port),
		Message: "session " + session + " of " + b.of + " " + addr,
	}, nil
}
