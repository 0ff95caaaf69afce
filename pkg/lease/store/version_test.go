package store

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// older is this release with its newest kind and snapshot format taken
// away: a stand-in for the previous release of a future one, whose newest
// kind (here Promoted) it does not read.
var older = Version{EffectFormat: EffectFormat, MaxKind: KindPromoted - 1, SnapshotFormat: 1}

// TestCommonIsWhatEveryMemberReads: the members' versions → what the
// leader may write, and whether it writes the newest kind.
func TestCommonIsWhatEveryMemberReads(t *testing.T) {
	newer := Version{EffectFormat: EffectFormat + 1, MaxKind: kindCount + 3, SnapshotFormat: SnapshotFormat + 1}
	tests := []struct {
		name       string
		members    []Version
		want       Version
		writesNext bool
	}{
		{"alone", nil, ThisRelease, true},
		{"all this release", []Version{ThisRelease, ThisRelease, ThisRelease}, ThisRelease, true},
		{"an older follower", []Version{ThisRelease, older, ThisRelease}, older, false},
		{"one that advertises nothing", []Version{ThisRelease, Unadvertised}, Unadvertised, true},
		{"newer members: this release writes what it knows", []Version{newer, newer}, ThisRelease, true},
		{"each part its own minimum", []Version{{EffectFormat: 1, MaxKind: 30, SnapshotFormat: 1}, {EffectFormat: 2, MaxKind: 5, SnapshotFormat: 9}},
			Version{EffectFormat: 1, MaxKind: 5, SnapshotFormat: 1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Common(tt.members...)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Common (-want +got):\n%s", diff)
			}
			if w := got.Reads(KindPromoted); w != tt.writesNext {
				t.Errorf("writes %s: %v, want %v", KindPromoted, w, tt.writesNext)
			}
		})
	}
}

// recordingJournal keeps the encoded effects.
type recordingJournal struct{ effects [][]byte }

func (j *recordingJournal) Append(b []byte, _ bool) { j.effects = append(j.effects, bytes.Clone(b)) }
func (j *recordingJournal) Seal() Pending           { return nil }

func (j *recordingJournal) kinds() []Kind {
	var out []Kind
	for _, b := range j.effects {
		out = append(out, Kind(b[1]))
	}
	return out
}

// TestStoreWritesOnlyWhatTheGroupReads: with an older member in the group,
// the newest kind is not produced (Promote then only starts the term, as
// the older release did) and a snapshot has the older format, which the
// older release reads; once the group reads it again, both are back.
func TestStoreWritesOnlyWhatTheGroupReads(t *testing.T) {
	j := &recordingJournal{}
	s, _, _ := newTestStore(t, []ProxyInfo{newProxy("p1")}, withStoreConfig(func(c *Config) { c.Journal = j }))
	acquire(t, s, AcquireRequest{Domain: "shop.example"})
	if err := s.WriteFor(Common(ThisRelease, older)); err != nil {
		t.Fatal(err)
	}
	j.effects = nil
	if err := s.Promote(time.Second); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Kind{KindTermStart}, j.kinds()); diff != "" {
		t.Errorf("Promote's effects for an older group (-want +got):\n%s", diff)
	}
	for _, b := range j.effects {
		if err := older.CheckEffect(b); err != nil {
			t.Errorf("the older member would refuse %v: %v", b[:2], err)
		}
	}
	var snap bytes.Buffer
	if err := s.Snapshot(&snap); err != nil {
		t.Fatal(err)
	}
	if f, err := SnapshotFormatOf(snap.Bytes()); err != nil || f != 1 {
		t.Errorf("snapshot format %d (%v), want 1", f, err)
	}
	restored, _, _ := newTestStore(t, nil)
	if err := restored.Restore(&snap); err != nil {
		t.Errorf("restoring the older format: %v", err)
	}

	// The older member is gone.
	if err := s.WriteFor(Common(ThisRelease)); err != nil {
		t.Fatal(err)
	}
	j.effects = nil
	if err := s.Promote(time.Second); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Kind{KindTermStart, KindPromoted}, j.kinds()); diff != "" {
		t.Errorf("Promote's effects for a group of this release (-want +got):\n%s", diff)
	}
	snap.Reset()
	if err := s.Snapshot(&snap); err != nil {
		t.Fatal(err)
	}
	if f, _ := SnapshotFormatOf(snap.Bytes()); f != SnapshotFormat {
		t.Errorf("snapshot format %d, want %d", f, SnapshotFormat)
	}
}

// newerHorizon stands for a kind added after this release's newest: for a
// group that does not read it, it is a Horizon.
type newerHorizon struct{ at time.Time }

func (newerHorizon) Kind() Kind                   { return kindCount }
func (e newerHorizon) olderForm(Version) []Effect { return []Effect{Horizon{at: e.at}} }

// TestNewerKindIsWrittenInItsOlderForm: an effect of a kind the group does
// not read reaches the journal, and the state, in its older form.
func TestNewerKindIsWrittenInItsOlderForm(t *testing.T) {
	j := &recordingJournal{}
	s, _, _ := newTestStore(t, nil, withStoreConfig(func(c *Config) { c.Journal = j }))
	j.effects = nil
	at := t0.Add(time.Hour)
	s.mu.Lock()
	s.commit(newerHorizon{at: at})
	horizon := s.st.term.horizon
	s.mu.Unlock()
	if diff := cmp.Diff([]Kind{KindHorizon}, j.kinds()); diff != "" {
		t.Errorf("journaled (-want +got):\n%s", diff)
	}
	if !horizon.Equal(at) {
		t.Errorf("horizon %v, want %v", horizon, at)
	}
	if err := older.CheckEffect(EncodeEffect(nil, Promoted{at: at})); !errors.Is(err, ErrUnknownEffect) {
		t.Errorf("the older release on Promoted: %v, want ErrUnknownEffect", err)
	}
	if err := s.WriteFor(Version{}); err == nil {
		t.Error("WriteFor took the zero version")
	}
}
