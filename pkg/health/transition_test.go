package health

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestTransition(t *testing.T) {
	const ok, fail = true, false
	tests := map[string]struct {
		start      counters
		th         thresholds
		probes     []bool
		want       counters
		wantAfters []verdict // the verdict after each probe
	}{
		"a new proxy needs successThreshold successes": {
			th:         thresholds{success: 3, failure: 3},
			probes:     []bool{ok, ok, ok},
			wantAfters: []verdict{verdictUnknown, verdictUnknown, verdictHealthy},
			want:       counters{verdict: verdictHealthy, successes: 3},
		},
		"a new proxy needs failureThreshold failures": {
			th:         thresholds{success: 1, failure: 3},
			probes:     []bool{fail, fail, fail},
			wantAfters: []verdict{verdictUnknown, verdictUnknown, verdictUnhealthy},
			want:       counters{verdict: verdictUnhealthy, failures: 3},
		},
		"threshold 1 decides at the first probe": {
			th:         thresholds{success: 1, failure: 1},
			probes:     []bool{fail},
			wantAfters: []verdict{verdictUnhealthy},
			want:       counters{verdict: verdictUnhealthy, failures: 1},
		},
		"a success in between restarts the failure run": {
			start:      counters{verdict: verdictHealthy},
			th:         thresholds{success: 1, failure: 3},
			probes:     []bool{fail, fail, ok, fail, fail, fail},
			wantAfters: []verdict{verdictHealthy, verdictHealthy, verdictHealthy, verdictHealthy, verdictHealthy, verdictUnhealthy},
			want:       counters{verdict: verdictUnhealthy, failures: 3},
		},
		"unhealthy flips back only at successThreshold": {
			start:      counters{verdict: verdictUnhealthy, failures: 5},
			th:         thresholds{success: 2, failure: 3},
			probes:     []bool{ok, fail, ok, ok},
			wantAfters: []verdict{verdictUnhealthy, verdictUnhealthy, verdictUnhealthy, verdictHealthy},
			want:       counters{verdict: verdictHealthy, successes: 2},
		},
		"runs keep counting past the threshold": {
			start:      counters{verdict: verdictHealthy, successes: 7},
			th:         thresholds{success: 1, failure: 3},
			probes:     []bool{ok, ok},
			wantAfters: []verdict{verdictHealthy, verdictHealthy},
			want:       counters{verdict: verdictHealthy, successes: 9},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := tc.start
			var afters []verdict
			for _, probeOK := range tc.probes {
				c = transition(c, probeOK, tc.th)
				afters = append(afters, c.verdict)
			}
			if diff := cmp.Diff(tc.wantAfters, afters); diff != "" {
				t.Errorf("verdicts after each probe (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, c, cmp.AllowUnexported(counters{})); diff != "" {
				t.Errorf("final counters (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReportReason(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	healthyAt := func(latency time.Duration) *Verdict {
		return &Verdict{Address: "127.0.0.1:3128", Healthy: true, Latency: latency}
	}
	unhealthy := &Verdict{Address: "127.0.0.1:3128", Healthy: false}
	healthy := counters{verdict: verdictHealthy, successes: 1}
	// steadyAt: healthy, the last latencyPersistence probes all in latency's bucket.
	steadyAt := func(latency time.Duration) counters {
		return counters{verdict: verdictHealthy, successes: latencyPersistence, bucket: latencyBucket(latency), bucketRun: latencyPersistence}
	}
	tests := map[string]struct {
		reported *Verdict
		c        counters
		latency  time.Duration
		probeOK  bool
		since    time.Duration // from the last report to now
		want     string
	}{
		"no verdict yet":                    {c: counters{successes: 1}, probeOK: true, want: ""},
		"first verdict, healthy":            {c: healthy, probeOK: true, latency: 5 * time.Millisecond, want: reportFirstVerdict},
		"first verdict, unhealthy":          {c: counters{verdict: verdictUnhealthy, failures: 3}, want: reportFirstVerdict},
		"flip to unhealthy":                 {reported: healthyAt(5 * time.Millisecond), c: counters{verdict: verdictUnhealthy, failures: 3}, want: reportFlip},
		"flip to healthy":                   {reported: unhealthy, c: healthy, probeOK: true, want: reportFlip},
		"unchanged verdict, same latency":   {reported: healthyAt(100 * time.Millisecond), c: healthy, probeOK: true, latency: 100 * time.Millisecond, since: time.Hour, want: ""},
		"unchanged unhealthy verdict":       {reported: unhealthy, c: counters{verdict: verdictUnhealthy, failures: 9}, since: time.Hour, want: ""},
		"failure below the threshold":       {reported: healthyAt(10 * time.Millisecond), c: counters{verdict: verdictHealthy, failures: 1}, latency: 5 * time.Second, since: time.Hour, want: ""},
		"latency +49% of 100ms: immaterial": {reported: healthyAt(100 * time.Millisecond), c: steadyAt(149 * time.Millisecond), probeOK: true, latency: 149 * time.Millisecond, since: time.Hour, want: ""},
		"latency +51% of 100ms: material":   {reported: healthyAt(100 * time.Millisecond), c: steadyAt(151 * time.Millisecond), probeOK: true, latency: 151 * time.Millisecond, since: time.Hour, want: reportLatency},
		"latency -51% of 100ms: material":   {reported: healthyAt(100 * time.Millisecond), c: steadyAt(49 * time.Millisecond), probeOK: true, latency: 49 * time.Millisecond, since: time.Hour, want: reportLatency},
		"latency +19ms of 5ms: under 20ms":  {reported: healthyAt(5 * time.Millisecond), c: steadyAt(24 * time.Millisecond), probeOK: true, latency: 24 * time.Millisecond, since: time.Hour, want: ""},
		"latency +21ms of 5ms: material":    {reported: healthyAt(5 * time.Millisecond), c: steadyAt(26 * time.Millisecond), probeOK: true, latency: 26 * time.Millisecond, since: time.Hour, want: reportLatency},
		"material, but 59s after the last report": {
			reported: healthyAt(100 * time.Millisecond), c: steadyAt(time.Second), probeOK: true, latency: time.Second, since: 59 * time.Second, want: "",
		},
		"material, 60s after the last report": {
			reported: healthyAt(100 * time.Millisecond), c: steadyAt(time.Second), probeOK: true, latency: time.Second, since: time.Minute, want: reportLatency,
		},
		"material, but only two probes in the new bucket": {
			reported: healthyAt(5 * time.Millisecond), probeOK: true, latency: time.Second, since: time.Hour, want: "",
			c: counters{verdict: verdictHealthy, successes: 2, bucket: latencyBucket(time.Second), bucketRun: latencyPersistence - 1},
		},
		"one slow probe after a steady run: not persisted": {
			reported: healthyAt(5 * time.Millisecond), probeOK: true, latency: time.Second, since: time.Hour, want: "",
			c: observeLatency(steadyAt(5*time.Millisecond), time.Second, true),
		},
		"material and persisted, but the same bucket as reported": {
			reported: healthyAt(130 * time.Millisecond), c: steadyAt(250 * time.Millisecond), probeOK: true, latency: 250 * time.Millisecond, since: time.Hour, want: "",
		},
		"a flip is never rate-limited": {
			reported: healthyAt(100 * time.Millisecond), c: counters{verdict: verdictUnhealthy, failures: 3}, since: time.Second, want: reportFlip,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := reportReason(tc.reported, t0, tc.c, tc.latency, tc.probeOK, t0.Add(tc.since), time.Minute)
			if got != tc.want {
				t.Errorf("reportReason = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestObserveLatency(t *testing.T) {
	type probe struct {
		latency time.Duration
		ok      bool
	}
	tests := map[string]struct {
		probes []probe
		want   counters
	}{
		"first probe starts a run":    {probes: []probe{{3 * time.Millisecond, true}}, want: counters{bucket: 2, bucketRun: 1}},
		"same bucket extends the run": {probes: []probe{{4 * time.Millisecond, true}, {7 * time.Millisecond, true}}, want: counters{bucket: 3, bucketRun: 2}},
		"the run stops counting at the persistence": {
			probes: []probe{{5 * time.Millisecond, true}, {5 * time.Millisecond, true}, {5 * time.Millisecond, true}, {5 * time.Millisecond, true}, {5 * time.Millisecond, true}},
			want:   counters{bucket: 3, bucketRun: latencyPersistence},
		},
		"another bucket restarts the run": {probes: []probe{{5 * time.Millisecond, true}, {5 * time.Millisecond, true}, {40 * time.Millisecond, true}}, want: counters{bucket: 6, bucketRun: 1}},
		"a failed probe ends the run":     {probes: []probe{{5 * time.Millisecond, true}, {5 * time.Millisecond, true}, {0, false}}, want: counters{bucket: 3, bucketRun: 0}},
		"a run after a failure":           {probes: []probe{{5 * time.Millisecond, true}, {0, false}, {5 * time.Millisecond, true}}, want: counters{bucket: 3, bucketRun: 1}},
		"below a millisecond is bucket 0": {probes: []probe{{300 * time.Microsecond, true}}, want: counters{bucket: 0, bucketRun: 1}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var c counters
			for _, p := range tc.probes {
				c = observeLatency(c, p.latency, p.ok)
			}
			if diff := cmp.Diff(tc.want, c, cmp.AllowUnexported(counters{})); diff != "" {
				t.Errorf("counters (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLatencyBucket(t *testing.T) {
	tests := map[time.Duration]int8{
		0: 0, 999 * time.Microsecond: 0, time.Millisecond: 1, 2 * time.Millisecond: 2, 3 * time.Millisecond: 2,
		4 * time.Millisecond: 3, 127 * time.Millisecond: 7, 128 * time.Millisecond: 8, 5 * time.Second: 13,
	}
	for d, want := range tests {
		if got := latencyBucket(d); got != want {
			t.Errorf("latencyBucket(%v) = %d, want %d", d, got, want)
		}
	}
}

func TestNextDue(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	tests := map[string]struct {
		due, now time.Time
		want     time.Time
	}{
		"on time":                 {due: t0, now: t0.Add(300 * time.Millisecond), want: t0.Add(10 * time.Second)},
		"late, within a slot":     {due: t0, now: t0.Add(9 * time.Second), want: t0.Add(10 * time.Second)},
		"exactly one slot late":   {due: t0, now: t0.Add(10 * time.Second), want: t0.Add(20 * time.Second)},
		"missed slots: skipped":   {due: t0, now: t0.Add(35 * time.Second), want: t0.Add(40 * time.Second)},
		"cadence keeps its phase": {due: t0.Add(3 * time.Second), now: t0.Add(4 * time.Second), want: t0.Add(13 * time.Second)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := nextDue(tc.due, 10*time.Second, tc.now); !got.Equal(tc.want) {
				t.Errorf("nextDue = %v, want %v", got.Sub(t0), tc.want.Sub(t0))
			}
		})
	}
}
