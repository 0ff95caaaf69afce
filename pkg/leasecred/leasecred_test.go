package leasecred

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func testKeys(t testing.TB, n int) []Key {
	t.Helper()
	var lines []string
	for range n {
		k, err := NewKeyText()
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, k)
	}
	keys, err := ParseKeys(strings.Join(lines, "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

var end = time.Date(2026, 11, 30, 12, 0, 0, 500_000_000, time.UTC)

func TestSignVerify(t *testing.T) {
	keys := testKeys(t, 2)
	other := testKeys(t, 1)
	claims := Claims{Ref: Ref{Epoch: 0x18d2f3a4b5c6d7e8, Serial: 42}, End: end}
	const user = "u9Zq+session-0123456789abcdef"
	signed := Sign(keys[0], user, claims)
	bySecond := Sign(keys[1], user, claims)
	tampered := []byte(signed)
	tampered[10] ^= 'A' ^ 'B'
	for name, tc := range map[string]struct {
		keys           []Key
		user, password string
		want           Claims
		wantErr        bool
	}{
		"the first key":                        {keys: keys, user: user, password: signed, want: claims},
		"the second key verifies too":          {keys: keys, user: user, password: bySecond, want: claims},
		"another member's session":             {keys: keys, user: "u9Zq+session-fedcba9876543210", password: signed, wantErr: true},
		"no session term":                      {keys: keys, user: "u9Zq", password: signed, wantErr: true},
		"another instance's key":               {keys: other, user: user, password: signed, wantErr: true},
		"a changed character":                  {keys: keys, user: user, password: string(tampered), wantErr: true},
		"a static password":                    {keys: keys, user: user, password: "q8mVq0JtTz2Xb6Qm0rN4pW9yF3hK7cA1", wantErr: true},
		"empty":                                {keys: keys, user: user, password: "", wantErr: true},
		"padded":                               {keys: keys, user: user, password: signed + "=", wantErr: true},
		"standard base64 instead of base64url": {keys: keys, user: user, password: strings.NewReplacer("-", "+", "_", "/").Replace(signed) + "+", wantErr: true},
		"too long":                             {keys: keys, user: user, password: strings.Repeat("A", maxPassword+1), wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := Verify(tc.keys, tc.user, tc.password)
			if tc.wantErr {
				if !errors.Is(err, ErrNotSigned) {
					t.Fatalf("Verify = %+v, %v; want ErrNotSigned", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("claims (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPasswordIsCompact(t *testing.T) {
	k := testKeys(t, 1)[0]
	p := Sign(k, "u", Claims{Ref: Ref{Epoch: 1 << 62, Serial: 1 << 40}, End: end})
	if len(p) > 64 {
		t.Errorf("password of %d characters, want at most 64: %s", len(p), p)
	}
	if strings.ContainsAny(p, ":+/=") {
		t.Errorf("password %q holds a character Basic auth or a URL would mangle", p)
	}
}

func TestParseKeys(t *testing.T) {
	good, _ := NewKeyText()
	for name, tc := range map[string]struct {
		text    string
		n       int
		wantErr string
	}{
		"one":                       {text: good, n: 1},
		"padded, with a newline":    {text: base64.URLEncoding.EncodeToString(make([]byte, KeyLen)) + "\n", n: 1},
		"two, a comment and blanks": {text: "# rotation\n" + good + "\n\n" + good + "\n", n: 2},
		"two on a line":             {text: good + " " + good, n: 2},
		"empty":                     {text: "\n", wantErr: "no lease key"},
		"short":                     {text: good + "\n" + good[:20], wantErr: "line 2"},
		"not base64url":             {text: strings.Repeat("!", 43), wantErr: "line 1"},
	} {
		t.Run(name, func(t *testing.T) {
			keys, err := ParseKeys(tc.text)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one naming %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), good[:8]) {
					t.Errorf("the error %q shows the key", err)
				}
				return
			}
			if err != nil || len(keys) != tc.n {
				t.Fatalf("ParseKeys = %d keys, %v; want %d", len(keys), err, tc.n)
			}
		})
	}
}

func TestRefString(t *testing.T) {
	r := Ref{Epoch: 0x18d2f3a4b5c6d7e8, Serial: 42}
	if r.String() != "18d2f3a4b5c6d7e8.42" {
		t.Errorf("String = %q", r.String())
	}
	back, err := ParseRef(r.String())
	if err != nil || back != r {
		t.Errorf("ParseRef(%q) = %v, %v", r.String(), back, err)
	}
	for _, bad := range []string{"", "1", "x.1", "1.x", "1.-1"} {
		if _, err := ParseRef(bad); err == nil {
			t.Errorf("ParseRef(%q) took it", bad)
		}
	}
}

func TestPush(t *testing.T) {
	keys := testKeys(t, 2)
	updates := []Update{
		{Ref: Ref{Epoch: 1, Serial: 2}, Until: end, Ended: true},
		{Ref: Ref{Epoch: 1, Serial: 3}, Until: end.Add(time.Minute)},
	}
	body, auth := EncodePush(keys[1], updates)
	got, err := VerifyPush(keys, body, auth)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(updates, got, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
		t.Errorf("updates (-want +got):\n%s", diff)
	}
	changed := append([]byte(nil), body...)
	changed[len(changed)-3] = '9'
	other := testKeys(t, 1)
	for name, tc := range map[string]struct {
		keys []Key
		body []byte
		auth string
	}{
		"a changed body":       {keys: keys, body: changed, auth: auth},
		"another key":          {keys: other, body: body, auth: auth},
		"no Authorization":     {keys: keys, body: body},
		"another scheme":       {keys: keys, body: body, auth: "Bearer " + strings.TrimPrefix(auth, PushScheme+" ")},
		"a MAC cut short":      {keys: keys, body: body, auth: auth[:len(auth)-2]},
		"an unknown member":    {keys: keys, body: []byte(`{"updates":[],"x":1}`), auth: sign(keys[0], `{"updates":[],"x":1}`)},
		"a bad ref":            {keys: keys, body: []byte(`{"updates":[{"ref":"zz","until":1}]}`), auth: sign(keys[0], `{"updates":[{"ref":"zz","until":1}]}`)},
		"not JSON, signed too": {keys: keys, body: []byte(`nope`), auth: sign(keys[0], `nope`)},
	} {
		t.Run(name, func(t *testing.T) {
			if got, err := VerifyPush(tc.keys, tc.body, tc.auth); err == nil {
				t.Errorf("VerifyPush took it: %+v", got)
			}
		})
	}
}

// sign signs an arbitrary body as EncodePush would.
func sign(k Key, body string) string {
	return PushScheme + " " + k.ID() + "." + base64.RawURLEncoding.EncodeToString(k.pushMAC([]byte(body)))
}

func FuzzVerify(f *testing.F) {
	keys := testKeys(f, 1)
	f.Add("u", Sign(keys[0], "u", Claims{Ref: Ref{Epoch: 1, Serial: 1}, End: end}))
	f.Add("u+session-x", "AQAAAAA")
	f.Fuzz(func(t *testing.T, user, password string) {
		c, err := Verify(keys, user, password)
		if err == nil && Sign(keys[0], user, c) != password {
			t.Errorf("Verify took %q for %q, which Sign does not make", password, user)
		}
	})
}

func BenchmarkVerify(b *testing.B) {
	keys := testKeys(b, 1)
	p := Sign(keys[0], "u+session-0123456789abcdef", Claims{Ref: Ref{Epoch: 1 << 60, Serial: 12345}, End: end})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Verify(keys, "u+session-0123456789abcdef", p); err != nil {
			b.Fatal(err)
		}
	}
}

func TestAnnounces(t *testing.T) {
	keys := testKeys(t, 2)
	if !Announces(keys[1].ID()+", "+keys[0].ID(), keys[0]) || Announces(keys[1].ID(), keys[0]) || Announces("", keys[0]) {
		t.Error("Announces does not find exactly the IDs named")
	}
}

func TestKeyCache(t *testing.T) {
	text, _ := NewKeyText()
	var c KeyCache
	a, err := c.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := c.Parse(text)
	if a[0].macs != b[0].macs {
		t.Error("the second Parse parsed again")
	}
	if _, err := c.Parse("nope"); err == nil {
		t.Error("a bad key was taken")
	}
}
