package dashboard

import (
	"errors"
	"testing"
)

// A released slot is free again, once, however often release is called.
func TestSlotRelease(t *testing.T) {
	s := newSlots(1, 1, 0)
	release, err := s.take("a", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.take("b", false); !errors.Is(err, errViewersFull) {
		t.Fatalf("second take: %v, want %v", err, errViewersFull)
	}
	release()
	release()
	if _, err := s.take("b", false); err != nil {
		t.Fatalf("after release: %v", err)
	}
	if _, err := s.take("c", false); !errors.Is(err, errViewersFull) {
		t.Errorf("a double release freed two slots: %v", err)
	}
	if len(s.byIdentity) != 1 || s.open != 1 {
		t.Errorf("open %d, by identity %v", s.open, s.byIdentity)
	}
}
