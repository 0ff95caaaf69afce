package lease

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxyfleet/proxy-operator/pkg/lease/wire"
)

// The strict decoder accepts exactly the members package wire writes.
func TestDecoderFieldsAreTheWireTypes(t *testing.T) {
	for name, tc := range map[string]struct {
		typ   reflect.Type
		known []string
	}{
		"acquire": {reflect.TypeFor[wire.AcquireRequest](), acquireFields},
		"renew":   {reflect.TypeFor[wire.RenewRequest](), renewFields},
	} {
		var tags []string
		for f := range tc.typ.Fields() {
			tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			tags = append(tags, tag)
		}
		if diff := cmp.Diff(tags, tc.known); diff != "" {
			t.Errorf("%s: wire tags (-) and decoder fields (+):\n%s", name, diff)
		}
	}
}

// plainObjectSeeds are bodies for the fast path and for everything it must
// hand to the tokenizer.
var plainObjectSeeds = []string{
	`{"holder":"w"}`, ` { "holder" : "w" , "ttl":"30s" } `, "{\t\"holder\":\"w\"}\r\n", `{}`, ` {} `, ``, `   `,
	`{"holder":"w","holder":"x"}`, `{"HOLDER":"w"}`, `{"x":"y"}`, `{"holder":"w",}`, `{,"holder":"w"}`,
	`{"holder":"w"} trailing`, `{"holder":"w"}{}`, `{"holder":"w"`, `{"holder":"w`, `{"holder":}`, `{"holder"}`,
	`{"holder":"\u0041"}`, `{"holder":"a\"b"}`, "{\"holder\":\"a\x01b\"}", "{\"holder\":\"\xff\"}", `{"holder":"ünï"}`,
	`{"holder":null}`, `{"holder":1}`, `null`, `[]`, `"x"`, `{"holder":"w","wait":"1s","session":"s","domain":"d","namespace":"n","selector":"a=b"}`,
	"\ufeff{\"holder\":\"w\"}", `{"holder" "w"}`, `{"holder":"w" "ttl":"1s"}`,
}

// The fast path of decodeObject answers exactly as the tokenizer does.
func TestDecodeObjectIsDecodeObjectStream(t *testing.T) {
	for _, body := range plainObjectSeeds {
		for _, allowEmpty := range []bool{false, true} {
			checkSameDecoding(t, []byte(body), allowEmpty)
		}
	}
}

func FuzzDecodeObjectFastPath(f *testing.F) {
	for _, seed := range plainObjectSeeds {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkSameDecoding(t, body, false) })
}

func checkSameDecoding(t *testing.T, body []byte, allowEmpty bool) {
	t.Helper()
	got, gotErr := decodeObject(bytes.NewReader(body), acquireFields, allowEmpty)
	want, wantErr := decodeObjectStream(bytes.NewReader(body), acquireFields, allowEmpty)
	if diff := cmp.Diff(want.asMap(), got.asMap()); diff != "" || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
		t.Errorf("decodeObject(%q): members (-tokenizer +fast):\n%s\nerror %v, tokenizer's %v", body, diff, gotErr, wantErr)
	}
}

func (m members) asMap() map[string]string {
	out := map[string]string{}
	for i := range m.n {
		out[m.names[i]] = m.values[i]
	}
	return out
}

// members holds every name a call knows, since each is given at most once.
func TestKnownNamesFitMembers(t *testing.T) {
	for _, known := range [][]string{acquireFields, renewFields, releaseParams, listParams, proxiesParams, sessionParams} {
		if len(known) > maxMembers {
			t.Errorf("%v: %d names, members holds %d", known, len(known), maxMembers)
		}
	}
}

func TestMembers(t *testing.T) {
	var m members
	for _, add := range []struct {
		name, value string
		want        bool
	}{{"holder", "w", true}, {"ttl", "1s", true}, {"holder", "x", false}, {"wait", "", true}} {
		if got := m.add(add.name, add.value); got != add.want {
			t.Errorf("add(%q) = %v, want %v", add.name, got, add.want)
		}
	}
	if diff := cmp.Diff(map[string]string{"holder": "w", "ttl": "1s", "wait": ""}, m.asMap()); diff != "" {
		t.Errorf("members (-want +got):\n%s", diff)
	}
	if v, ok := m.lookup("wait"); v != "" || !ok {
		t.Errorf(`lookup("wait") = %q, %v; want "", true`, v, ok)
	}
	if v, ok := m.lookup("domain"); v != "" || ok {
		t.Errorf(`lookup("domain") = %q, %v; want "", false`, v, ok)
	}
}
