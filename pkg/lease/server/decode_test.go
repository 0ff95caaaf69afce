package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
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

// objectSeeds are bodies the strict decoder accepts and refuses.
var objectSeeds = []string{
	`{"holder":"w"}`, ` { "holder" : "w" , "ttl":"30s" } `, "{\t\"holder\":\"w\"}\r\n", `{}`, ` {} `, ``, `   `,
	`{"holder":"w","holder":"x"}`, `{"HOLDER":"w"}`, `{"x":"y"}`, `{"holder":"w",}`, `{,"holder":"w"}`,
	`{"holder":"w"} trailing`, `{"holder":"w"}{}`, `{"holder":"w"`, `{"holder":"w`, `{"holder":}`, `{"holder"}`,
	`{"holder":"\u0041"}`, `{"holder":"a\"b"}`, "{\"holder\":\"a\x01b\"}", "{\"holder\":\"\xff\"}", `{"holder":"ünï"}`,
	`{"holder":null}`, `{"holder":1}`, `null`, `[]`, `"x"`, `{"holder":"w","wait":"1s","session":"s","domain":"d","namespace":"n","selector":"a=b"}`,
	"\ufeff{\"holder\":\"w\"}", `{"holder" "w"}`, `{"holder":"w" "ttl":"1s"}`,
}

// What the strict decoder accepts, encoding/json reads as the same object
// of strings; what encoding/json refuses, the decoder refuses; and every
// refusal is a *FieldError, a 400 (the field named where there is one).
func TestDecodeObjectAgreesWithEncodingJSON(t *testing.T) {
	for _, body := range objectSeeds {
		checkDecodeObject(t, []byte(body))
	}
}

func FuzzDecodeObject(f *testing.F) {
	for _, seed := range objectSeeds {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkDecodeObject(t, body) })
}

func checkDecodeObject(t *testing.T, body []byte) {
	t.Helper()
	got, err := decodeObject(bytes.NewReader(body), acquireFields, false)
	var want map[string]string
	jsonErr := json.Unmarshal(body, &want)
	switch {
	case err == nil && jsonErr != nil:
		t.Errorf("decodeObject(%q) accepts what encoding/json refuses: %v", body, jsonErr)
	case err == nil:
		if diff := cmp.Diff(want, got.asMap(), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("decodeObject(%q): members (-encoding/json +decodeObject):\n%s", body, diff)
		}
	default:
		var fe *store.FieldError
		if !errors.As(err, &fe) {
			t.Errorf("decodeObject(%q): %T %v, want a *FieldError", body, err, err)
		}
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
