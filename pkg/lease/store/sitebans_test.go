package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The site-ban policy on its own, without a Store: bans in, blocks out.

type banEvent struct {
	after     time.Duration // since t0
	namespace string
	site      string
	proxy     string
	instance  string
	tier      int
}

func siteBan(after time.Duration, proxy string) banEvent {
	return banEvent{after: after, namespace: "crawl", site: "site.example", proxy: proxy, instance: "i-" + proxy, tier: -1}
}

func (e banEvent) on(ns string) banEvent        { e.namespace = ns; return e }
func (e banEvent) at(site string) banEvent      { e.site = site; return e }
func (e banEvent) tiered(t int) banEvent        { e.tier = t; return e }
func (e banEvent) instanceOf(i string) banEvent { e.instance = i; return e }

func TestSiteBansBlockAtTheBound(t *testing.T) {
	type query struct {
		after     time.Duration
		namespace string
		site      string
		tier      int
	}
	type answer struct {
		Blocked bool
		Until   time.Duration // since t0
	}
	q := func(after time.Duration) query {
		return query{after: after, namespace: "crawl", site: "site.example", tier: -1}
	}
	const window = 10 * time.Minute
	tests := map[string]struct {
		bans    []banEvent
		queries []query
		want    []answer
	}{
		"below the bound: not blocked": {
			bans:    []banEvent{siteBan(0, "a"), siteBan(time.Second, "b")},
			queries: []query{q(2 * time.Second)},
			want:    []answer{{}},
		},
		"the bound's worth of distinct proxies: blocked until the oldest leaves the window": {
			bans:    []banEvent{siteBan(0, "a"), siteBan(time.Minute, "b"), siteBan(2*time.Minute, "c")},
			queries: []query{q(2 * time.Minute), q(window - time.Second), q(window)},
			want:    []answer{{true, window}, {true, window}, {}},
		},
		"the latest bound of more bans decide": {
			bans:    []banEvent{siteBan(0, "a"), siteBan(time.Minute, "b"), siteBan(2*time.Minute, "c"), siteBan(3*time.Minute, "d")},
			queries: []query{q(3 * time.Minute), q(window), q(window + time.Minute)},
			want:    []answer{{true, window + time.Minute}, {true, window + time.Minute}, {}},
		},
		"one proxy banned again counts once, at its latest ban": {
			bans:    []banEvent{siteBan(0, "a"), siteBan(time.Minute, "a"), siteBan(2*time.Minute, "b"), siteBan(3*time.Minute, "a")},
			queries: []query{q(3 * time.Minute)},
			want:    []answer{{}},
		},
		"a new instance under the same name is another IP": {
			bans:    []banEvent{siteBan(0, "a"), siteBan(time.Minute, "a").instanceOf("i-a-2"), siteBan(2*time.Minute, "b")},
			queries: []query{q(2 * time.Minute)},
			want:    []answer{{true, window}},
		},
		"bans older than the window do not count": {
			bans:    []banEvent{siteBan(0, "a"), siteBan(window, "b"), siteBan(window+time.Minute, "c")},
			queries: []query{q(window + time.Minute)},
			want:    []answer{{}},
		},
		"namespaces, sites and tiers are counted apart": {
			bans: []banEvent{siteBan(0, "a"), siteBan(0, "b"), siteBan(0, "c").on("other"), siteBan(0, "d").at("other.example"),
				siteBan(0, "e").tiered(0), siteBan(0, "f").tiered(0), siteBan(0, "g").tiered(0)},
			queries: []query{q(time.Second), {time.Second, "other", "site.example", -1}, {time.Second, "crawl", "other.example", -1},
				{time.Second, "crawl", "site.example", 0}, {time.Second, "crawl", "site.example", 1}},
			want: []answer{{}, {}, {}, {true, window}, {}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b := newSiteBans(3, window, nil, nil, nil)
			for _, e := range tc.bans {
				b.noteBan(e.namespace, e.site, "www."+e.site, ObjectName{e.namespace, e.proxy}, e.instance, e.tier, t0.Add(e.after))
			}
			var got []answer
			for _, qq := range tc.queries {
				until, ok := b.blocked(qq.namespace, qq.site, qq.tier, t0.Add(qq.after))
				a := answer{Blocked: ok}
				if ok {
					a.Until = until.Sub(t0)
				}
				got = append(got, a)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("answers (-want +got):\n%s", diff)
			}
		})
	}
}

// noteBan says when a tier reaches the bound; blocks lists what is in
// force, with the name of the latest ban.
func TestSiteBansReachedAndBlocks(t *testing.T) {
	b := newSiteBans(2, time.Minute, nil, nil, nil)
	var reached []bool
	for i, proxy := range []string{"a", "b", "c"} {
		r, _ := b.noteBan("crawl", "site.example", fmt.Sprintf("n%d.site.example", i), ObjectName{"crawl", proxy}, "", 0, t0)
		reached = append(reached, r)
	}
	if diff := cmp.Diff([]bool{false, true, true}, reached); diff != "" {
		t.Errorf("reached (-want +got):\n%s", diff)
	}
	want := []SiteBlock{{Namespace: "crawl", Site: "site.example", Domain: "n2.site.example", Tier: 0, Proxies: 3, Window: time.Minute, Until: t0.Add(time.Minute)}}
	if diff := cmp.Diff(want, b.blocks(nil, t0.Add(time.Second))); diff != "" {
		t.Errorf("blocks (-want +got):\n%s", diff)
	}
	if got := b.blocks(nil, t0.Add(time.Minute)); len(got) != 0 {
		t.Errorf("blocks after the window: %+v", got)
	}
}

// Memory is bounded: a namespace keeps at most maxSitesPerNamespace sites,
// dead ones dropped first, then its least recently banned; another
// namespace's block is never evicted; a site keeps at most 2×bound bans.
func TestSiteBansAreBounded(t *testing.T) {
	b := newSiteBans(3, time.Minute, nil, nil, nil)
	for _, p := range []string{"a", "b", "c"} {
		b.noteBan("victim", "hostile.example", "hostile.example", ObjectName{"victim", p}, "", -1, t0)
	}
	evictions := 0
	for i := range 3 * maxSitesPerNamespace {
		if _, evicted := b.noteBan("flood", fmt.Sprintf("junk%d.example", i), "", ObjectName{"flood", "a"}, "", -1, t0.Add(time.Duration(i)*time.Millisecond)); evicted {
			evictions++
		}
	}
	if n := len(b.namespaces["flood"].sites); n != maxSitesPerNamespace || b.entries != maxSitesPerNamespace+1 {
		t.Errorf("flood keeps %d sites, %d in all; want %d and %d", n, b.entries, maxSitesPerNamespace, maxSitesPerNamespace+1)
	}
	if want := 2 * maxSitesPerNamespace; evictions != want {
		t.Errorf("%d live sites evicted, want %d", evictions, want)
	}
	if _, ok := b.blocked("victim", "hostile.example", -1, t0.Add(time.Second)); !ok {
		t.Error("another namespace's flood lifted victim's block")
	}
	// A minute on, flood's sites are dead: a new one drops them first.
	if _, evicted := b.noteBan("flood", "fresh.example", "", ObjectName{"flood", "a"}, "", -1, t0.Add(time.Hour)); evicted {
		t.Error("a live site was evicted while dead ones were there")
	}
	if n := len(b.namespaces["flood"].sites); n != 1 {
		t.Errorf("flood keeps %d sites after its dead ones went, want 1", n)
	}
	for i := range 50 {
		b.noteBan("victim", "hostile.example", "", ObjectName{"victim", fmt.Sprintf("p%d", i)}, "", -1, t0.Add(2*time.Hour))
	}
	if n := len(b.namespaces["victim"].sites["hostile.example"].bans); n != 6 {
		t.Errorf("a site keeps %d bans, want 2×bound = 6", n)
	}
}
