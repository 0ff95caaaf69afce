package lease

import (
	"encoding/base64"
	"errors"
	"testing"
	"time"
)

// The release and authorization that trust the kept ID (decision 110)
// answer exactly as the path that checks the MAC: for the current ID, an
// older ID of the same lease, another owner's ID, and a forged ID that
// names the same lease.
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
