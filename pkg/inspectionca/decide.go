package inspectionca

import (
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/inspection"
)

// action is what a sync does with a namespace's CA.
type action string

const (
	actionKeep   action = "keep"
	actionIssue  action = "issue"  // no usable CA: make one
	actionRotate action = "rotate" // the current one ends soon: a new one, the old trusted meanwhile
	actionPrune  action = "prune"  // the previous one has ended: stop publishing it
	actionRemove action = "remove" // the namespace left inspection (or is gone)
)

// decide is what to do with a namespace's CA: opted says whether the
// namespace asked for inspection, set and parseErr are its Secret's
// content (set zero and parseErr nil without a Secret). It is pure.
func decide(opted bool, set inspection.CASet, parseErr error, now time.Time, rotateBefore time.Duration) action {
	switch {
	case !opted:
		return actionRemove
	case set.Current == nil || parseErr != nil:
		return actionIssue
	case set.Current.DueForRotation(now, rotateBefore):
		return actionRotate
	case set.Previous != nil && !now.Before(set.Previous.NotAfter):
		return actionPrune
	}
	return actionKeep
}

// nextLook is when the CA set needs a look again: its rotation, or the
// end of the previous CA's overlap, whichever comes first.
func nextLook(set inspection.CASet, now time.Time, rotateBefore time.Duration) time.Duration {
	at := set.Current.Cert.NotAfter.Add(-rotateBefore)
	if set.Previous != nil && set.Previous.NotAfter.Before(at) {
		at = set.Previous.NotAfter
	}
	return max(at.Sub(now), time.Second)
}
