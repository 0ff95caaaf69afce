package faultkit

// Lag is one resource's eventual consistency: a fake embeds it in each
// resource and hides a new one from the first reads that would show it
// (a cloud's lists, or gets too, lag behind its creates).
type Lag struct{ hidden int }

// Hide hides the resource from its next n reads (0 shows it at once).
func (l *Lag) Hide(n int) { l.hidden = n }

// Shown counts one read that would show the resource and reports whether
// it does. The fake calls it under its own lock.
func (l *Lag) Shown() bool {
	if l.hidden > 0 {
		l.hidden--
		return false
	}
	return true
}
