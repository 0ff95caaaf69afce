package server

import (
	"errors"
	"strings"
	"testing"

	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// TestDecodeAcquireCountry: country takes an ISO 3166-1 alpha-2 code in
// either case and hands the store the upper case; anything else is a 400
// naming the field.
func TestDecodeAcquireCountry(t *testing.T) {
	for _, tc := range []struct {
		body, want, wantErr string
	}{
		{`{"holder":"w","country":"DE"}`, "DE", ""},
		{`{"holder":"w","country":"de"}`, "DE", ""},
		{`{"holder":"w"}`, "", ""},
		{`{"holder":"w","country":"DEU"}`, "", "not an ISO 3166-1 alpha-2"},
		{`{"holder":"w","country":"d"}`, "", "not an ISO 3166-1 alpha-2"},
		{`{"holder":"w","country":"Ü1"}`, "", "not an ISO 3166-1 alpha-2"},
	} {
		req, err := decodeAcquire(strings.NewReader(tc.body))
		var field *store.FieldError
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.body, err)
		case tc.wantErr == "" && req.Country != tc.want:
			t.Errorf("%s: country %q, want %q", tc.body, req.Country, tc.want)
		case tc.wantErr != "" && (!errors.As(err, &field) || field.Field != "country" || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: %v; want a FieldError naming country, saying %q", tc.body, err, tc.wantErr)
		}
	}
}
