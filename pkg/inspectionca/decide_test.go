package inspectionca

import (
	"errors"
	"testing"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/inspection"
)

func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	ca, err := inspection.NewCA("crawlers", t0, 100*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	old, err := inspection.NewCA("crawlers", t0.Add(-90*24*time.Hour), 100*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	const rotateBefore = 30 * 24 * time.Hour
	fresh := inspection.CASet{Current: ca}
	overlapping := inspection.CASet{Current: ca, Previous: old.Cert}
	for name, tc := range map[string]struct {
		opted    bool
		set      inspection.CASet
		parseErr error
		now      time.Time
		want     action
	}{
		"not opted in: remove, whatever is there": {opted: false, set: fresh, now: t0, want: actionRemove},
		"opted, no Secret: issue":                 {opted: true, now: t0, want: actionIssue},
		"opted, a Secret that does not parse":     {opted: true, parseErr: errors.New("junk"), now: t0, want: actionIssue},
		"opted, fresh: keep":                      {opted: true, set: fresh, now: t0.Add(time.Hour), want: actionKeep},
		"a month before its end: rotate":          {opted: true, set: fresh, now: t0.Add(70 * 24 * time.Hour), want: actionRotate},
		"overlap running: keep":                   {opted: true, set: overlapping, now: t0, want: actionKeep},
		"overlap over: prune":                     {opted: true, set: overlapping, now: t0.Add(11 * 24 * time.Hour), want: actionPrune},
	} {
		t.Run(name, func(t *testing.T) {
			if got := decide(tc.opted, tc.set, tc.parseErr, tc.now, rotateBefore); got != tc.want {
				t.Errorf("decide = %s, want %s", got, tc.want)
			}
		})
	}
	// The next look is the earlier of the rotation and the overlap's end.
	if got, want := nextLook(overlapping, t0, rotateBefore), old.Cert.NotAfter.Sub(t0); got != want {
		t.Errorf("nextLook during an overlap = %v, want the old CA's end in %v", got, want)
	}
	if got, want := nextLook(fresh, t0, rotateBefore), ca.Cert.NotAfter.Add(-rotateBefore).Sub(t0); got != want {
		t.Errorf("nextLook = %v, want the rotation in %v", got, want)
	}
}
