package store

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// A release and an authorization accept the current ID and an older ID of
// the same lease, and refuse another owner's ID and a forged ID that names
// the same lease.
func TestReleaseAndAuthorizationCheckTheMAC(t *testing.T) {
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
			current, err := s.RenewAs("alice", older.ID, 0, Report{})
			if err != nil {
				t.Fatal(err)
			}
			if current.ID == older.ID {
				t.Fatal("a renewal kept the ID")
			}
			owner, id := tt.present(current, older)
			ns, err := s.LeaseNamespace(owner, id)
			if !errors.Is(err, tt.want) || (err == nil && ns != "crawl") {
				t.Errorf("LeaseNamespace: %q, %v; want crawl, %v", ns, err, tt.want)
			}
			if err := s.ReleaseAs(owner, id, OutcomeOK, "", Report{}); !errors.Is(err, tt.want) {
				t.Errorf("ReleaseAs: %v, want %v", err, tt.want)
			}
			live, _ := s.List(LeaseFilter{})
			if released := len(live) == 0; released != (tt.want == nil) {
				t.Errorf("released: %v, want %v", released, tt.want == nil)
			}
			// A second release of the same grant is unknown, whichever ID.
			if tt.want == nil {
				if err := s.ReleaseAs("alice", current.ID, OutcomeOK, "", Report{}); !errors.Is(err, ErrUnknownLease) {
					t.Errorf("second release: %v, want ErrUnknownLease", err)
				}
			}
		})
	}
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

// decode accepts the IDs this version mints, with the MAC of its key only,
// and in one spelling; decodeOwned also checks the owner. Version 3 IDs
// (an AES-CMAC, no longer verified) and version 1 IDs are refused.
func TestDecodeChecksTheMACOfItsVersion(t *testing.T) {
	sg := newSigner(testKey)
	tok := token{
		key: leaseKey{epoch: 1 << 60, serial: 42}, slot: 3, grantedAt: t0, expiresAt: t0.Add(time.Minute), ttl: time.Minute,
		urlHash: urlHash("http://127.0.0.1:1"), proxy: ObjectName{"ns", "name"}, proxyUID: "uid", holder: "w", domain: "example.com", owner: "alice",
	}
	valid := sg.encode(tok)
	other := newSigner(bytes.Repeat([]byte("k"), MinKeyLen)).encode(tok)
	tests := []struct {
		name, id, owner string
		want            bool
	}{
		{"valid", valid, "alice", true},
		{"another owner", valid, "bob", false},
		{"no owner", valid, "", false},
		{"version 3", withMAC(t, valid, 3, hmacOf(testKey)), "alice", false},
		{"version 1", withMAC(t, valid, 1, hmacOf(testKey)), "alice", false},
		{"another key", other, "alice", false},
		{"truncated", valid[:len(valid)-1], "alice", false},
		{"a character more", valid + "A", "alice", false},
		{"padded", valid + "==", "alice", false},
		{"empty", "", "alice", false},
		{"not base64", "!!!!", "alice", false},
	}
	s := &Store{signer: sg}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			decoded, err := s.signer.decodeOwned(tt.owner, tt.id)
			if ok := err == nil; ok != tt.want {
				t.Fatalf("decodeOwned: %v, want ok %v", err, tt.want)
			}
			if tt.want {
				if diff := cmp.Diff(tok, decoded, cmp.AllowUnexported(token{}, leaseKey{})); diff != "" {
					t.Errorf("decoded token (-minted +decoded):\n%s", diff)
				}
			}
		})
	}
}

// FuzzDecode: whatever the string, decode either refuses it or returns a
// token that encodes back to the same ID.
func FuzzDecode(f *testing.F) {
	sg := newSigner(testKey)
	valid := sg.encode(token{key: leaseKey{epoch: 7, serial: 9}, proxy: ObjectName{"ns", "p"}, holder: "w", owner: "o"})
	for _, seed := range []string{valid, valid[:40], "", "AAAA", valid + "A"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, id string) {
		tok, err := sg.decode(id)
		if err != nil {
			return
		}
		if raw, _ := base64.RawURLEncoding.DecodeString(id); raw[0] == tokenVersion && sg.encode(tok) != id {
			t.Fatalf("decode(%q) = %+v, which encodes to %q", id, tok, sg.encode(tok))
		}
	})
}
