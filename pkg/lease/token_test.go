package lease

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"testing"
	"time"

	"k8s.io/client-go/tools/cache"
)

// The release and authorization that trust the published ID (decision
// 110, 159), and the authorization that reads only an ID's head, answer
// exactly as the path that checks the MAC and decodes the whole ID: for
// the current ID, an older ID of the same lease, another owner's ID, and
// a forged ID that names the same lease.
func TestKeptIDShortcutDecidesAsTheMAC(t *testing.T) {
	forge := func(id string) string {
		raw, err := base64.RawURLEncoding.DecodeString(id)
		if err != nil {
			t.Fatal(err)
		}
		raw[len(raw)-1] ^= 1 // the same payload, a wrong MAC
		return base64.RawURLEncoding.EncodeToString(raw)
	}
	tests := []struct {
		name    string
		present func(current, older Lease) (owner, id string)
		want    error
	}{
		{"current ID", func(c, _ Lease) (string, string) { return "alice", c.ID }, nil},
		{"older ID of the renewed lease", func(_, o Lease) (string, string) { return "alice", o.ID }, nil},
		{"another owner", func(c, _ Lease) (string, string) { return "bob", c.ID }, ErrUnknownLease},
		{"forged MAC", func(c, _ Lease) (string, string) { return "alice", forge(c.ID) }, ErrUnknownLease},
		{"truncated", func(c, _ Lease) (string, string) { return "alice", c.ID[:40] }, ErrUnknownLease},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, clk, _ := newTestStore(t, []ProxyInfo{newProxy("p1")})
			older := acquire(t, s, AcquireRequest{Owner: "alice"})
			clk.Step(time.Second)
			current, err := s.RenewAs("alice", older.ID, 0)
			if err != nil {
				t.Fatal(err)
			}
			if current.ID == older.ID {
				t.Fatal("a renewal kept the ID")
			}
			owner, id := tt.present(current, older)
			ns, err := s.leaseNamespaceAs(owner, id)
			if !errors.Is(err, tt.want) || (err == nil && ns != "crawl") {
				t.Errorf("leaseNamespaceAs: %q, %v; want crawl, %v", ns, err, tt.want)
			}
			if err := s.ReleaseAs(owner, id, OutcomeOK, ""); !errors.Is(err, tt.want) {
				t.Errorf("ReleaseAs: %v, want %v", err, tt.want)
			}
			live, _ := s.List(LeaseFilter{})
			if released := len(live) == 0; released != (tt.want == nil) {
				t.Errorf("released: %v, want %v", released, tt.want == nil)
			}
			// A second release of the same grant is unknown, whichever ID.
			if tt.want == nil {
				if err := s.ReleaseAs("alice", current.ID, OutcomeOK, ""); !errors.Is(err, ErrUnknownLease) {
					t.Errorf("second release: %v, want ErrUnknownLease", err)
				}
			}
		})
	}
}

// mintV2 is id as an operator before decision 159 signed it: version 2,
// and the first 16 bytes of HMAC-SHA256(key, payload) as its MAC.
func mintV2(t testing.TB, key []byte, id string) string {
	t.Helper()
	return withMAC(t, id, tokenVersionHMAC, hmacOf(key))
}

func hmacOf(key []byte) func(payload []byte) []byte {
	return func(payload []byte) []byte {
		h := hmac.New(sha256.New, key)
		h.Write(payload)
		return h.Sum(nil)[:macLen]
	}
}

// withMAC replaces id's version byte and MAC: to check that a MAC binds
// its version.
func withMAC(t testing.TB, id string, version byte, mac func(payload []byte) []byte) string {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(id)
	if err != nil {
		t.Fatal(err)
	}
	payload := raw[:len(raw)-macLen]
	payload[0] = version
	return base64.RawURLEncoding.EncodeToString(append(payload, mac(payload)...))
}

// head reads exactly what decode reads: the same key and namespace for
// the IDs decode accepts with that owner, and false for everything else.
func TestHeadAgreesWithDecode(t *testing.T) {
	sg := newSigner(testKey)
	tok := token{
		key: leaseKey{epoch: 1 << 60, serial: 42}, slot: 3, grantedAt: t0, expiresAt: t0.Add(time.Minute), ttl: time.Minute,
		urlHash: urlHash("http://127.0.0.1:1"), proxy: cache.NewObjectName("ns", "name"), proxyUID: "uid", holder: "w", domain: "example.com", owner: "alice",
	}
	valid := sg.encode(tok)
	other := newSigner(bytes.Repeat([]byte("k"), MinKeyLen)).encode(tok)
	cmacOf := func(payload []byte) []byte {
		var mac [macLen]byte
		sg.mac.sum(&mac, payload)
		return mac[:]
	}
	tests := []struct {
		name, id, owner string
		want            bool
	}{
		{"valid", valid, "alice", true},
		{"another owner", valid, "bob", false},
		{"no owner", valid, "", false},
		{"version 2, HMAC", mintV2(t, testKey, valid), "alice", true},
		{"version 2 with a CMAC", withMAC(t, valid, tokenVersionHMAC, cmacOf), "alice", false},
		{"version 3 with an HMAC", withMAC(t, valid, tokenVersion, hmacOf(testKey)), "alice", false},
		{"version 1", withMAC(t, valid, 1, cmacOf), "alice", false},
		{"another key", other, "alice", false},
		{"truncated", valid[:len(valid)-1], "alice", false},
		{"a character more", valid + "A", "alice", false},
		{"padded", valid + "==", "alice", false},
		{"empty", "", "alice", false},
		{"not base64", "!!!!", "alice", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ns string
			key, ok := sg.head(tt.id, tt.owner, &ns)
			if ok != tt.want {
				t.Fatalf("head: %v, want %v", ok, tt.want)
			}
			decoded, err := sg.decode(tt.id)
			if decodes := err == nil && decoded.owner == tt.owner; decodes != ok {
				t.Fatalf("head says %v, decode says %v (%v)", ok, decodes, err)
			}
			if ok && (key != decoded.key || ns != decoded.proxy.Namespace) {
				t.Errorf("head: %v %q, decode: %v %q", key, ns, decoded.key, decoded.proxy.Namespace)
			}
		})
	}
}

// FuzzIDHead: for any string, head and decode agree (see TestHeadAgreesWithDecode).
func FuzzIDHead(f *testing.F) {
	sg := newSigner(testKey)
	valid := sg.encode(token{key: leaseKey{epoch: 7, serial: 9}, proxy: cache.NewObjectName("ns", "p"), holder: "w", owner: "o"})
	for _, seed := range []string{valid, mintV2(f, testKey, valid), valid[:40], "", "AAAA", valid + "A"} {
		f.Add(seed, "o")
	}
	f.Fuzz(func(t *testing.T, id, owner string) {
		var ns string
		key, ok := sg.head(id, owner, &ns)
		decoded, err := sg.decode(id)
		if decodes := err == nil && decoded.owner == owner; decodes != ok {
			t.Fatalf("head(%q, %q) = %v, decode: %v (%v)", id, owner, ok, decodes, err)
		}
		if ok && (key != decoded.key || ns != decoded.proxy.Namespace) {
			t.Fatalf("head: %v %q, decode: %v %q", key, ns, decoded.key, decoded.proxy.Namespace)
		}
	})
}

// A version 2 ID from before decision 159 keeps its lease across an
// upgrade: the new leader re-learns it from a renewal, which answers with
// a version 3 ID, and a release of the old ID ends it.
func TestVersion2IDSurvivesAnUpgrade(t *testing.T) {
	tl := newTwoLeaders(t, newProxy("p1"))
	held := acquire(t, tl.old, AcquireRequest{Holder: "a", Owner: "alice"})
	v2 := mintV2(t, testKey, held.ID)
	tl.lead(DefaultTTL)

	renewed, err := tl.new.RenewAs("alice", v2, 0)
	if err != nil {
		t.Fatalf("renewing the version 2 ID on the new leader: %v", err)
	}
	if renewed.Proxy.Key.Name != "p1" || renewed.Slot != held.Slot {
		t.Errorf("re-learned on %v slot %d, want p1 slot %d", renewed.Proxy.Key, renewed.Slot, held.Slot)
	}
	raw, err := base64.RawURLEncoding.DecodeString(renewed.ID)
	if err != nil || raw[0] != tokenVersion {
		t.Errorf("the renewal's ID is not version %d: %v", tokenVersion, err)
	}
	if err := tl.new.ReleaseAs("alice", v2, OutcomeOK, ""); err != nil {
		t.Fatalf("releasing by the version 2 ID: %v", err)
	}
	if live, _ := tl.new.List(LeaseFilter{}); len(live) != 0 {
		t.Errorf("live after the release: %d leases", len(live))
	}
}

// The characters sameID compares in constant time cover every character
// the MAC's bits reach, whatever the length of the fields before it.
func TestMACCharsCoverTheMAC(t *testing.T) {
	for fields := 1; fields < 300; fields++ {
		total := base64.RawURLEncoding.EncodedLen(fields + macLen)
		firstMACChar := fields * 8 / 6 // the character holding the MAC's first bit
		if touched := total - firstMACChar; touched > macChars {
			t.Errorf("%d bytes of fields: the MAC touches the last %d characters, macChars is %d", fields, touched, macChars)
		}
	}
}

func TestSameID(t *testing.T) {
	s := newSigner(testKey)
	kept := s.encode(token{key: leaseKey{epoch: 7, serial: 9}, holder: "w", owner: "o"})
	flip := func(i int) string {
		b := []byte(kept)
		b[i] = map[bool]byte{true: 'B', false: 'A'}[b[i] == 'A']
		return string(b)
	}
	for name, tc := range map[string]struct {
		kept, presented string
		want            bool
	}{
		"the same":                    {kept, kept, true},
		"a field's character changed": {kept, flip(3), false},
		"the MAC's first character":   {kept, flip(len(kept) - macChars), false},
		"the MAC's last character":    {kept, flip(len(kept) - 1), false},
		"shorter":                     {kept, kept[:len(kept)-1], false},
		"longer":                      {kept, kept + "A", false},
		"nothing kept":                {"", "", false},
		"shorter than the MAC":        {"abc", "abc", true},
	} {
		if got := sameID(tc.kept, tc.presented); got != tc.want {
			t.Errorf("%s: sameID = %v, want %v", name, got, tc.want)
		}
	}
}

// peekLeaseKey reads the key decode reads, however many bytes the serial
// takes, and nothing from a version it does not mint.
func TestPeekLeaseKey(t *testing.T) {
	sg := newSigner(testKey)
	for _, key := range []leaseKey{
		{epoch: 1, serial: 1},
		{epoch: uint64(t0.UnixNano()), serial: 1},
		{epoch: uint64(t0.UnixNano()), serial: 1<<35 - 1}, // the last that fits 20 characters
		{epoch: uint64(t0.UnixNano()), serial: 1 << 35},
		{epoch: 1<<64 - 1, serial: 1<<64 - 1},
	} {
		id := sg.encode(token{key: key, holder: "w"})
		if got, ok := peekLeaseKey(id); !ok || got != key {
			t.Errorf("peekLeaseKey of %v: %v, %v", key, got, ok)
		}
		if _, ok := peekLeaseKey(mintV2(t, testKey, id)); ok {
			t.Errorf("peekLeaseKey of a version 2 ID of %v: ok", key)
		}
	}
	for _, id := range []string{"", "A", "AAAA", "!!!!!!!!"} {
		if got, ok := peekLeaseKey(id); ok {
			t.Errorf("peekLeaseKey(%q) = %v", id, got)
		}
	}
}
