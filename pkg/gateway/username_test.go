package gateway

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseUsername(t *testing.T) {
	tests := map[string]struct {
		username string
		want     Target
		wantTerm string // the term a *TermError names; "" for success
		wantMsg  string
	}{
		"empty asks for nothing":          {username: "", want: Target{}},
		"all three":                       {username: "ns-crawl+pool-eu+session-42", want: Target{Namespace: "crawl", Pool: "eu", Session: "42"}},
		"any order":                       {username: "session-42+ns-crawl", want: Target{Namespace: "crawl", Session: "42"}},
		"split at the first dash":         {username: "pool-eu-west-1+session-a-b-c", want: Target{Pool: "eu-west-1", Session: "a-b-c"}},
		"session may hold odd characters": {username: "session-slot:example.com/1", want: Target{Session: "slot:example.com/1"}},
		"unknown key":                     {username: "ns-crawl+colour-blue", wantTerm: "colour-blue", wantMsg: `unknown key "colour"`},
		"no dash":                         {username: "crawl", wantTerm: "crawl", wantMsg: "is not key-value"},
		"empty value":                     {username: "ns-", wantTerm: "ns-", wantMsg: "has an empty value"},
		"empty term":                      {username: "ns-a++pool-b", wantTerm: "", wantMsg: "is empty"},
		"trailing plus":                   {username: "ns-a+", wantTerm: "", wantMsg: "is empty"},
		"repeated key":                    {username: "ns-a+ns-b", wantTerm: "ns-b", wantMsg: `key "ns" is given more than once`},
		"bad namespace":                   {username: "ns-Crawl", wantTerm: "ns-Crawl", wantMsg: "is not a namespace name"},
		"bad pool":                        {username: "pool-a/b", wantTerm: "pool-a/b", wantMsg: "is not a pool name"},
		"session with a space":            {username: "session-a b", wantTerm: "session-a b", wantMsg: "must not contain spaces"},
		"session too long":                {username: "session-" + strings.Repeat("x", 254), wantTerm: "session-" + strings.Repeat("x", 254), wantMsg: "longer than 253"},
		"country":                         {username: "ns-crawl+country-de", want: Target{Namespace: "crawl", Country: "DE"}},
		"country in upper case":           {username: "country-US+session-7", want: Target{Country: "US", Session: "7"}},
		"country not two letters":         {username: "country-deu", wantTerm: "country-deu", wantMsg: "is not an ISO 3166-1 alpha-2 country code"},
		"country not letters":             {username: "country-d1", wantTerm: "country-d1", wantMsg: "is not an ISO 3166-1 alpha-2 country code"},
		"country twice":                   {username: "country-de+country-us", wantTerm: "country-us", wantMsg: `key "country" is given more than once`},
		"key is case-sensitive":           {username: "NS-crawl", wantTerm: "NS-crawl", wantMsg: `unknown key "NS"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseUsername(tc.username)
			if tc.wantTerm == "" && tc.wantMsg == "" {
				if err != nil {
					t.Fatalf("ParseUsername(%q): %v", tc.username, err)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("ParseUsername(%q) (-want +got):\n%s", tc.username, diff)
				}
				return
			}
			var termErr *TermError
			if !errors.As(err, &termErr) {
				t.Fatalf("ParseUsername(%q) = %+v, %v; want a *TermError", tc.username, got, err)
			}
			if termErr.Term != tc.wantTerm || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("ParseUsername(%q): term %q, %q; want term %q and %q", tc.username, termErr.Term, err, tc.wantTerm, tc.wantMsg)
			}
		})
	}
}

func TestTargetSelector(t *testing.T) {
	if got := (Target{Pool: "eu"}).Selector().String(); got != PoolLabel+"=eu" {
		t.Errorf("selector %q", got)
	}
	if !(Target{}).Selector().Empty() {
		t.Error("no pool term should select everything")
	}
}
