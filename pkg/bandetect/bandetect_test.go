package bandetect

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

func TestJudge(t *testing.T) {
	rule := &crawlv1alpha1.BanDetection{
		StatusCodes:        []int32{403, 503},
		BodyPatterns:       []string{`cf-challenge-\w+`, `(?i)access denied`},
		BodyBytes:          ptr.To[int32](64),
		Headers:            []crawlv1alpha1.HeaderPattern{{Name: "x-block-reason", Pattern: "^bot"}},
		MaxTimeToFirstByte: &metav1.Duration{Duration: 10 * time.Second},
	}
	d, errs := Compile(rule, "spec.rules[0].banDetection")
	if errs != nil {
		t.Fatal(errs)
	}
	page := []byte("<html><title>Page 1</title></html>")
	tests := map[string]struct {
		detector *Detector
		response Response
		want     Verdict
	}{
		"a page":                    {d, Response{Status: 200, Body: page}, Verdict{}},
		"a listed status":           {d, Response{Status: 503}, Verdict{true, "status 503"}},
		"an unlisted status":        {d, Response{Status: 429}, Verdict{}},
		"a challenge in the body":   {d, Response{Status: 200, Body: []byte(`<div id="cf-challenge-platform">`)}, Verdict{true, `body matches "cf-challenge-\\w+"`}},
		"a pattern, case-blind":     {d, Response{Status: 200, Body: []byte("ACCESS DENIED")}, Verdict{true, `body matches "(?i)access denied"`}},
		"past bodyBytes: not seen":  {d, Response{Status: 200, Body: append(make([]byte, 64), "access denied"...)}, Verdict{}},
		"a header":                  {d, Response{Status: 200, Header: http.Header{"X-Block-Reason": {"bot score"}}}, Verdict{true, `header X-Block-Reason matches "^bot"`}},
		"a header that does not":    {d, Response{Status: 200, Header: http.Header{"X-Block-Reason": {"none"}}}, Verdict{}},
		"slow to start":             {d, Response{Status: 200, TimeToFirstByte: 11 * time.Second}, Verdict{true, "first byte after 11s, over 10s"}},
		"default: 401, 403, 429":    {Default(), Response{Status: 429}, Verdict{true, "status 429"}},
		"default: a page is a page": {Default(), Response{Status: 200, Body: []byte("access denied")}, Verdict{}},
		"default: 404 is no ban":    {Default(), Response{Status: 404}, Verdict{}},
		"disabled":                  {mustCompile(t, &crawlv1alpha1.BanDetection{Disabled: true}), Response{Status: 403}, Verdict{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.detector.Judge(tc.response)); diff != "" {
				t.Errorf("Judge (-want +got):\n%s", diff)
			}
		})
	}
}

func mustCompile(t *testing.T, spec *crawlv1alpha1.BanDetection) *Detector {
	t.Helper()
	d, errs := Compile(spec, "x")
	if errs != nil {
		t.Fatal(errs)
	}
	return d
}

func TestCompileReportsInvalidPatternsByField(t *testing.T) {
	d, errs := Compile(&crawlv1alpha1.BanDetection{
		BodyPatterns: []string{"ok", "(unclosed"},
		Headers:      []crawlv1alpha1.HeaderPattern{{Name: "X-A", Pattern: "a"}, {Name: "X-B", Pattern: "*"}},
	}, "spec.default.banDetection")
	var fields []string
	for _, e := range errs {
		fields = append(fields, e.Field)
	}
	if diff := cmp.Diff([]string{"spec.default.banDetection.bodyPatterns[1]", "spec.default.banDetection.headers[1].pattern"}, fields); diff != "" {
		t.Errorf("fields (-want +got):\n%s", diff)
	}
	// The valid parts apply.
	if !d.Judge(Response{Status: 200, Body: []byte("ok")}).Banned || !d.Judge(Response{Status: 200, Header: http.Header{"X-A": {"a"}}}).Banned {
		t.Error("the valid pattern and header were dropped with the invalid ones")
	}
}

func TestRetriesAndBodyBytes(t *testing.T) {
	for name, tc := range map[string]struct {
		spec               *crawlv1alpha1.BanDetection
		retries, bodyBytes int
	}{
		"default":            {nil, 2, 0},
		"patterns":           {&crawlv1alpha1.BanDetection{BodyPatterns: []string{"x"}}, 2, DefaultBodyBytes},
		"set":                {&crawlv1alpha1.BanDetection{Retries: ptr.To[int32](0), BodyBytes: ptr.To[int32](10), BodyPatterns: []string{"x"}}, 0, 10},
		"disabled: no retry": {&crawlv1alpha1.BanDetection{Disabled: true, BodyPatterns: []string{"x"}}, 0, 0},
		"bodyBytes unneeded": {&crawlv1alpha1.BanDetection{BodyBytes: ptr.To[int32](10)}, 2, 0},
	} {
		t.Run(name, func(t *testing.T) {
			d := mustCompile(t, tc.spec)
			if d.Retries() != tc.retries || d.BodyBytes() != tc.bodyBytes {
				t.Errorf("Retries %d, BodyBytes %d; want %d, %d", d.Retries(), d.BodyBytes(), tc.retries, tc.bodyBytes)
			}
		})
	}
}
