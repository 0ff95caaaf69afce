// Package bandetect judges a response by a CrawlPolicy rule's
// banDetection: is it a ban of the IP that fetched it? It is pure: the
// gateway feeds it what it saw of a response (status, headers, the time to
// the headers, the first bytes of the body) and acts on the verdict (ends
// the lease as banned, retries on a fresh IP); the CrawlPolicy feed
// compiles each rule once to report invalid patterns by field. It knows
// nothing of leases, proxies or HTTP transport.
package bandetect

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"time"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

// Defaults of a rule without banDetection, or of its unset fields.
var DefaultStatusCodes = []int32{http.StatusUnauthorized, http.StatusForbidden, http.StatusTooManyRequests}

const (
	DefaultBodyBytes = 4096
	DefaultRetries   = 2
)

// Detector judges responses by one rule's banDetection. The zero value
// judges nothing; use Compile or Default.
type Detector struct {
	disabled  bool
	statuses  []int32
	body      []*regexp.Regexp
	bodyBytes int
	headers   []headerRule
	maxTTFB   time.Duration
	retries   int
}

type headerRule struct {
	name    string // canonical
	pattern *regexp.Regexp
}

// Default is the detector of a rule without banDetection: 401, 403 and
// 429 are bans; two retries.
func Default() *Detector {
	return &Detector{statuses: DefaultStatusCodes, bodyBytes: DefaultBodyBytes, retries: DefaultRetries}
}

// FieldError is a part of a banDetection that cannot be applied as
// written; the rest of the rule applies without it.
type FieldError struct {
	Field   string // e.g. spec.rules[2].banDetection.bodyPatterns[0]
	Message string
}

func (e FieldError) Error() string { return e.Field + ": " + e.Message }

// Compile builds the detector of spec (nil: Default), reporting under
// field (the banDetection's path) each pattern that is not RE2; those are
// left out.
func Compile(spec *crawlv1alpha1.BanDetection, field string) (*Detector, []FieldError) {
	if spec == nil {
		return Default(), nil
	}
	d := &Detector{disabled: spec.Disabled, statuses: DefaultStatusCodes, bodyBytes: DefaultBodyBytes, retries: DefaultRetries}
	if len(spec.StatusCodes) > 0 {
		d.statuses = slices.Clone(spec.StatusCodes)
	}
	if spec.BodyBytes != nil {
		d.bodyBytes = int(*spec.BodyBytes)
	}
	if spec.Retries != nil {
		d.retries = int(*spec.Retries)
	}
	if spec.MaxTimeToFirstByte != nil {
		d.maxTTFB = spec.MaxTimeToFirstByte.Duration
	}
	var errs []FieldError
	for i, p := range spec.BodyPatterns {
		re, err := regexp.Compile(p)
		if err != nil {
			errs = append(errs, FieldError{Field: fmt.Sprintf("%s.bodyPatterns[%d]", field, i), Message: "not an RE2 regular expression: " + err.Error()})
			continue
		}
		d.body = append(d.body, re)
	}
	for i, h := range spec.Headers {
		re, err := regexp.Compile(h.Pattern)
		if err != nil {
			errs = append(errs, FieldError{Field: fmt.Sprintf("%s.headers[%d].pattern", field, i), Message: "not an RE2 regular expression: " + err.Error()})
			continue
		}
		d.headers = append(d.headers, headerRule{name: http.CanonicalHeaderKey(h.Name), pattern: re})
	}
	return d, errs
}

// Retries is how many more times an idempotent request is sent on a fresh
// IP after a ban.
func (d *Detector) Retries() int {
	if d.disabled {
		return 0
	}
	return d.retries
}

// BodyBytes is how much of a body Judge needs to see: 0 when it judges no
// body, so that a caller need not hold one back.
func (d *Detector) BodyBytes() int {
	if d.disabled || len(d.body) == 0 {
		return 0
	}
	return d.bodyBytes
}

// Response is what the gateway saw of a response.
type Response struct {
	Status int
	Header http.Header
	// TimeToFirstByte is from sending the request to having the headers.
	TimeToFirstByte time.Duration
	// Body is the body's first BodyBytes bytes (fewer if it is shorter).
	Body []byte
}

// Verdict is a judgement: Banned, and why (for logs and response headers).
type Verdict struct {
	Banned bool
	Reason string
}

// Judge says whether r is a ban.
func (d *Detector) Judge(r Response) Verdict {
	if d.disabled {
		return Verdict{}
	}
	if slices.Contains(d.statuses, int32(r.Status)) {
		return Verdict{Banned: true, Reason: fmt.Sprintf("status %d", r.Status)}
	}
	if d.maxTTFB > 0 && r.TimeToFirstByte > d.maxTTFB {
		return Verdict{Banned: true, Reason: fmt.Sprintf("first byte after %s, over %s", r.TimeToFirstByte.Round(time.Millisecond), d.maxTTFB)}
	}
	for _, h := range d.headers {
		for _, v := range r.Header.Values(h.name) {
			if h.pattern.MatchString(v) {
				return Verdict{Banned: true, Reason: fmt.Sprintf("header %s matches %q", h.name, h.pattern)}
			}
		}
	}
	body := r.Body
	if len(body) > d.bodyBytes {
		body = body[:d.bodyBytes]
	}
	for _, re := range d.body {
		if re.Match(body) {
			return Verdict{Banned: true, Reason: fmt.Sprintf("body matches %q", re)}
		}
	}
	return Verdict{}
}
