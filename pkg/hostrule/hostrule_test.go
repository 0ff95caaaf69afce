package hostrule

import "testing"

func TestRank(t *testing.T) {
	for _, tc := range []struct {
		host, domain string
		want         int
	}{
		{"shop.example", "shop.example", Exact},
		{"shop.example", "www.shop.example", NoMatch},
		{"*.example", "example", Suffix},
		{"*.example", "a.b.example", Suffix},
		{"*.example", "notexample", NoMatch},
		{"*.example", "example.org", NoMatch},
		{"example", "shop.example", NoMatch},
	} {
		if got := Rank(tc.host, tc.domain); got != tc.want {
			t.Errorf("Rank(%q, %q) = %d, want %d", tc.host, tc.domain, got, tc.want)
		}
	}
	if !Better(Suffix, 10, Suffix, 9) || Better(Suffix, 20, Exact, 3) || !Better(Default, 1, NoMatch, 0) {
		t.Error("Better: a longer suffix wins, exact beats any suffix, a default beats nothing")
	}
}

func TestSite(t *testing.T) {
	for host, want := range map[string]string{
		"shop.example.com":      "example.com",
		"WWW.Example.COM.":      "example.com",
		"example.com":           "example.com",
		"a.b.example.co.uk":     "example.co.uk",
		"a.site.test":           "site.test", // not on the list: the last label is the suffix
		"alice.github.io":       "alice.github.io",
		"bob.github.io":         "bob.github.io",
		"github.io":             "github.io",
		"co.uk":                 "co.uk",
		"localhost":             "localhost",
		"127.0.0.1":             "127.0.0.1",
		"[2001:db8::1]":         "[2001:db8::1]",
		"2001:db8::1":           "2001:db8::1",
		"":                      "",
		"xn--bcher-kva.example": "xn--bcher-kva.example",
	} {
		if got := Site(host); got != want {
			t.Errorf("Site(%q) = %q, want %q", host, got, want)
		}
	}
}

// BenchmarkSite is what every acquire and every ban pays for the site of
// its domain.
func BenchmarkSite(b *testing.B) {
	for b.Loop() {
		Site("img.shop.example.co.uk")
	}
}
