package gquicserver

import (
	"testing"
	"time"
)

// The flight record's peaks: the most bytes in any run of w/BinMS bins.
func TestFlightPeaks(t *testing.T) {
	start := time.Unix(0, 0)
	f := flight{start: start}
	at := func(ms float64) time.Time { return start.Add(time.Duration(ms * float64(time.Millisecond))) }
	// 1000 bytes at 0-2 ms, then 100 in each of the 15 bins from 30 to 58 ms, and 5000 at 100 ms
	f.add(at(0), 600)
	f.add(at(1.9), 400)
	for ms := 30.0; ms < 60; ms += 2 {
		f.add(at(ms), 100)
	}
	f.add(at(100.5), 5000)
	got := f.peaks()
	want := map[string]int64{"10": 5000, "20": 5000, "40": 5000, "80": 5000 + 100*15, "160": 1000 + 1500 + 5000}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("peak over %s ms: %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
	// a zero start takes the first datagram's time
	var g flight
	g.add(time.Now(), 10)
	if len(g.bins) != 1 {
		t.Errorf("zero start: %d bins", len(g.bins))
	}
}
