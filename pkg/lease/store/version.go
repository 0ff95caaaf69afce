package store

import (
	"fmt"
)

// What a release of the store reads, and what a store writes for a group
// of replicas of several releases: a `helm upgrade` runs old and new
// replicas side by side, and a `helm rollback` meets a log a newer release
// wrote (docs/decisions/0385-effects-and-snapshots-versioned-per-group.md).
// Each replica advertises its release's Version; the leader writes only
// what every member reads (Common, Store.WriteFor).

// Version is what a release reads: the highest effect format and kind and
// the highest snapshot format. Every lower format and kind is read too:
// a kind is never renumbered and a format never dropped.
type Version struct {
	EffectFormat   uint8  `json:"effectFormat"`
	MaxKind        Kind   `json:"maxKind"`
	SnapshotFormat uint64 `json:"snapshotFormat"`
}

// ThisRelease is what this release reads (and, alone, writes).
var ThisRelease = Version{EffectFormat: EffectFormat, MaxKind: kindCount - 1, SnapshotFormat: SnapshotFormat}

// Unadvertised is what a replica that advertises nothing reads: the
// release before versions were advertised, which read what this one reads.
var Unadvertised = Version{EffectFormat: 1, MaxKind: KindPromoted, SnapshotFormat: 2}

func (v Version) String() string {
	return fmt.Sprintf("effect format %d, kinds up to %d (%s), snapshot format %d", v.EffectFormat, v.MaxKind, v.MaxKind, v.SnapshotFormat)
}

// Validate says whether v is a version this release can write for: every
// replicated release read effect format 1 and snapshot format 1.
func (v Version) Validate() error {
	if v.EffectFormat < 1 || v.MaxKind < 1 || v.SnapshotFormat < 1 {
		return fmt.Errorf("not a version of the lease store: %s", v)
	}
	return nil
}

// Reads says whether v reads an effect of kind k.
func (v Version) Reads(k Kind) bool { return k >= 1 && k <= v.MaxKind }

// Common is what every one of versions reads, and this release writes:
// each part's minimum over them and ThisRelease. A leader computes it over
// every member of its group, voters and followers alike, since each
// applies every entry.
func Common(versions ...Version) Version {
	c := ThisRelease
	for _, v := range versions {
		c.EffectFormat = min(c.EffectFormat, v.EffectFormat)
		c.MaxKind = min(c.MaxKind, v.MaxKind)
		c.SnapshotFormat = min(c.SnapshotFormat, v.SnapshotFormat)
	}
	return c
}

// CheckEffect returns ErrUnknownEffect, naming the kind and the format,
// when v would refuse the encoded effect b (what an older replica's
// DecodeEffect does); nil when it reads it.
func (v Version) CheckEffect(b []byte) error {
	switch {
	case len(b) < 2:
		return fmt.Errorf("%w: %d bytes", ErrUnknownEffect, len(b))
	case b[0] > v.EffectFormat:
		return fmt.Errorf("%w: effect format %d (this replica reads up to %d)", ErrUnknownEffect, b[0], v.EffectFormat)
	case !v.Reads(Kind(b[1])):
		return fmt.Errorf("%w: effect kind %d, format %d (this replica reads kinds up to %d)", ErrUnknownEffect, b[1], b[0], v.MaxKind)
	}
	return nil
}

// olderForm is an effect of a kind added after the first replicated
// release: what it is for a group that does not read its kind. An empty
// result means the store does without it, as the older release did; the
// store then applies nothing, so that its state stays the same as the
// followers'.
type olderForm interface {
	olderForm(Version) []Effect
}

// SnapshotFormatOf is the format of the snapshot b, or an error when b is
// not a snapshot.
func SnapshotFormatOf(b []byte) (uint64, error) {
	if len(b) < len(snapshotMagic) || string(b[:len(snapshotMagic)]) != snapshotMagic {
		return 0, fmt.Errorf("%w: no magic", ErrUnknownSnapshot)
	}
	r := fieldReader{b: b[len(snapshotMagic):]}
	f := r.uint()
	if r.err != nil {
		return 0, fmt.Errorf("%w: %w", ErrUnknownSnapshot, r.err)
	}
	return f, nil
}
