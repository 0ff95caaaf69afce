package lease

import (
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
