package faultkit

import (
	"crypto/x509"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Cloud is how one cloud answers, for the faults the kit serves: Op names
// the cloud's API operations, E is its error answer.
type Cloud[Op comparable, E any] struct {
	// TLS serves the API over TLS (Kit.Client trusts its certificate).
	TLS bool
	// Write sends an answer in the cloud's wire format: a.Err when it is
	// set (with a.RetryAfter, if the cloud sends one), else a's status,
	// headers and body.
	Write func(w http.ResponseWriter, c *Call[Op], a Answer[E])
	// RateLimited is the cloud's rate-limit error (RateLimitNext).
	RateLimited E
	// Denied is the cloud's answer to a call its credential does not allow
	// (Grant).
	Denied func(c *Call[Op], d Denial) E
	// Random are the faults a call of op meets at random, one drawn with
	// equal chance (SetRandomFaults). List one twice to make it likelier.
	Random func(op Op) []Fault[E]
	// Lost is the answer that arrives instead of a lost one: nil drops the
	// connection; a cloud whose front end answers for its back end (an
	// InternalError after the effect) sets that error.
	Lost *E
	// Boot runs what an instance would (Kit.Boot); nil runs nothing.
	Boot BootFunc
}

// Call is one API call, as the fake describes it to Serve.
type Call[Op comparable] struct {
	Op Op
	// Token is the credential the call presents, Scope where it acts (a
	// project, a resource group), Needs the permissions it needs: checked
	// against the grants when the fake made any (Grant).
	Token, Scope string
	Needs        []string
	// Seq numbers the calls the kit served, from 1 (a request ID).
	Seq int
	// NoCapacity: a random fault took the capacity of this call's create
	// away; the fake answers as its cloud does without capacity, at the
	// point the cloud judges capacity.
	NoCapacity bool
}

// Answer is what a call's effect answers: an error, or a status, headers
// and a body for the cloud's Write.
type Answer[E any] struct {
	Status int
	Header http.Header
	Body   any
	Err    *E
	// RetryAfter is the wait a rate-limit error asks for (RateLimitNext).
	RetryAfter time.Duration
}

// Fail is the answer e.
func Fail[E any](e E) Answer[E] { return Answer[E]{Err: &e} }

// Fault is one fault a call can meet at random (Cloud.Random): Err
// answered before any effect, or Lose (the call takes effect and its
// answer is lost), or NoCapacity (Call.NoCapacity).
type Fault[E any] struct {
	Err        *E
	Lose       bool
	NoCapacity bool
}

// Error is the fault of answering e before any effect.
func Error[E any](e E) Fault[E] { return Fault[E]{Err: &e} }

// queued is an error FailNext or RateLimitNext put in line, with the wait
// its Retry-After asks for.
type queued[E any] struct {
	err  E
	wait time.Duration
}

// Kit is the fault layer of one fake, and the server of its API on
// loopback; a fake embeds it, so its methods are the fake's. They are safe
// for concurrent use.
type Kit[Op comparable, E any] struct {
	// URL is where the fake serves its API (the SDK's endpoint).
	URL string

	cloud    Cloud[Op, E]
	srv      *httptest.Server
	machines *machines

	mu     sync.Mutex
	seq    int
	calls  map[Op]int
	queued map[Op][]queued[E]
	every  map[Op]E
	lost   map[Op]int
	holds  map[Op]chan struct{}
	noCap  map[string]string
	access access
	random *rand.Rand
	rate   float64
	// notBefore is when the wait of the last RateLimitNext runs out;
	// early counts the calls that came before.
	notBefore time.Time
	early     int
}

// New serves api on 127.0.0.1 until the test ends, as a cloud that
// answers as c says; api routes each call through Serve.
func New[Op comparable, E any](t testing.TB, api http.Handler, c Cloud[Op, E]) *Kit[Op, E] {
	k := &Kit[Op, E]{
		cloud: c, calls: map[Op]int{}, queued: map[Op][]queued[E]{}, every: map[Op]E{},
		lost: map[Op]int{}, holds: map[Op]chan struct{}{}, noCap: map[string]string{},
		access: access{grants: map[string]Credential{}, used: map[string]bool{}},
	}
	k.machines = newMachines(t, c.Boot)
	if c.TLS {
		k.srv = httptest.NewTLSServer(api)
	} else {
		k.srv = httptest.NewServer(api)
	}
	t.Cleanup(k.srv.Close)
	k.URL = k.srv.URL
	return k
}

// Client is an HTTP client that reaches the fake (and trusts its
// certificate when it serves TLS).
func (k *Kit[Op, E]) Client() *http.Client { return k.srv.Client() }

// Certificate is the certificate the fake serves TLS with (Cloud.TLS).
func (k *Kit[Op, E]) Certificate() *x509.Certificate { return k.srv.Certificate() }

// Boot starts what the instance id runs, from b (Cloud.Boot), unless it
// runs already.
func (k *Kit[Op, E]) Boot(id string, b Boot) { k.machines.Start(id, b) }

// Halt stops what the instance id runs, if anything does.
func (k *Kit[Op, E]) Halt(id string) { k.machines.Halt(id) }

// Serve answers one call: it counts it, refuses it when its credential
// does not allow it, answers a fault due before any effect, and otherwise
// runs do, the call's effect, which the fake runs under its own lock. Then
// it loses the answer when asked to (only an answer of success: a failed
// call took no effect to hide), or holds it until the test releases it or
// the client goes away (an operator killed mid-call), and writes it.
func (k *Kit[Op, E]) Serve(w http.ResponseWriter, r *http.Request, c *Call[Op], do func(c *Call[Op]) Answer[E]) {
	k.mu.Lock()
	k.seq++
	c.Seq = k.seq
	k.calls[c.Op]++
	if time.Now().Before(k.notBefore) {
		k.early++
	}
	if d, denied := k.deny(c); denied {
		k.mu.Unlock()
		e := k.cloud.Denied(c, d)
		k.cloud.Write(w, c, Answer[E]{Err: &e})
		return
	}
	before, randomLose := k.before(c)
	k.mu.Unlock()
	if before != nil {
		k.cloud.Write(w, c, *before)
		return
	}

	a := do(c)

	k.mu.Lock()
	lose := a.Err == nil && (randomLose || k.lost[c.Op] > 0)
	if lose && !randomLose {
		k.lost[c.Op]--
	}
	hold := k.holds[c.Op]
	k.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
			return
		}
	}
	switch {
	case lose && k.cloud.Lost == nil:
		dropConnection(w)
	case lose:
		k.cloud.Write(w, c, Answer[E]{Err: k.cloud.Lost})
	default:
		k.cloud.Write(w, c, a)
	}
}

// before is the fault a call meets before its effect (under k.mu): a
// queued error, a standing one, or a random draw, which may instead lose
// its answer or take its capacity away.
func (k *Kit[Op, E]) before(c *Call[Op]) (a *Answer[E], lose bool) {
	if q := k.queued[c.Op]; len(q) > 0 {
		k.queued[c.Op] = q[1:]
		if q[0].wait > 0 {
			k.notBefore, k.early = time.Now().Add(q[0].wait), 0
		}
		return &Answer[E]{Err: &q[0].err, RetryAfter: q[0].wait}, false
	}
	if e, ok := k.every[c.Op]; ok {
		return &Answer[E]{Err: &e}, false
	}
	if k.random == nil || k.random.Float64() >= k.rate {
		return nil, false
	}
	faults := k.cloud.Random(c.Op)
	f := faults[k.random.IntN(len(faults))]
	c.NoCapacity = f.NoCapacity
	if f.Err != nil {
		return &Answer[E]{Err: f.Err}, false
	}
	return nil, f.Lose
}

// SetRateLimit sets the headers an API limited by a bucket (Hetzner's,
// DigitalOcean's) sends with every answer: RateLimit-Limit, -Remaining and
// -Reset, wait from now; an empty bucket (remaining 0) also sends the wait
// as Retry-After.
func SetRateLimit(h http.Header, limit, remaining int, wait time.Duration) {
	h.Set("RateLimit-Limit", strconv.Itoa(limit))
	h.Set("RateLimit-Remaining", strconv.Itoa(remaining))
	h.Set("RateLimit-Reset", strconv.FormatInt(time.Now().Add(wait).Unix(), 10))
	if remaining == 0 {
		h.Set("Retry-After", strconv.Itoa(int(wait.Seconds())))
	}
}

// dropConnection closes the client's connection without an answer.
func dropConnection(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

// FailNext answers the next len(errs) calls of op with errs, in order,
// before any effect.
func (k *Kit[Op, E]) FailNext(op Op, errs ...E) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, e := range errs {
		k.queued[op] = append(k.queued[op], queued[E]{err: e})
	}
}

// FailEvery answers every call of op with e, before any effect, until
// StopFailing(op).
func (k *Kit[Op, E]) FailEvery(op Op, e E) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.every[op] = e
}

// StopFailing ends FailEvery(op).
func (k *Kit[Op, E]) StopFailing(op Op) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.every, op)
}

// RateLimitNext answers the next call of op with the cloud's rate-limit
// error asking to wait retryAfter (Answer.RetryAfter, which the cloud's
// Write sends as Retry-After), and from then counts the calls of any
// operation that arrive before it ran out (EarlyCalls).
func (k *Kit[Op, E]) RateLimitNext(op Op, retryAfter time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.queued[op] = append(k.queued[op], queued[E]{err: k.cloud.RateLimited, wait: retryAfter})
}

// EarlyCalls is how many calls arrived before the Retry-After of the last
// 429 RateLimitNext made ran out.
func (k *Kit[Op, E]) EarlyCalls() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.early
}

// LoseNextAnswers makes the next n calls of op that take effect lose
// their answer (Cloud.Lost): the cloud did it, the client never hears.
func (k *Kit[Op, E]) LoseNextAnswers(op Op, n int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.lost[op] += n
}

// HoldAnswers makes the calls of op take effect and hold their answer
// until release is called or the client goes away.
func (k *Kit[Op, E]) HoldAnswers(op Op) (release func()) {
	k.mu.Lock()
	defer k.mu.Unlock()
	ch := make(chan struct{})
	k.holds[op] = ch
	var once sync.Once
	return func() {
		once.Do(func() {
			k.mu.Lock()
			defer k.mu.Unlock()
			delete(k.holds, op)
			close(ch)
		})
	}
}

// SetNoCapacity makes the cloud out of capacity for key (an instance type,
// a size, a subnet: what the fake's create asks NoCapacity about), or
// gives it back (none false).
func (k *Kit[Op, E]) SetNoCapacity(key string, none bool) {
	how := ""
	if none {
		how = "none"
	}
	k.SetNoCapacityAs(key, how)
}

// SetNoCapacityAs is SetNoCapacity saying how the cloud shows it (an
// error code the fake answers, such as Azure's AllocationFailed); ""
// gives the capacity back.
func (k *Kit[Op, E]) SetNoCapacityAs(key, how string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if how == "" {
		delete(k.noCap, key)
		return
	}
	k.noCap[key] = how
}

// NoCapacity reports whether key is out of capacity, and how SetNoCapacityAs
// said it shows ("none" for SetNoCapacity).
func (k *Kit[Op, E]) NoCapacity(key string) (how string, none bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	how, none = k.noCap[key]
	return how, none
}

// SetRandomFaults makes a share rate of all calls meet one of their
// operation's Cloud.Random faults, drawn by a generator seeded with seed.
// Rate 0 stops them.
func (k *Kit[Op, E]) SetRandomFaults(rate float64, seed uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if rate <= 0 {
		k.random = nil
		return
	}
	k.rate, k.random = rate, rand.New(rand.NewPCG(seed, 0))
}

// Calls is how many calls of op the fake received, refused and failed
// ones included.
func (k *Kit[Op, E]) Calls(op Op) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.calls[op]
}
