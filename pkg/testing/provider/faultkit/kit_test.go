package faultkit

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
)

// toyError is the toy cloud's error answer.
type toyError struct {
	Status int
	Code   string
}

var (
	errBusy    = toyError{503, "busy"}
	errSlow    = toyError{429, "slow"}
	errLost    = toyError{500, "acted"}
	errInvalid = toyError{400, "invalid"}
)

// toy is a cloud of one operation per path ("/create", "/fail": an effect
// that fails), counting the effects that took place.
type toy struct {
	*Kit[string, toyError]
	mu      sync.Mutex
	effects int
}

func newToy(t *testing.T, lost *toyError) *toy {
	c := &toy{}
	c.Kit = New(t, http.HandlerFunc(c.serve), Cloud[string, toyError]{
		Write: func(w http.ResponseWriter, _ *Call[string], a Answer[toyError]) {
			if a.Err != nil {
				if a.RetryAfter > 0 {
					w.Header().Set("Retry-After", strconv.Itoa(int(a.RetryAfter.Seconds())))
				}
				w.WriteHeader(a.Err.Status)
				_, _ = io.WriteString(w, a.Err.Code)
				return
			}
			w.WriteHeader(a.Status)
			_, _ = fmt.Fprint(w, a.Body)
		},
		RateLimited: errSlow,
		Denied: func(_ *Call[string], d Denial) toyError {
			return toyError{403, fmt.Sprintf("denied %d %s", d.Reason, d.Permission)}
		},
		Random: func(op string) []Fault[toyError] {
			return []Fault[toyError]{Error(errBusy), {Lose: true}, {NoCapacity: true}}
		},
		Lost: lost,
	})
	return c
}

func (c *toy) serve(w http.ResponseWriter, r *http.Request) {
	call := &Call[string]{Op: r.URL.Path, Token: r.Header.Get("Token"), Scope: r.Header.Get("Scope")}
	if need := r.Header.Get("Needs"); need != "" {
		call.Needs = strings.Split(need, ",")
	}
	c.Serve(w, r, call, func(call *Call[string]) Answer[toyError] {
		c.mu.Lock()
		defer c.mu.Unlock()
		if call.NoCapacity {
			return Fail(toyError{409, "no capacity"})
		}
		if r.URL.Path == "/fail" {
			return Fail(errInvalid)
		}
		c.effects++
		return Answer[toyError]{Status: 200, Body: "done"}
	})
}

func (c *toy) effectsSoFar() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.effects
}

// call is one request's answer as the client sees it: "status body", or
// "no answer" when the connection dropped.
func call(t *testing.T, c *toy, path string, header ...string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Client().Do(req)
	if err != nil {
		return "no answer"
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		return fmt.Sprintf("%d %s after %s", resp.StatusCode, body, ra)
	}
	return fmt.Sprintf("%d %s", resp.StatusCode, body)
}

func TestFaultsAnswerBeforeOrAfterTheEffect(t *testing.T) {
	for name, tc := range map[string]struct {
		lost    *toyError
		arrange func(*toy)
		paths   []string
		want    []string
		effects int
	}{
		"FailNext answers its errors in order, before any effect": {
			arrange: func(c *toy) { c.FailNext("/create", errBusy, errSlow) },
			paths:   []string{"/create", "/create", "/create"},
			want:    []string{"503 busy", "429 slow", "200 done"}, effects: 1,
		},
		"FailEvery fails every call until StopFailing": {
			arrange: func(c *toy) { c.FailEvery("/create", errBusy) },
			paths:   []string{"/create", "/create"},
			want:    []string{"503 busy", "503 busy"},
		},
		"RateLimitNext answers the cloud's rate limit with its wait": {
			arrange: func(c *toy) { c.RateLimitNext("/create", 3*time.Second) },
			paths:   []string{"/create"},
			want:    []string{"429 slow after 3"},
		},
		"a lost answer drops the connection after the effect": {
			arrange: func(c *toy) { c.LoseNextAnswers("/create", 1) },
			paths:   []string{"/create", "/create"},
			want:    []string{"no answer", "200 done"}, effects: 2,
		},
		"a lost answer is the cloud's error when it sets one": {
			lost:    &errLost,
			arrange: func(c *toy) { c.LoseNextAnswers("/create", 1) },
			paths:   []string{"/create"},
			want:    []string{"500 acted"}, effects: 1,
		},
		"a failed call loses no answer: it took no effect to hide": {
			arrange: func(c *toy) { c.LoseNextAnswers("/fail", 1) },
			paths:   []string{"/fail"},
			want:    []string{"400 invalid"},
		},
		"an unknown token is refused once a grant is made": {
			arrange: func(c *toy) { c.Grant("good", Credential{}) },
			paths:   []string{"/create"},
			want:    []string{"403 denied 1 "},
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := newToy(t, tc.lost)
			tc.arrange(c)
			var got []string
			for _, p := range tc.paths {
				got = append(got, call(t, c, p))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("answers (-want +got):\n%s", diff)
			}
			if n := c.effectsSoFar(); n != tc.effects {
				t.Errorf("%d effects, want %d", n, tc.effects)
			}
			if n := c.Calls(tc.paths[0]); n != len(tc.paths) {
				t.Errorf("Calls = %d, want %d", n, len(tc.paths))
			}
		})
	}
}

func TestEarlyCallsCountsCallsBeforeTheRetryAfterRanOut(t *testing.T) {
	c := newToy(t, nil)
	c.RateLimitNext("/create", time.Hour)
	call(t, c, "/create")
	call(t, c, "/other")
	call(t, c, "/create")
	if n := c.EarlyCalls(); n != 2 {
		t.Errorf("EarlyCalls = %d, want 2", n)
	}
}

func TestHeldAnswerArrivesOnRelease(t *testing.T) {
	c := newToy(t, nil)
	release := c.HoldAnswers("/create")
	answer := make(chan string)
	go func() { answer <- call(t, c, "/create") }()
	// The effect lands before the answer is held.
	eventually.Check(t, 10*time.Second, time.Millisecond, "the held call's effect", eventually.Holds(func() (bool, string) {
		return c.effectsSoFar() == 1, fmt.Sprintf("%d effects", c.effectsSoFar())
	}))
	select {
	case got := <-answer:
		t.Fatalf("answer %q arrived while held", got)
	default:
	}
	release()
	if got := <-answer; got != "200 done" {
		t.Errorf("released answer %q, want 200 done", got)
	}
}

func TestCredentialScopesAndPermissions(t *testing.T) {
	c := newToy(t, nil)
	c.Grant("rg-token", Credential{Permissions: []string{"vm/write", "vm/read"}, Scopes: []string{"/subscriptions/s/resourceGroups/Crawl"}})
	for name, tc := range map[string]struct {
		scope, needs, want string
	}{
		"in the group, permitted":            {"/subscriptions/s/resourceGroups/crawl/vm/x", "vm/write", "200 done"},
		"the group itself, case ignored":     {"/SUBSCRIPTIONS/s/resourceGroups/crawl", "vm/read", "200 done"},
		"another group":                      {"/subscriptions/s/resourceGroups/crawler", "vm/read", "403 denied 2 "},
		"a permission the credential lacks":  {"/subscriptions/s/resourceGroups/crawl", "vm/read,vm/delete", "403 denied 3 vm/delete"},
		"outside any group: the whole scope": {"/subscriptions/s", "vm/read", "403 denied 2 "},
	} {
		t.Run(name, func(t *testing.T) {
			if got := call(t, c, "/create", "Token", "rg-token", "Scope", tc.scope, "Needs", tc.needs); got != tc.want {
				t.Errorf("answer %q, want %q", got, tc.want)
			}
		})
	}
	if diff := cmp.Diff([]string{"vm/read", "vm/write"}, c.UsedPermissions()); diff != "" {
		t.Errorf("UsedPermissions (-want +got):\n%s", diff)
	}
}

func TestRandomFaultsAreDrawnFromTheSeedAndStop(t *testing.T) {
	answers := func() map[string]int {
		c := newToy(t, nil)
		c.SetRandomFaults(0.5, 7)
		seen := map[string]int{}
		for range 200 {
			seen[call(t, c, "/create")]++
		}
		c.SetRandomFaults(0, 0)
		if got := call(t, c, "/create"); got != "200 done" {
			t.Errorf("after the faults stopped: %q", got)
		}
		return seen
	}
	first, second := answers(), answers()
	if diff := cmp.Diff(first, second); diff != "" {
		t.Errorf("the same seed drew other faults (-first +second):\n%s", diff)
	}
	for _, want := range []string{"200 done", "503 busy", "no answer", "409 no capacity"} {
		if first[want] == 0 {
			t.Errorf("200 calls at rate 0.5 never answered %q: %v", want, first)
		}
	}
}

func TestNoCapacity(t *testing.T) {
	c := newToy(t, nil)
	c.SetNoCapacity("cx22", true)
	c.SetNoCapacityAs("B1s", "AllocationFailed")
	c.SetNoCapacityAs("B2s", "AllocationFailed")
	c.SetNoCapacityAs("B2s", "")
	got := map[string]string{}
	for _, key := range []string{"cx22", "B1s", "B2s", "cpx11"} {
		how, none := c.NoCapacity(key)
		got[key] = fmt.Sprint(how, " ", none)
	}
	want := map[string]string{"cx22": "none true", "B1s": "AllocationFailed true", "B2s": " false", "cpx11": " false"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("NoCapacity (-want +got):\n%s", diff)
	}
}

func TestLagHidesFromTheFirstReads(t *testing.T) {
	var l Lag
	l.Hide(2)
	var got []bool
	for range 3 {
		got = append(got, l.Shown())
	}
	if diff := cmp.Diff([]bool{false, false, true}, got); diff != "" {
		t.Errorf("Shown (-want +got):\n%s", diff)
	}
}
