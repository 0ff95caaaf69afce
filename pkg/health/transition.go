package health

import (
	"math/bits"
	"time"
)

// verdict is the engine's opinion of a proxy.
type verdict int8

const (
	// verdictUnknown: not enough probes yet to reach either threshold.
	verdictUnknown verdict = iota
	verdictHealthy
	verdictUnhealthy
)

func (v verdict) String() string {
	switch v {
	case verdictHealthy:
		return "healthy"
	case verdictUnhealthy:
		return "unhealthy"
	default:
		return "unknown"
	}
}

// counters are a proxy's verdict and its current runs of probe results.
type counters struct {
	verdict   verdict
	successes int // consecutive successful probes
	failures  int // consecutive failed probes
	// bucket is the latency bucket (latencyBucket) that the last bucketRun
	// successful probes agreed on.
	bucket    int8
	bucketRun uint8
}

// thresholds are spec.healthCheck's successThreshold and failureThreshold.
type thresholds struct {
	success, failure int
}

// transition counts one probe result. The verdict flips only when a run
// reaches its threshold, and a first verdict needs the threshold too: a new
// proxy is healthy after `success` successes, unhealthy after `failure`
// failures.
func transition(c counters, ok bool, th thresholds) counters {
	if ok {
		c.successes++
		c.failures = 0
		if c.verdict != verdictHealthy && c.successes >= th.success {
			c.verdict = verdictHealthy
		}
		return c
	}
	c.failures++
	c.successes = 0
	if c.verdict != verdictUnhealthy && c.failures >= th.failure {
		c.verdict = verdictUnhealthy
	}
	return c
}

// latencyBucket is a latency's logarithmic bucket: 0 below 1ms, then one
// bucket per doubling of the milliseconds (1, 2-3, 4-7, 8-15, ...).
func latencyBucket(d time.Duration) int8 {
	if d <= 0 {
		return 0
	}
	return int8(bits.Len64(uint64(d / time.Millisecond)))
}

// latencyPersistence is how many successive successful probes must agree on
// a latency bucket before a change to it is worth a status write: one slow
// probe on a busy machine is not news for a person reading kubectl get px.
// Five, not three (docs/decisions/0123-latency-change-persists-over-five-probes.md): on a loaded machine a loopback probe's
// latency spreads over four or five buckets, a quarter of the probes in the
// bucket next to the modal one: three in a row there come about once in 70
// probes, five about once in 1,300, and a real change still shows within
// five intervals (2.5 minutes at the default 30s).
const latencyPersistence = 5

// observeLatency counts a probe into the run of successful probes that
// agree on a latency bucket; a failed probe ends the run.
func observeLatency(c counters, latency time.Duration, ok bool) counters {
	if !ok {
		c.bucketRun = 0
		return c
	}
	b := latencyBucket(latency)
	if c.bucketRun > 0 && c.bucket == b {
		if c.bucketRun < latencyPersistence {
			c.bucketRun++
		}
		return c
	}
	c.bucket, c.bucketRun = b, 1
	return c
}

// Why a verdict is reported to the controller.
const (
	reportFirstVerdict = "first_verdict"
	reportFlip         = "flip"
	reportLatency      = "latency_change"
	reportExitIP       = "exit_ip_change"
	reportLease        = "lease_check_change"
)

// minLatencyChange is the smallest latency change worth a status write.
const minLatencyChange = 20 * time.Millisecond

// reportReason decides whether the verdict after a probe is worth a status
// write, and why; "" means no. reported is the last reported snapshot (nil
// if none) and reportedAt when it was reported. Reported are: a first
// verdict, a flip, and, for a healthy proxy, a latency that moved to another
// bucket by more than max(20ms, half the reported latency) and stayed in
// that bucket for latencyPersistence probes, at most once per minInterval.
// Anything else (a probe agreeing with the verdict, a failure below the
// threshold) is silent, so a steady fleet causes no writes.
func reportReason(reported *Verdict, reportedAt time.Time, c counters, latency time.Duration, probeOK bool, now time.Time, minInterval time.Duration) string {
	switch {
	case c.verdict == verdictUnknown:
		return ""
	case reported == nil:
		return reportFirstVerdict
	case reported.Healthy != (c.verdict == verdictHealthy):
		return reportFlip
	case c.verdict != verdictHealthy || !probeOK:
		return ""
	}
	change := latency - reported.Latency
	if change < 0 {
		change = -change
	}
	persisted := c.bucketRun >= latencyPersistence && c.bucket == latencyBucket(latency) && c.bucket != latencyBucket(reported.Latency)
	if !persisted || change <= max(minLatencyChange, reported.Latency/2) || now.Sub(reportedAt) < minInterval {
		return ""
	}
	return reportLatency
}

// exitIPChanged: a healthy proxy's successful probe saw another exit IP
// (or country) than the one reported. Always worth a write, without the
// latency's persistence: a pool re-rolls a member whose exit IP another
// has, or whose country is not the one asked for, and the IP a lease would
// get is what kubectl get shows.
// leaseCheckChanged: a healthy proxy's instance started or stopped checking
// lease credentials (a new key, a restart without one).
func leaseCheckChanged(reported *Verdict, c counters, r Result) bool {
	return reported != nil && reported.Healthy && c.verdict == verdictHealthy && r.OK && r.Lease != reported.Lease
}

func exitIPChanged(reported *Verdict, c counters, r Result) bool {
	return reported != nil && reported.Healthy && c.verdict == verdictHealthy && r.OK &&
		(r.ExitIP != reported.ExitIP || r.ExitCountry != reported.ExitCountry)
}
