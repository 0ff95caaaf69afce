//go:build brokenreplica

package replica

import (
	"slices"

	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// A deliberately broken build (go build -tags brokenreplica), never
// shipped: the committed store skips every ban, so a leader's cool-downs
// are lost at the next change of leader. The chaos suite builds it to
// show that its history checker reports the grants into cool-downs that
// follow (pkg/testsuites/replication, TestCheckerCatchesABrokenBuild).
func followerEffects(effects []store.Effect) []store.Effect {
	return slices.DeleteFunc(effects, func(e store.Effect) bool { return e.Kind() == store.KindBan })
}
