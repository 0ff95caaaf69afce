package site

import "testing"

func TestOf(t *testing.T) {
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
		if got := Of(host); got != want {
			t.Errorf("Of(%q) = %q, want %q", host, got, want)
		}
	}
}

// BenchmarkOf is what every acquire and every ban pays for the site of
// its domain.
func BenchmarkOf(b *testing.B) {
	for b.Loop() {
		Of("img.shop.example.co.uk")
	}
}
