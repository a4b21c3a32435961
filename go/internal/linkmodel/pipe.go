package linkmodel

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// JitterKind names the jitter experiments, which differ in reordering.
type JitterKind int

const (
	// JitterNone: every packet gets exactly the configured delay.
	JitterNone JitterKind = iota
	// JitterReorder: each packet independently gets delay + U(-jitter, +jitter),
	// clamped at zero, and is released at its own time, so packets overtake.
	JitterReorder
	// JitterSmooth: the delay follows a random curve (knots every JitterInterval,
	// uniform in delay +/- jitter, linearly interpolated) and no packet is released
	// before its predecessor, so the order is kept.
	JitterSmooth
	// JitterStep: the reference study's jitter. The delay is piecewise constant: a
	// level is drawn every JitterInterval, uniform in delay +/- jitter/2 (Jitter is
	// the whole range here, not the amplitude), an increase applies at once and a
	// decrease in two half-steps (halfway at the period's start, the rest half an
	// interval later). Packets are released at their own time, so they overtake
	// each other only where the delay drops, by at most a half-step.
	JitterStep
)

func (k JitterKind) String() string {
	return [...]string{"none", "reorder", "smooth", "step"}[k]
}

// MinStepInterval is the shortest re-draw interval of the step kind: below it a
// "step" is per-packet noise, and the emulator's release timers are not finer.
const MinStepInterval = time.Millisecond

// Params is one direction of the link in model units.
type Params struct {
	// RateBps is the rate in bit/s; 0 = unlimited.
	RateBps uint64
	// Delay is the one-way propagation delay.
	Delay time.Duration
	// Jitter is the +/- amplitude of the delay variation (reorder, smooth), or its
	// whole range (step: the delay stays within Delay +/- Jitter/2).
	Jitter time.Duration
	// Kind selects how the delay varies.
	Kind JitterKind
	// JitterInterval is the knot spacing of the smooth curve, or the time between
	// the step kind's re-draws.
	JitterInterval time.Duration
	// Loss is the entry drop probability in [0, 1).
	Loss float64
	// QueueBytes and QueuePackets limit the FIFO (exactly one > 0 when rated).
	QueueBytes, QueuePackets int64
	// CountIP counts IP bytes (frame minus Ethernet header) instead of frame bytes.
	CountIP bool
	// ECNThresholdBytes marks instead of queueing silently: an ECN-capable packet
	// (ECT or CE) that finds at least this many bytes in the FIFO is forwarded with
	// its ECN field set to CE (ForwardCE), as an AQM with a step marking threshold
	// does (DCTCP's K). 0 = no marking: the queue only drops. A full FIFO still drops
	// every packet, capable or not.
	ECNThresholdBytes int64
	// Capacity, when set, replaces the constant rate (RateBps is 0): a trace or a
	// schedule decides when each frame leaves the bottleneck (capacity.go).
	Capacity Capacity
}

// Rated says whether the link has a bottleneck (a rate or a capacity), so a FIFO.
func (p Params) Rated() bool { return p.RateBps > 0 || p.Capacity != nil }

// Validate reports the first bad value, naming its key.
func (p Params) Validate() error {
	switch {
	case p.Delay < 0:
		return fmt.Errorf("delay_us: must be >= 0 (got %d)", p.Delay.Microseconds())
	case p.Jitter < 0:
		return fmt.Errorf("jitter_us: must be >= 0 (got %d)", p.Jitter.Microseconds())
	case p.Loss < 0 || p.Loss >= 1 || p.Loss != p.Loss:
		return fmt.Errorf("loss: must be in [0, 1) (got %g)", p.Loss)
	case p.QueueBytes < 0:
		return fmt.Errorf("queue_bytes: must be >= 0 (got %d)", p.QueueBytes)
	case p.QueuePackets < 0:
		return fmt.Errorf("queue_packets: must be >= 0 (got %d)", p.QueuePackets)
	case p.Capacity != nil && p.RateBps > 0:
		return fmt.Errorf("rate_bps: %d and a capacity %s: the %s sets the rate (give rate_bps 0)", p.RateBps, p.Capacity.Kind(), p.Capacity.Kind())
	case p.Rated() && (p.QueueBytes > 0) == (p.QueuePackets > 0):
		return fmt.Errorf("queue_bytes/queue_packets: exactly one must be > 0 when the link has a rate (got %d/%d)", p.QueueBytes, p.QueuePackets)
	case p.Capacity != nil && p.Capacity.Kind() == "schedule" && p.Kind != JitterNone:
		return fmt.Errorf("jitter_kind: %s with a schedule, whose steps set the delay (give jitter_kind none)", p.Kind)
	case p.Kind == JitterSmooth && p.Jitter > p.Delay:
		return fmt.Errorf("jitter_us: smooth jitter %d is larger than delay_us %d", p.Jitter.Microseconds(), p.Delay.Microseconds())
	case p.Kind == JitterSmooth && p.Jitter > 0 && p.JitterInterval <= 0:
		return fmt.Errorf("jitter_interval_us: must be > 0 for smooth jitter (got %d)", p.JitterInterval.Microseconds())
	case p.Kind == JitterStep && p.Jitter/2 > p.Delay:
		return fmt.Errorf("jitter_us: step jitter %d (delay_us +/- %d) is larger than delay_us %d can absorb",
			p.Jitter.Microseconds(), (p.Jitter / 2).Microseconds(), p.Delay.Microseconds())
	case p.Kind == JitterStep && p.Jitter > 0 && p.JitterInterval < MinStepInterval:
		return fmt.Errorf("jitter_interval_us: must be >= %d for step jitter (got %d)",
			MinStepInterval.Microseconds(), p.JitterInterval.Microseconds())
	case p.Kind == JitterStep && p.Jitter > p.JitterInterval:
		return fmt.Errorf("jitter_interval_us: step jitter %d needs an interval of at least %d "+
			"(a half-step's drop must pass before the next one; got %d)",
			p.Jitter.Microseconds(), p.Jitter.Microseconds(), p.JitterInterval.Microseconds())
	case p.ECNThresholdBytes < 0:
		return fmt.Errorf("ecn_threshold_bytes: must be >= 0 (got %d)", p.ECNThresholdBytes)
	case p.ECNThresholdBytes > 0 && !p.Rated():
		return fmt.Errorf("ecn_threshold_bytes: %d needs a rate (an unlimited link has no queue to mark from)", p.ECNThresholdBytes)
	case p.ECNThresholdBytes > 0 && p.QueueBytes > 0 && p.ECNThresholdBytes >= p.QueueBytes:
		return fmt.Errorf("ecn_threshold_bytes: %d is not below queue_bytes %d (nothing would be marked before the queue drops)", p.ECNThresholdBytes, p.QueueBytes)
	case p.Kind == JitterNone && p.Jitter != 0:
		return fmt.Errorf("jitter_kind: jitter_us %d needs kind reorder, smooth or step", p.Jitter.Microseconds())
	}
	return nil
}

// Verdict is what the pipe does with one offered frame.
type Verdict int

const (
	// Forward: release the frame at the returned time.
	Forward Verdict = iota
	// DropLoss: dropped by random loss at entry.
	DropLoss
	// DropQueue: dropped because the FIFO was full (tail drop).
	DropQueue
	// ForwardCE: release the frame at the returned time with its ECN field set to
	// CE: it was ECN-capable and found the queue at or above the marking threshold.
	ForwardCE
)

func (v Verdict) String() string {
	return [...]string{"forward", "drop-loss", "drop-queue", "forward-ce"}[v]
}

type inQueue struct {
	departure time.Duration
	size      int64
	gen       uint32 // the capacity's restart the frame was accepted after
}

// Pipe is one direction's state. Not safe for concurrent use.
type Pipe struct {
	p       Params
	lossRng *rand.Rand
	jitRng  *rand.Rand

	lastDeparture time.Duration
	lastRelease   time.Duration
	fifo          []inQueue // packets not yet fully serialized, oldest first
	fifoHead      int
	fifoBytes     int64

	// smooth curve: value va at time ta, vb at tb
	curveInit bool
	ta, tb    time.Duration
	va, vb    time.Duration

	// step levels: period stepK (of JitterInterval, counted on the clock) has level
	// stepCur, the period before it stepPrev
	stepInit          bool
	stepK             int64
	stepPrev, stepCur time.Duration

	// MaxQueueBytes and MaxQueuePackets are the largest occupancy seen.
	MaxQueueBytes, MaxQueuePackets int64

	// a capacity's restarts: gen counts them; accepted is the bytes accepted into
	// the FIFO since the last one (counted as the capacity counts them)
	gen      uint32
	accepted int64
}

// CapacityState is what a capacity link did since its last restart, for the
// statistics file: where in its trace or schedule it is, and the bytes that have
// left the bottleneck since (frames accepted after the restart, counted as the
// capacity counts them: IP bytes for a trace).
type CapacityState struct {
	Kind     string `json:"kind"`
	Restarts uint32 `json:"restarts"`
	EpochNs  int64  `json:"epoch_ns"`
	// EpochUnixNs is the epoch on the wall clock (Unix ns), set by whoever reads both
	// clocks (the forwarder's snapshot), so that spans read on another wall clock of the
	// same host can be placed in the trace; 0: not known
	EpochUnixNs int64  `json:"epoch_unix_ns,omitempty"`
	PositionUs  int64  `json:"position_us"`
	PeriodUs    int64  `json:"period_us"`
	ServedBytes int64  `json:"served_bytes"`
	Describe    string `json:"describe"`
}

// Restart starts the capacity's trace or schedule again at now (no-op without one).
// Frames already queued keep their departures; new ones queue behind them.
func (q *Pipe) Restart(now time.Duration) {
	if q.p.Capacity == nil {
		return
	}
	q.p.Capacity.Restart(now)
	q.gen++
	q.accepted = 0
}

// Capacity reports the capacity's state at now, or nil on a constant link.
func (q *Pipe) Capacity(now time.Duration) *CapacityState {
	c := q.p.Capacity
	if c == nil {
		return nil
	}
	var pending int64
	for _, e := range q.fifo[q.fifoHead:] {
		if e.departure > now && e.gen == q.gen {
			pending += e.size
		}
	}
	pos := now - c.Epoch()
	if pos < 0 {
		pos = 0
	}
	return &CapacityState{Kind: c.Kind(), Restarts: q.gen, EpochNs: int64(c.Epoch()),
		PositionUs: pos.Microseconds(), PeriodUs: c.Period().Microseconds(),
		ServedBytes: q.accepted - pending, Describe: c.String()}
}

// Streams of a seed: separate per direction and per purpose, so the n-th packet
// meets the same loss decision whatever the jitter settings.
const (
	streamLoss   = 0x6c6f7373 // "loss"
	streamJitter = 0x6a697474 // "jitt"
)

// NewPipe makes a pipe; direction ("down" or "up") selects the random streams.
func NewPipe(p Params, seed int64, direction string) (*Pipe, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var dir uint64
	for _, c := range direction {
		dir = dir*131 + uint64(c)
	}
	return &Pipe{
		p:       p,
		lossRng: rand.New(rand.NewPCG(uint64(seed), dir<<32|streamLoss)),
		jitRng:  rand.New(rand.NewPCG(uint64(seed), dir<<32|streamJitter)),
	}, nil
}

// Params returns the pipe's parameters.
func (q *Pipe) Params() Params { return q.p }

// String describes the pipe the way a log header should.
func (q *Pipe) String() string {
	rate := "unlimited"
	if q.p.RateBps > 0 {
		rate = fmt.Sprintf("%d bit/s", q.p.RateBps)
	} else if q.p.Capacity != nil {
		rate = q.p.Capacity.String()
	}
	queue := "none"
	if q.p.QueueBytes > 0 {
		queue = fmt.Sprintf("%d bytes", q.p.QueueBytes)
	} else if q.p.QueuePackets > 0 {
		queue = fmt.Sprintf("%d packets", q.p.QueuePackets)
	}
	count := "ethernet"
	if q.p.CountIP {
		count = "ip"
	}
	if q.p.ECNThresholdBytes > 0 {
		queue += fmt.Sprintf(", ECN marks CE from %d bytes", q.p.ECNThresholdBytes)
	}
	jitter := fmt.Sprintf("+/- %v (%s)", q.p.Jitter, q.p.Kind)
	if q.p.Kind == JitterStep {
		jitter = fmt.Sprintf("+/- %v (step: range %v, re-drawn every %v, decreases in two half-steps)",
			q.p.Jitter/2, q.p.Jitter, q.p.JitterInterval)
	}
	return fmt.Sprintf("loss %g -> fifo %s -> rate %s (%s bytes) -> delay %v %s",
		q.p.Loss, queue, rate, count, q.p.Delay, jitter)
}

// Occupancy is what the FIFO holds at now: the bytes (counted as Params.CountIP
// says) and packets whose serialization has not completed, the one on the wire
// included. It reads the state without changing it; now must not be earlier than
// the last Offer's.
func (q *Pipe) Occupancy(now time.Duration) (bytes, packets int64) {
	for _, e := range q.fifo[q.fifoHead:] {
		if e.departure > now {
			bytes += e.size
			packets++
		}
	}
	return bytes, packets
}

// Offer passes a frame of frameLen bytes arriving at now through the pipe. It
// returns when to release the frame, or why it was dropped; ect says the frame is
// ECN-capable (its IP ECN field is ECT(0), ECT(1) or CE), which may turn Forward
// into ForwardCE. Times are on any monotonic clock; the model never reads a clock.
func (q *Pipe) Offer(now time.Duration, frameLen int, ect bool) (time.Duration, Verdict) {
	// 1. random loss at entry; one draw per packet keeps the stream aligned
	if q.p.Loss > 0 && q.lossRng.Float64() < q.p.Loss {
		return 0, DropLoss
	}
	verdict := Forward
	departure := now
	if q.p.Rated() {
		size := int64(frameLen)
		if q.p.Capacity != nil {
			size = q.p.Capacity.Size(frameLen, q.p.CountIP)
		} else if q.p.CountIP {
			size -= EthernetHeader
			if size < 0 {
				size = 0
			}
		}
		// 2. bounded FIFO: packets whose serialization has completed have left it
		for q.fifoHead < len(q.fifo) && q.fifo[q.fifoHead].departure <= now {
			q.fifoBytes -= q.fifo[q.fifoHead].size
			q.fifoHead++
		}
		if q.fifoHead > 1024 && q.fifoHead*2 > len(q.fifo) {
			q.fifo = append(q.fifo[:0], q.fifo[q.fifoHead:]...)
			q.fifoHead = 0
		}
		n := int64(len(q.fifo) - q.fifoHead)
		if q.p.QueueBytes > 0 && q.fifoBytes+size > q.p.QueueBytes {
			return 0, DropQueue
		}
		if q.p.QueuePackets > 0 && n+1 > q.p.QueuePackets {
			return 0, DropQueue
		}
		if ect && q.p.ECNThresholdBytes > 0 && q.fifoBytes >= q.p.ECNThresholdBytes {
			verdict = ForwardCE
		}
		// 3. serialization on a virtual clock: a late caller never lowers the rate
		start := now
		if q.lastDeparture > start {
			start = q.lastDeparture
		}
		if q.p.Capacity != nil {
			departure = q.p.Capacity.Depart(start, size)
			q.accepted += size
		} else {
			departure = start + time.Duration(size*8*int64(time.Second)/int64(q.p.RateBps))
		}
		q.lastDeparture = departure
		q.fifo = append(q.fifo, inQueue{departure, size, q.gen})
		q.fifoBytes += size
		if q.fifoBytes > q.MaxQueueBytes {
			q.MaxQueueBytes = q.fifoBytes
		}
		if n+1 > q.MaxQueuePackets {
			q.MaxQueuePackets = n + 1
		}
	}
	// 4. propagation delay +/- jitter; a schedule's delay is its step's, in order
	var release time.Duration
	scheduled := false
	if q.p.Capacity != nil {
		var d time.Duration
		if d, scheduled = q.p.Capacity.Delay(departure); scheduled {
			release = departure + d
			if release < q.lastRelease {
				release = q.lastRelease
			}
		}
	}
	if !scheduled {
		release = q.jittered(departure)
	}
	if release > q.lastRelease {
		q.lastRelease = release
	}
	return release, verdict
}

// jittered is a departure plus the propagation delay and its jitter.
func (q *Pipe) jittered(departure time.Duration) time.Duration {
	var release time.Duration
	switch q.p.Kind {
	case JitterReorder:
		d := q.p.Delay + time.Duration((q.jitRng.Float64()*2-1)*float64(q.p.Jitter))
		if d < 0 {
			d = 0
		}
		release = departure + d
	case JitterSmooth:
		release = departure + q.curve(departure)
		if release < q.lastRelease {
			release = q.lastRelease
		}
	case JitterStep:
		release = departure + q.StepDelay(departure)
	default:
		release = departure + q.p.Delay
	}
	return release
}

func (q *Pipe) knot() time.Duration {
	return q.p.Delay + time.Duration((q.jitRng.Float64()*2-1)*float64(q.p.Jitter))
}

// curve is the smooth delay at time t: linear between random knots.
func (q *Pipe) curve(t time.Duration) time.Duration {
	if q.p.Jitter == 0 {
		return q.p.Delay
	}
	if !q.curveInit {
		q.curveInit = true
		q.ta = t - t%q.p.JitterInterval
		q.tb = q.ta + q.p.JitterInterval
		q.va, q.vb = q.knot(), q.knot()
	}
	if t >= q.tb+q.p.JitterInterval {
		// idle for a while: restart the curve at t, keeping the stream deterministic
		skip := (t - q.tb) / q.p.JitterInterval
		q.ta = q.tb + skip*q.p.JitterInterval
		q.tb = q.ta + q.p.JitterInterval
		q.va, q.vb = q.vb, q.knot()
	}
	for t >= q.tb {
		q.ta, q.va = q.tb, q.vb
		q.tb += q.p.JitterInterval
		q.vb = q.knot()
	}
	frac := float64(t-q.ta) / float64(q.p.JitterInterval)
	return q.va + time.Duration(frac*float64(q.vb-q.va))
}

// level is one step level: uniform in Delay +/- Jitter/2.
func (q *Pipe) level() time.Duration {
	return q.p.Delay + time.Duration((q.jitRng.Float64()-0.5)*float64(q.p.Jitter))
}

// StepDelay is the step kind's delay at time t (t never earlier than the previous
// call's). Periods are JitterInterval long, counted from the clock's zero; the
// first call draws its period's level. The levels are i.i.d., so after an idle gap
// of more than two periods only the last two are drawn: same distribution, no
// burst of draws for a long idle link.
func (q *Pipe) StepDelay(t time.Duration) time.Duration {
	if q.p.Jitter == 0 {
		return q.p.Delay
	}
	iv := q.p.JitterInterval
	k := int64(t / iv)
	if t < 0 && t%iv != 0 {
		k--
	}
	if !q.stepInit {
		q.stepInit = true
		q.stepK = k
		q.stepCur = q.level()
		q.stepPrev = q.stepCur
	}
	if k-q.stepK > 2 {
		q.stepK = k - 2
	}
	for q.stepK < k {
		q.stepK++
		q.stepPrev, q.stepCur = q.stepCur, q.level()
	}
	// a decrease: halfway for the first half of the period
	if q.stepCur < q.stepPrev && t-time.Duration(q.stepK)*iv < iv/2 {
		return (q.stepPrev + q.stepCur) / 2
	}
	return q.stepCur
}
