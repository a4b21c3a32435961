package linkmodel

import (
	"bufio"
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// OpportunityBytes is what one delivery opportunity of a Mahimahi trace carries:
// one MTU-sized IP packet. A trace counts IP bytes (the frame less its Ethernet
// header), whatever the pipe's Count says, so that a full 1500-byte packet takes
// exactly one opportunity, as a trace's "one packet per line" means. (Mahimahi's
// own queue counts 1504, its TUN frame with a 4-byte header.)
const OpportunityBytes = 1500

// Capacity is a link whose capacity changes over time: when a frame finishes
// serializing depends on when it may start. Its clock starts at an epoch that
// Restart moves, so that every page load can meet the same part of a trace.
type Capacity interface {
	// Depart is when a frame of size bytes, free to start at start (the FIFO's
	// head at start), has left the bottleneck. Calls come in order of start.
	Depart(start time.Duration, size int64) time.Duration
	// Delay is the propagation delay for a frame departing at t, and whether the
	// capacity sets it (a schedule's steps do; a trace leaves the pipe's own).
	Delay(t time.Duration) (time.Duration, bool)
	// Restart moves the capacity's time zero so that now is its start offset: the
	// trace or schedule begins again from there.
	Restart(now time.Duration)
	// Epoch is the capacity's current time zero.
	Epoch() time.Duration
	// Period is how long the trace or schedule runs before it repeats.
	Period() time.Duration
	// Kind is "trace" or "schedule".
	Kind() string
	// Size is the bytes of a frameLen-byte frame that use capacity.
	Size(frameLen int, countIP bool) int64
	String() string
}

// ParseTrace reads a Mahimahi trace: one integer per line, each a millisecond
// offset at which one OpportunityBytes delivery opportunity occurs, non-decreasing;
// the trace repeats with a period of its last value. Blank lines are skipped.
func ParseTrace(data []byte) ([]int64, error) {
	var ms []int64
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" {
			continue
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("line %d: %q is not a millisecond offset (a whole number >= 0)", line, s)
		}
		if n := len(ms); n > 0 && v < ms[n-1] {
			return nil, fmt.Errorf("line %d: %d comes after %d (offsets must not decrease)", line, v, ms[n-1])
		}
		ms = append(ms, v)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("no delivery opportunity (the trace is empty)")
	}
	if ms[len(ms)-1] == 0 {
		return nil, fmt.Errorf("the last offset is 0 ms: the trace has no length to repeat over")
	}
	return ms, nil
}

// Trace is a Mahimahi trace's delivery opportunities, repeated from the epoch.
type Trace struct {
	opp    []time.Duration // offsets within one period
	period time.Duration
	epoch  time.Duration
	start  time.Duration // where in the trace a restart begins
	// idx counts opportunities from the epoch (cycle*len(opp) + i); left is what the
	// opportunity idx still carries; idx < 0: none taken since the epoch.
	idx  int64
	left int64
}

// NewTrace makes a trace of millisecond offsets (ParseTrace's).
func NewTrace(ms []int64) (*Trace, error) {
	if len(ms) == 0 || ms[len(ms)-1] <= 0 {
		return nil, fmt.Errorf("a trace needs at least one opportunity and a last offset > 0")
	}
	opp := make([]time.Duration, len(ms))
	for i, v := range ms {
		if v < 0 || (i > 0 && v < ms[i-1]) {
			return nil, fmt.Errorf("offset %d: %d ms is not in order", i, v)
		}
		opp[i] = time.Duration(v) * time.Millisecond
	}
	return &Trace{opp: opp, period: opp[len(opp)-1], idx: -1}, nil
}

func (t *Trace) at(idx int64) time.Duration {
	n := int64(len(t.opp))
	return t.epoch + time.Duration(idx/n)*t.period + t.opp[idx%n]
}

// first is the index of the first opportunity at or after s. An offset equal to
// the period falls on the next cycle's zero: at s exactly there, it comes first.
func (t *Trace) first(s time.Duration) int64 {
	rel := s - t.epoch
	if rel < 0 {
		rel = 0
	}
	n := int64(len(t.opp))
	cycle := int64(rel / t.period)
	within := rel - time.Duration(cycle)*t.period
	if within == 0 && cycle > 0 && t.opp[n-1] == t.period {
		k := int64(sort.Search(len(t.opp), func(k int) bool { return t.opp[k] >= t.period }))
		return (cycle-1)*n + k
	}
	i := int64(sort.Search(len(t.opp), func(k int) bool { return t.opp[k] >= within }))
	if i == n {
		cycle, i = cycle+1, 0
	}
	return cycle*n + i
}

// Depart follows Mahimahi: a frame queued at an opportunity's time may use what is
// left of it; a frame larger than what is left uses the next ones too; what an
// opportunity has left when the queue is empty is lost.
func (t *Trace) Depart(start time.Duration, size int64) time.Duration {
	if t.idx < 0 || t.left <= 0 || t.at(t.idx) < start {
		next := t.idx + 1 // a busy queue takes the very next one
		if t.at(next) < start {
			next = t.first(start)
		}
		t.idx, t.left = next, OpportunityBytes
	}
	for size > t.left {
		size -= t.left
		t.idx++
		t.left = OpportunityBytes
	}
	t.left -= size
	return t.at(t.idx)
}

func (t *Trace) Delay(time.Duration) (time.Duration, bool) { return 0, false }

func (t *Trace) Restart(now time.Duration) { t.epoch, t.idx, t.left = now-t.start, -1, 0 }

// StartAt makes every restart begin at offset start into the trace.
func (t *Trace) StartAt(start time.Duration) { t.start = start }

func (t *Trace) Epoch() time.Duration  { return t.epoch }
func (t *Trace) Period() time.Duration { return t.period }
func (t *Trace) Kind() string          { return "trace" }

// Size counts IP bytes: Mahimahi's opportunities carry IP packets.
func (t *Trace) Size(frameLen int, _ bool) int64 {
	if s := int64(frameLen) - EthernetHeader; s > 0 {
		return s
	}
	return 0
}

func (t *Trace) String() string {
	mbit := float64(len(t.opp)) * OpportunityBytes * 8 / t.period.Seconds() / 1e6
	return fmt.Sprintf("trace of %d opportunities over %v (mean %.3g Mbit/s of IP bytes), from its start at each restart",
		len(t.opp), t.period, mbit)
}

// Step is one piece of a schedule: for Duration the link runs at RateBps (0: an
// outage) with a one-way delay of Delay.
type Step struct {
	Duration time.Duration
	RateBps  uint64
	Delay    time.Duration
}

// Schedule is a piecewise-constant rate and delay, repeated from the epoch.
type Schedule struct {
	steps  []Step
	ends   []time.Duration // end of each step within a period
	period time.Duration
	epoch  time.Duration
	start  time.Duration // where in the schedule a restart begins
}

// NewSchedule checks the steps: each lasts > 0, no rate or delay is negative, and
// some step has a rate (or no frame would ever leave).
func NewSchedule(steps []Step) (*Schedule, error) {
	if len(steps) == 0 {
		return nil, fmt.Errorf("a schedule needs at least one step")
	}
	s := &Schedule{steps: steps}
	rated := false
	for i, st := range steps {
		if st.Duration <= 0 {
			return nil, fmt.Errorf("step %d: duration_us must be > 0 (got %d)", i, st.Duration.Microseconds())
		}
		if st.Delay < 0 {
			return nil, fmt.Errorf("step %d: delay_us must be >= 0 (got %d)", i, st.Delay.Microseconds())
		}
		rated = rated || st.RateBps > 0
		s.period += st.Duration
		s.ends = append(s.ends, s.period)
	}
	if !rated {
		return nil, fmt.Errorf("every step has rate 0: no frame could ever leave")
	}
	return s, nil
}

// step is the step in force at t (t >= epoch) and when it ends.
func (s *Schedule) step(t time.Duration) (Step, time.Duration) {
	rel := t - s.epoch
	if rel < 0 {
		rel = 0
	}
	cycle := rel / s.period
	within := rel - cycle*s.period
	i := sort.Search(len(s.ends), func(k int) bool { return s.ends[k] > within })
	return s.steps[i], s.epoch + cycle*s.period + s.ends[i]
}

// Depart serializes at the rate in force, across step boundaries; an outage step
// holds the frame until a step with a rate.
func (s *Schedule) Depart(start time.Duration, size int64) time.Duration {
	bits := size * 8
	t := start
	for {
		st, end := s.step(t)
		if st.RateBps > 0 {
			// bits the step can still carry, in whole bits
			room := int64(float64(end-t) * float64(st.RateBps) / float64(time.Second))
			if bits <= room {
				return t + time.Duration(bits*int64(time.Second)/int64(st.RateBps))
			}
			bits -= room
		}
		t = end
	}
}

func (s *Schedule) Delay(t time.Duration) (time.Duration, bool) {
	st, _ := s.step(t)
	return st.Delay, true
}

func (s *Schedule) Restart(now time.Duration) { s.epoch = now - s.start }

// StartAt makes every restart begin at offset start into the schedule.
func (s *Schedule) StartAt(start time.Duration) { s.start = start }
func (s *Schedule) Epoch() time.Duration        { return s.epoch }
func (s *Schedule) Period() time.Duration       { return s.period }
func (s *Schedule) Kind() string                { return "schedule" }

// Size counts as the pipe's Count says, as a constant rate does.
func (s *Schedule) Size(frameLen int, countIP bool) int64 {
	size := int64(frameLen)
	if countIP {
		size -= EthernetHeader
	}
	if size < 0 {
		return 0
	}
	return size
}

func (s *Schedule) String() string {
	parts := make([]string, len(s.steps))
	for i, st := range s.steps {
		parts[i] = fmt.Sprintf("%d bit/s and %v for %v", st.RateBps, st.Delay, st.Duration)
	}
	return fmt.Sprintf("schedule (%s), repeated every %v from each restart", strings.Join(parts, "; "), s.period)
}
