package main

import (
	"testing"
)

func TestMedian(t *testing.T) {
	rs := []result{{perSecond: 3}, {perSecond: 1}, {perSecond: 2}}
	if got := median(rs, perSecond); got != 2 {
		t.Errorf("median = %v, want 2", got)
	}
	if got := median(nil, perSecond); got != 0 {
		t.Errorf("median of nothing = %v, want 0", got)
	}
}
