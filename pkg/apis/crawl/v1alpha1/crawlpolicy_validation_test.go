package v1alpha1_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
)

// Two tiers of the examples: a pool of own VMs, then a proxy network's.
const (
	ownVMs      = `{name: own-vms, selector: {matchLabels: {crawl.proxyfleet.io/pool: own-vms}}}`
	residential = `{name: residential, selector: {matchLabels: {crawl.proxyfleet.io/pool: residential}}}`
)

// TestCrawlPolicyValidation sends one spec per schema rule to the real API
// server: each bad one is refused with a message naming the field; the
// good ones are accepted.
func TestCrawlPolicyValidation(t *testing.T) {
	env := apiServer.Get(t)
	policies := versioned.NewForConfigOrDie(env.Config).CrawlV1alpha1().CrawlPolicies(newNamespace(t))
	for name, tc := range map[string]struct {
		spec      string
		wantField string // "" : accepted
	}{
		"rules and default":         {spec: `{rules: [{host: shop.example, maxConcurrent: 3}, {host: "*.example.com", minInterval: 200ms}], default: {maxConcurrent: 20}}`},
		"default only":              {spec: `{default: {minIntervalPerProxy: 5s}}`},
		"empty":                     {spec: `{}`, wantField: "spec"},
		"rule without limits":       {spec: `{rules: [{host: shop.example}]}`, wantField: "spec.rules[0]"},
		"host with a port":          {spec: `{rules: [{host: "shop.example:443", maxConcurrent: 1}]}`, wantField: "spec.rules[0].host"},
		"host upper case":           {spec: `{rules: [{host: Shop.Example, maxConcurrent: 1}]}`, wantField: "spec.rules[0].host"},
		"wildcard inside":           {spec: `{rules: [{host: "a.*.example", maxConcurrent: 1}]}`, wantField: "spec.rules[0].host"},
		"maxConcurrent zero":        {spec: `{rules: [{host: shop.example, maxConcurrent: 0}]}`, wantField: "spec.rules[0].maxConcurrent"},
		"minInterval too long":      {spec: `{rules: [{host: shop.example, minInterval: 48h}]}`, wantField: "spec.rules[0].minInterval"},
		"host twice":                {spec: `{rules: [{host: a.example, maxConcurrent: 1}, {host: a.example, maxConcurrent: 2}]}`, wantField: "spec.rules[1]"},
		"ban detection only":        {spec: `{rules: [{host: shop.example, banDetection: {statusCodes: [403], bodyPatterns: [challenge], headers: [{name: X-Block, pattern: "."}], maxTimeToFirstByte: 20s, retries: 3}}]}`},
		"default ban detection off": {spec: `{default: {banDetection: {disabled: true}}}`},
		"ban status not a status":   {spec: `{rules: [{host: shop.example, banDetection: {statusCodes: [403, 99]}}]}`, wantField: "spec.rules[0].banDetection.statusCodes[1]"},
		"ban status twice":          {spec: `{rules: [{host: shop.example, banDetection: {statusCodes: [403, 403]}}]}`, wantField: "spec.rules[0].banDetection.statusCodes[1]"},
		"ban pattern too long":      {spec: `{default: {banDetection: {bodyPatterns: ["` + strings.Repeat("a", 257) + `"]}}}`, wantField: "spec.default.banDetection.bodyPatterns[0]"},
		"ban body bytes too many":   {spec: `{default: {banDetection: {bodyBytes: 65537}}}`, wantField: "spec.default.banDetection.bodyBytes"},
		"ban header name a phrase":  {spec: `{default: {banDetection: {headers: [{name: "X Block", pattern: "."}]}}}`, wantField: "spec.default.banDetection.headers[0].name"},
		"ban header twice":          {spec: `{default: {banDetection: {headers: [{name: X-A, pattern: "."}, {name: X-A, pattern: "b"}]}}}`, wantField: "spec.default.banDetection.headers[1]"},
		"ban time too short":        {spec: `{default: {banDetection: {maxTimeToFirstByte: 1ms}}}`, wantField: "spec.default.banDetection.maxTimeToFirstByte"},
		"ban retries too many":      {spec: `{default: {banDetection: {retries: 6}}}`, wantField: "spec.default.banDetection.retries"},
		"tiers only":                {spec: `{default: {tiers: [` + ownVMs + `, ` + residential + `], tiering: {window: 2m, banRateThreshold: "0.5", minOutcomes: 5, quietPeriod: 10m, probeShare: ".05"}}}`},
		"one tier":                  {spec: `{default: {tiers: [` + ownVMs + `]}}`, wantField: "spec.default.tiers"},
		"tier name twice":           {spec: `{rules: [{host: shop.example, tiers: [` + ownVMs + `, ` + ownVMs + `]}]}`, wantField: "spec.rules[0].tiers"},
		"tiering without tiers":     {spec: `{default: {maxConcurrent: 1, tiering: {minOutcomes: 5}}}`, wantField: "spec.default"},
		"ban rate of one":           {spec: `{default: {tiers: [` + ownVMs + `, ` + residential + `], tiering: {banRateThreshold: "1"}}}`, wantField: "spec.default.tiering.banRateThreshold"},
		"probe share zero":          {spec: `{default: {tiers: [` + ownVMs + `, ` + residential + `], tiering: {probeShare: "0.0"}}}`, wantField: "spec.default.tiering.probeShare"},
		"quiet period too short":    {spec: `{default: {tiers: [` + ownVMs + `, ` + residential + `], tiering: {quietPeriod: 10ms}}}`, wantField: "spec.default.tiering.quietPeriod"},
		"min outcomes zero":         {spec: `{default: {tiers: [` + ownVMs + `, ` + residential + `], tiering: {minOutcomes: 0}}}`, wantField: "spec.default.tiering.minOutcomes"},
	} {
		t.Run(name, func(t *testing.T) {
			p := &crawlv1alpha1.CrawlPolicy{ObjectMeta: metav1.ObjectMeta{Name: strings.ReplaceAll(name, " ", "-")}}
			if err := yaml.Unmarshal([]byte(tc.spec), &p.Spec); err != nil {
				t.Fatal(err)
			}
			_, err := policies.Create(context.Background(), p, metav1.CreateOptions{})
			switch {
			case tc.wantField == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.wantField != "" && err == nil:
				t.Errorf("accepted, want it refused naming %s", tc.wantField)
			case tc.wantField != "" && !strings.Contains(err.Error(), tc.wantField):
				t.Errorf("refused with %q, want it to name %s", err, tc.wantField)
			}
		})
	}
}
