package linkmodel

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"
)

const ms = time.Millisecond

func tracePipe(t *testing.T, offsets []int64, queuePackets int64) *Pipe {
	t.Helper()
	tr, err := NewTrace(offsets)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPipe(Params{Capacity: tr, QueuePackets: queuePackets, Delay: 10 * ms}, 1, "down")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParseTraceRefusesWhatMahimahiWouldNotRun(t *testing.T) {
	for in, want := range map[string]string{
		"":          "empty",
		"\n\n":      "empty",
		"0\n0\n":    "last offset is 0",
		"5\n3\n":    "3 comes after 5",
		"1\nx\n":    `"x" is not a millisecond offset`,
		"1\n-2\n":   `"-2" is not`,
		"1\n2.5\n":  `"2.5" is not`,
		"1\n2\n 7 ": "",
	} {
		ms, err := ParseTrace([]byte(in))
		if want == "" {
			if err != nil || len(ms) != 3 || ms[2] != 7 {
				t.Errorf("%q: got %v, %v", in, ms, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one containing %q", in, err, want)
		}
	}
}

// A full-size packet takes one opportunity; a packet waits for the next one; the
// trace repeats with the period of its last offset.
func TestTraceReleasesAtItsOpportunitiesAndRepeats(t *testing.T) {
	p := tracePipe(t, []int64{2, 5, 10}, 100)
	var got []time.Duration
	for i := 0; i < 7; i++ {
		at, v := p.Offer(0, 1514, false) // 1500 IP bytes: one opportunity each
		if v != Forward {
			t.Fatalf("packet %d: %v", i, v)
		}
		got = append(got, at-10*ms)
	}
	want := []time.Duration{2 * ms, 5 * ms, 10 * ms, 12 * ms, 15 * ms, 20 * ms, 22 * ms}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("departures %v, want %v", got, want)
	}
}

// Small packets share an opportunity's 1500 bytes; a packet that arrives after an
// opportunity cannot use what it had left (Mahimahi's rule).
func TestTraceSmallPacketsShareAnOpportunityOnlyWhileQueued(t *testing.T) {
	p := tracePipe(t, []int64{1, 2, 3, 4}, 100)
	a, _ := p.Offer(0, 514, false)  // 500 IP bytes at 1 ms
	b, _ := p.Offer(0, 514, false)  // 500 more at 1 ms
	c, _ := p.Offer(0, 1014, false) // 1000: 500 left at 1 ms, the rest at 2 ms
	if a != 11*ms || b != 11*ms || c != 12*ms {
		t.Fatalf("got %v %v %v", a, b, c)
	}
	// opportunity 2 ms has 1500-500 = 1000 bytes left, but a packet arriving at 2.5 ms
	// cannot use them: it leaves at 3 ms
	d, _ := p.Offer(2500*time.Microsecond, 114, false)
	if d != 13*ms {
		t.Fatalf("late packet left at %v, want 13ms", d)
	}
}

// Idle for several periods, a packet takes the next opportunity of the current one.
func TestTraceAfterAnIdleGapUsesTheCurrentCycle(t *testing.T) {
	p := tracePipe(t, []int64{3, 7, 10}, 100)
	p.Offer(0, 1514, false)
	at, _ := p.Offer(1234*ms+500*time.Microsecond, 1514, false) // cycle 123, 4.5 ms in
	if want := 1237*ms + 10*ms; at != want {
		t.Fatalf("left at %v, want %v", at, want)
	}
}

// Restart moves the trace's start to now; bytes served count since it.
func TestTraceRestartAndServedBytes(t *testing.T) {
	p := tracePipe(t, []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 100)
	for i := 0; i < 4; i++ {
		p.Offer(0, 1514, false)
	}
	if s := p.Capacity(3 * ms); s.ServedBytes != 3*1500 || s.Restarts != 0 || s.Kind != "trace" {
		t.Fatalf("before restart: %+v", s)
	}
	p.Restart(100*ms + 500*time.Microsecond)
	at, _ := p.Offer(100*ms+600*time.Microsecond, 1514, false)
	if want := 101*ms + 500*time.Microsecond + 10*ms; at != want {
		t.Fatalf("after restart left at %v, want %v", at, want)
	}
	s := p.Capacity(101 * ms)
	if s.ServedBytes != 0 || s.Restarts != 1 || s.PositionUs != 500 || s.PeriodUs != 10000 {
		t.Fatalf("at 101 ms: %+v", s)
	}
	if s := p.Capacity(102 * ms); s.ServedBytes != 1500 {
		t.Fatalf("at 102 ms: %+v", s)
	}
}

// Over a saturated minute the trace carries exactly its opportunities' bytes, the
// three at the period's own offset included (they fall on the next cycle's zero).
func TestTraceSaturatedCarriesItsOpportunities(t *testing.T) {
	offsets := []int64{}
	for ms := int64(1); ms <= 1000; ms++ {
		for k := int64(0); k < (ms-1)%4; k++ { // 0-3 per ms, 3 at 1000 ms: 1500 a second
			offsets = append(offsets, ms)
		}
	}
	p := tracePipe(t, offsets, 1000)
	var last time.Duration
	sent := 0
	now := time.Duration(0)
	for now < 60*time.Second {
		at, v := p.Offer(now, 1514, false)
		if v == Forward {
			sent++
			last = at
		}
		now += 100 * time.Microsecond // 15000 packets/s offered: 10x the trace
	}
	s := p.Capacity(60 * time.Second)
	if s.ServedBytes != 60*1500*1500 {
		t.Fatalf("served %d bytes in 60 s, want %d", s.ServedBytes, 60*1500*1500)
	}
	if last < 60*time.Second {
		t.Fatalf("last departure %v", last)
	}
}

func TestScheduleSerializesAtTheRateInForce(t *testing.T) {
	s, err := NewSchedule([]Step{
		{Duration: 10 * ms, RateBps: 12_000_000, Delay: 5 * ms},
		{Duration: 5 * ms, RateBps: 0, Delay: 5 * ms},
		{Duration: 10 * ms, RateBps: 1_200_000, Delay: 1 * ms},
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPipe(Params{Capacity: s, QueuePackets: 100}, 1, "down")
	if err != nil {
		t.Fatal(err)
	}
	// 1500 bytes at 12 Mbit/s: 1 ms
	if at, _ := p.Offer(0, 1500, false); at != 1*ms+5*ms {
		t.Fatalf("first at %v", at)
	}
	// at 9.5 ms: 0.5 ms of 12 Mbit/s carries 750 bytes, the outage holds the rest
	// until 15 ms, then 750 bytes at 1.2 Mbit/s take 5 ms: departs 20 ms, delay 1 ms
	if at, _ := p.Offer(9500*time.Microsecond, 1500, false); at != 21*ms {
		t.Fatalf("across the outage at %v, want 21ms", at)
	}
	// the schedule repeats: at 25 ms a new period at 12 Mbit/s with 5 ms of delay
	// (1 ms at 1.2 Mbit/s: departs at 25 ms, the new period's first instant, whose
	// delay it takes)
	at1, _ := p.Offer(24*ms, 150, false)
	at2, _ := p.Offer(24*ms, 1500, false)
	if at1 != 30*ms || at2 != 31*ms {
		t.Fatalf("around the period: %v %v", at1, at2)
	}
}

// A delay that drops does not reorder: frames leave in the order they came.
func TestScheduleDelayDropKeepsOrder(t *testing.T) {
	s, _ := NewSchedule([]Step{{Duration: 10 * ms, RateBps: 1e9, Delay: 50 * ms},
		{Duration: 10 * ms, RateBps: 1e9, Delay: 5 * ms}})
	p, _ := NewPipe(Params{Capacity: s, QueuePackets: 100}, 1, "down")
	a, _ := p.Offer(9*ms, 100, false)
	b, _ := p.Offer(11*ms, 100, false)
	if b < a {
		t.Fatalf("reordered: %v then %v", a, b)
	}
}

func TestScheduleAndTraceRefuseBadValues(t *testing.T) {
	for _, steps := range [][]Step{nil, {{Duration: 0, RateBps: 1}}, {{Duration: ms, Delay: -1}},
		{{Duration: ms, RateBps: 0}}} {
		if _, err := NewSchedule(steps); err == nil {
			t.Errorf("%v accepted", steps)
		}
	}
	tr, _ := NewTrace([]int64{1})
	if err := (Params{Capacity: tr, RateBps: 1000, QueuePackets: 1}).Validate(); err == nil ||
		!strings.Contains(err.Error(), "rate_bps") {
		t.Errorf("a trace with a rate: %v", err)
	}
	if err := (Params{Capacity: tr}).Validate(); err == nil || !strings.Contains(err.Error(), "queue") {
		t.Errorf("a trace without a queue: %v", err)
	}
	s, _ := NewSchedule([]Step{{Duration: ms, RateBps: 1}})
	if err := (Params{Capacity: s, QueuePackets: 1, Kind: JitterStep, Jitter: ms, JitterInterval: ms}).Validate(); err == nil {
		t.Error("a schedule with jitter accepted")
	}
}

// The config names the trace by file and digest; a file whose digest differs is
// refused, naming both; ParseConfig reads it with the caller's reader.
func TestConfigTraceIsCheckedByDigest(t *testing.T) {
	body := []byte("1\n2\n3\n")
	sum := sha256.Sum256(body)
	good := hex.EncodeToString(sum[:])
	dc := DirectionConfig{QueuePackets: 10, Capacity: &CapacityConfig{Kind: "trace", File: "down.trace", Sha256: good, Data: body}}
	p, err := dc.Params()
	if err != nil || p.Capacity == nil || p.Capacity.Period() != 3*ms {
		t.Fatalf("good trace: %v %v", p, err)
	}
	dc.Capacity.Sha256 = strings.Repeat("0", 64)
	if _, err := dc.Params(); err == nil || !strings.Contains(err.Error(), good) {
		t.Fatalf("wrong digest: %v", err)
	}
	dc.Capacity.Data = nil
	if _, err := dc.Params(); err == nil || !strings.Contains(err.Error(), "was not read") {
		t.Fatalf("unread file: %v", err)
	}
	dc.Capacity = &CapacityConfig{Kind: "schedule", Steps: []StepConfig{{DurationUs: 1000, RateBps: 0}}}
	if _, err := dc.Params(); err == nil || !strings.Contains(err.Error(), "capacity.steps") {
		t.Fatalf("all-outage schedule: %v", err)
	}
	dc.Capacity = &CapacityConfig{Kind: "wave"}
	if _, err := dc.Params(); err == nil || !strings.Contains(err.Error(), `"wave"`) {
		t.Fatalf("unknown kind: %v", err)
	}
	cfg := `{"format":1,"server_if":"a","client_if":"b","seed":1,"directions":{
	 "down":{"rate_bps":0,"delay_us":0,"jitter_us":0,"jitter_kind":"none","jitter_interval_us":0,"loss":0,
	  "queue_bytes":0,"queue_packets":10,"count":"ethernet",
	  "capacity":{"kind":"trace","file":"down.trace","sha256":"` + good + `"}},
	 "up":{"rate_bps":0,"delay_us":0,"jitter_us":0,"jitter_kind":"none","jitter_interval_us":0,"loss":0,
	  "queue_bytes":0,"queue_packets":0,"count":"ethernet"}}}`
	read := func(path string) ([]byte, error) {
		if path != "down.trace" {
			return nil, fmt.Errorf("no %s", path)
		}
		return body, nil
	}
	if _, err := ParseConfig([]byte(cfg), read); err != nil {
		t.Fatalf("parse with a reader: %v", err)
	}
	if _, err := ParseConfig([]byte(cfg), nil); err == nil || !strings.Contains(err.Error(), "no reader for down.trace") {
		t.Fatalf("parse without a reader: %v", err)
	}
}
