package gcetest

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
)

// Faults that are not programmed per call: random ones, the way Compute
// Engine fails under load, and answers lost after the call took effect.
// Both wrap a method's handler (withFaults), so every method has them.

// randomFaults fail a share of all calls.
type randomFaults struct {
	rate float64
	rng  *rand.Rand
}

// SetRandomFaults makes a share rate of all calls fail, chosen by a
// generator seeded with seed: rate limited (403 rateLimitExceeded) or
// failing (503 backendError) before they take effect, or taking effect and
// then answering 503 (a lost answer). rate 0 stops them.
func (s *Server) SetRandomFaults(rate float64, seed uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rate <= 0 {
		s.random = nil
		return
	}
	s.random = &randomFaults{rate: rate, rng: rand.New(rand.NewPCG(seed, 0))}
}

// LoseNextAnswers makes the next n calls of m take effect and then answer
// 503 backendError, as when the answer is lost on its way back.
func (s *Server) LoseNextAnswers(m Method, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lostAnswers[m] += n
}

// draw decides one call's fault (under s.mu): an error to answer instead
// of acting (before), or to lose the answer after acting (lose).
func (s *Server) draw(m Method) (before *APIError, lose bool) {
	if s.lostAnswers[m] > 0 {
		s.lostAnswers[m]--
		return nil, true
	}
	f := s.random
	if f == nil || f.rng.Float64() >= f.rate {
		return nil, false
	}
	switch f.rng.IntN(3) {
	case 0:
		return RateLimitExceeded(), false
	case 1:
		return BackendError(), false
	default:
		return nil, true
	}
}

// withFaults serves m through h, with the fault draw decides.
func (s *Server) withFaults(m Method, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		before, lose := s.draw(m)
		s.mu.Unlock()
		switch {
		case before != nil:
			writeError(w, before)
		case lose:
			rec := httptest.NewRecorder()
			h(rec, r)
			if rec.Code >= 300 { // it failed anyway: that answer is what arrives
				copyRecorded(w, rec)
				return
			}
			writeError(w, BackendError())
		default:
			h(w, r)
		}
	}
}

func copyRecorded(w http.ResponseWriter, rec *httptest.ResponseRecorder) {
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}
