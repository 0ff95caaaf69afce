//go:build !brokenreplica

package replica

import "github.com/proxyfleet/proxy-operator/pkg/lease/store"

// followerEffects is what the committed store applies of a log entry: all
// of it. A build with the tag brokenreplica drops one kind instead
// (brokenreplica.go), for the chaos suite to show that its checker
// catches a replica that loses state.
func followerEffects(effects []store.Effect) []store.Effect { return effects }
