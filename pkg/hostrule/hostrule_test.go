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
