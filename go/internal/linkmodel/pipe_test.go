package linkmodel

import (
	"math"
	"strings"
	"testing"
	"time"
)

func mustPipe(t *testing.T, p Params, seed int64, dir string) *Pipe {
	t.Helper()
	q, err := NewPipe(p, seed, dir)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// 1514-byte frames at 12.112 Mbit/s take exactly 1 ms each.
const rate1ms = 1514 * 8 * 1000

func TestDepartureTimesOnTheVirtualClock(t *testing.T) {
	q := mustPipe(t, Params{RateBps: rate1ms, Delay: 10 * time.Millisecond, QueuePackets: 100}, 1, "down")
	// three back-to-back frames at t=0: serialized one after another
	for i, want := range []time.Duration{11, 12, 13} {
		rel, v := q.Offer(0, 1514, false)
		if v != Forward || rel != want*time.Millisecond {
			t.Fatalf("frame %d: got %v %v, want %v", i, rel, v, want*time.Millisecond)
		}
	}
	// an arrival after the link went idle starts at its own arrival time
	if rel, _ := q.Offer(50*time.Millisecond, 1514, false); rel != 61*time.Millisecond {
		t.Fatalf("idle link: got %v, want 61ms", rel)
	}
	// a late caller (arrival before the last departure) never gets an earlier slot
	if rel, _ := q.Offer(50500*time.Microsecond, 1514, false); rel != 62*time.Millisecond {
		t.Fatalf("busy link: got %v, want 62ms", rel)
	}
}

func TestIPCountingExcludesTheEthernetHeader(t *testing.T) {
	q := mustPipe(t, Params{RateBps: 1500 * 8 * 1000, QueuePackets: 10, CountIP: true}, 1, "down")
	if rel, _ := q.Offer(0, 1514, false); rel != time.Millisecond {
		t.Fatalf("got %v, want 1ms (1500 IP bytes)", rel)
	}
}

func TestTailDropAtTheByteLimit(t *testing.T) {
	q := mustPipe(t, Params{RateBps: rate1ms, QueueBytes: 3 * 1514}, 1, "up")
	for i := 0; i < 3; i++ {
		if _, v := q.Offer(0, 1514, false); v != Forward {
			t.Fatalf("frame %d dropped below the limit", i)
		}
	}
	if _, v := q.Offer(0, 1514, false); v != DropQueue {
		t.Fatalf("4th frame: got %v, want drop-queue", v)
	}
	// a smaller frame still fits? no: the queue is full to the byte
	if _, v := q.Offer(0, 60, false); v != DropQueue {
		t.Fatalf("60-byte frame into a full queue: got %v", v)
	}
	// after the first frame has left (t=1ms) there is room for exactly one more
	if _, v := q.Offer(time.Millisecond, 1514, false); v != Forward {
		t.Fatalf("after one departure: got %v", v)
	}
	if _, v := q.Offer(time.Millisecond, 1514, false); v != DropQueue {
		t.Fatalf("second frame after one departure: got %v", v)
	}
	if q.MaxQueueBytes != 3*1514 || q.MaxQueuePackets != 3 {
		t.Fatalf("max occupancy %d bytes %d packets", q.MaxQueueBytes, q.MaxQueuePackets)
	}
}

func TestTailDropAtThePacketLimit(t *testing.T) {
	q := mustPipe(t, Params{RateBps: rate1ms, QueuePackets: 5}, 1, "up")
	fwd := 0
	for i := 0; i < 8; i++ {
		if _, v := q.Offer(0, 100, false); v == Forward {
			fwd++
		}
	}
	if fwd != 5 {
		t.Fatalf("forwarded %d, want 5", fwd)
	}
}

func TestLossFrequencyWithAFixedSeed(t *testing.T) {
	const n, p = 200000, 0.01
	q := mustPipe(t, Params{Loss: p}, 42, "down")
	lost := 0
	for i := 0; i < n; i++ {
		if _, v := q.Offer(time.Duration(i), 100, false); v == DropLoss {
			lost++
		}
	}
	sd := math.Sqrt(n * p * (1 - p))
	if math.Abs(float64(lost)-n*p) > 4*sd {
		t.Fatalf("lost %d of %d, want %g +/- %g", lost, n, n*p, 4*sd)
	}
}

func drops(t *testing.T, p Params, seed int64, dir string, n int) []int {
	q := mustPipe(t, p, seed, dir)
	var out []int
	for i := 0; i < n; i++ {
		if _, v := q.Offer(time.Duration(i)*time.Millisecond, 100, false); v == DropLoss {
			out = append(out, i)
		}
	}
	return out
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSameSeedSameDropsWhateverTheJitter(t *testing.T) {
	base := Params{Loss: 0.05, Delay: 20 * time.Millisecond}
	a := drops(t, base, 7, "down", 5000)
	withJitter := base
	withJitter.Kind, withJitter.Jitter = JitterReorder, 10*time.Millisecond
	if b := drops(t, withJitter, 7, "down", 5000); !equal(a, b) {
		t.Fatal("jitter changed the loss pattern")
	}
	withJitter.Kind, withJitter.JitterInterval = JitterStep, 100*time.Millisecond
	if b := drops(t, withJitter, 7, "down", 5000); !equal(a, b) {
		t.Fatal("step jitter changed the loss pattern")
	}
	if b := drops(t, base, 7, "down", 5000); !equal(a, b) {
		t.Fatal("same seed, different drops")
	}
	if b := drops(t, base, 8, "down", 5000); equal(a, b) {
		t.Fatal("different seeds, same drops")
	}
	if b := drops(t, base, 7, "up", 5000); equal(a, b) {
		t.Fatal("both directions share one loss stream")
	}
}

func reorderings(t *testing.T, p Params) int {
	q := mustPipe(t, p, 3, "down")
	var last time.Duration
	n := 0
	for i := 0; i < 20000; i++ {
		rel, v := q.Offer(time.Duration(i)*200*time.Microsecond, 1000, false)
		if v != Forward {
			continue
		}
		if rel < last {
			n++
		} else {
			last = rel
		}
	}
	return n
}

func TestReorderingOnlyInTheOvertakingKinds(t *testing.T) {
	base := Params{RateBps: 100e6, QueuePackets: 1000, Delay: 50 * time.Millisecond,
		Jitter: 20 * time.Millisecond, JitterInterval: 20 * time.Millisecond}
	for _, k := range []JitterKind{JitterReorder, JitterSmooth, JitterStep} {
		p := base
		p.Kind = k
		n := reorderings(t, p)
		if (n > 0) != (k != JitterSmooth) {
			t.Fatalf("%v: %d reorderings", k, n)
		}
	}
	p := base
	p.Jitter = 0
	if n := reorderings(t, p); n != 0 {
		t.Fatalf("no jitter: %d reorderings", n)
	}
}

func TestJitterStaysInItsBand(t *testing.T) {
	for _, k := range []JitterKind{JitterReorder, JitterSmooth} {
		p := Params{Delay: 56 * time.Millisecond, Jitter: 50 * time.Millisecond, Kind: k,
			JitterInterval: 100 * time.Millisecond}
		q := mustPipe(t, p, 1, "up")
		minD, maxD := time.Hour, time.Duration(0)
		for i := 0; i < 50000; i++ {
			now := time.Duration(i) * time.Millisecond
			rel, _ := q.Offer(now, 100, false)
			d := rel - now
			minD, maxD = min(minD, d), max(maxD, d)
		}
		if minD < 6*time.Millisecond || maxD > 106*time.Millisecond || maxD-minD < 80*time.Millisecond {
			t.Fatalf("%v: delay range %v..%v", k, minD, maxD)
		}
	}
}

func TestValidationNamesTheKey(t *testing.T) {
	cases := map[string]DirectionConfig{
		"loss: must be in [0, 1) (got 1)":             {Loss: 1, QueuePackets: 1},
		"delay_us: must be >= 0 (got -5)":             {DelayUs: -5},
		"jitter_kind: unknown \"wobbly\"":             {JitterKind: "wobbly"},
		"count: unknown \"bits\"":                     {Count: "bits"},
		"exactly one must be > 0":                     {RateBps: 1000},
		"smooth jitter 20 is larger than delay_us 10": {DelayUs: 10, JitterUs: 20, JitterKind: "smooth", JitterIntervalUs: 1},
		"needs kind reorder, smooth or step":          {DelayUs: 10, JitterUs: 5},
		"step jitter 30 (delay_us +/- 15) is larger than delay_us 10 can absorb": {
			DelayUs: 10, JitterUs: 30, JitterKind: "step", JitterIntervalUs: 100000},
		"jitter_interval_us: must be >= 1000 for step jitter (got 999)": {
			DelayUs: 56000, JitterUs: 500, JitterKind: "step", JitterIntervalUs: 999},
		"jitter_interval_us: step jitter 50000 needs an interval of at least 50000": {
			DelayUs: 56000, JitterUs: 50000, JitterKind: "step", JitterIntervalUs: 40000},
	}
	for want, dc := range cases {
		_, err := dc.Params()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: got %v, want %q", dc, err, want)
		}
	}
}

func TestParseConfig(t *testing.T) {
	good := `{"format":1,"server_if":"srv","client_if":"cli","seed":1,"directions":{
	 "down":{"rate_bps":1000000,"delay_us":1000,"jitter_us":0,"jitter_kind":"none","jitter_interval_us":1,"loss":0,"queue_bytes":0,"queue_packets":10,"count":"ethernet"},
	 "up":{"rate_bps":0,"delay_us":1000,"jitter_us":0,"jitter_kind":"none","jitter_interval_us":1,"loss":0,"queue_bytes":0,"queue_packets":0,"count":"ip"}}}`
	if _, err := ParseConfig([]byte(good), nil); err != nil {
		t.Fatal(err)
	}
	bad := map[string]string{
		`"format":1,`:       `"format":2,`,
		`"seed":1`:          `"seed":1,"extra":true`,
		`"delay_us":1000,`:  `"delay_us":-1,`,
		`"client_if":"cli"`: `"client_if":"srv"`,
	}
	for from, to := range bad {
		if _, err := ParseConfig([]byte(strings.Replace(good, from, to, 1)), nil); err == nil {
			t.Errorf("%s accepted", to)
		}
	}
}

func TestOccupancyCountsWhatHasNotLeft(t *testing.T) {
	q := mustPipe(t, Params{RateBps: rate1ms, QueuePackets: 10}, 1, "up")
	for i := 0; i < 3; i++ { // 1514-byte frames serialize in 1 ms each: depart at 1, 2, 3 ms
		if _, v := q.Offer(0, 1514, false); v != Forward {
			t.Fatalf("frame %d dropped", i)
		}
	}
	for _, tc := range []struct {
		at             time.Duration
		bytes, packets int64
	}{
		{0, 3 * 1514, 3}, {time.Millisecond / 2, 3 * 1514, 3}, {time.Millisecond, 2 * 1514, 2},
		{2500 * time.Microsecond, 1514, 1}, {3 * time.Millisecond, 0, 0}, {time.Second, 0, 0},
	} {
		if b, p := q.Occupancy(tc.at); b != tc.bytes || p != tc.packets {
			t.Fatalf("at %v: %d bytes %d packets, want %d and %d", tc.at, b, p, tc.bytes, tc.packets)
		}
	}
	// reading changes nothing: the queue is still full at 0 and takes no 11th frame early
	if b, p := q.Occupancy(0); b != 3*1514 || p != 3 {
		t.Fatalf("a read changed the state: %d bytes %d packets", b, p)
	}
	if q.MaxQueuePackets != 3 {
		t.Fatalf("max %d packets", q.MaxQueuePackets)
	}
}

// the study's "50 ms jitter" at 112 ms: 56 ms each way, re-drawn every 100 ms
var studyStep = Params{Delay: 56 * time.Millisecond, Jitter: 50 * time.Millisecond, Kind: JitterStep,
	JitterInterval: 100 * time.Millisecond}

func TestStepLevelsAreUniformInTheRange(t *testing.T) {
	q := mustPipe(t, studyStep, 11, "down")
	const periods = 20000
	iv := studyStep.JitterInterval
	lo, hi := studyStep.Delay-studyStep.Jitter/2, studyStep.Delay+studyStep.Jitter/2
	var bins [10]int
	sum := 0.0
	for k := 0; k < periods; k++ {
		// the second half of a period always holds its own level
		d := q.StepDelay(time.Duration(k)*iv + 3*iv/4)
		if d < lo || d > hi {
			t.Fatalf("period %d: level %v outside %v..%v", k, d, lo, hi)
		}
		sum += float64(d)
		bins[min(9, int(float64(d-lo)/float64(hi-lo)*10))]++
	}
	mean := time.Duration(sum / periods)
	se := float64(studyStep.Jitter) / math.Sqrt(12) / math.Sqrt(periods)
	if math.Abs(float64(mean-studyStep.Delay)) > 4*se {
		t.Fatalf("mean level %v, want %v +/- %v", mean, studyStep.Delay, time.Duration(4*se))
	}
	// each tenth of the range holds a tenth of the levels (binomial, 5 sd)
	sd := math.Sqrt(periods * 0.1 * 0.9)
	for i, n := range bins {
		if math.Abs(float64(n)-periods/10) > 5*sd {
			t.Fatalf("tenth %d of the range holds %d of %d levels: %v", i, n, periods, bins)
		}
	}
}

func TestStepDecreasesInTwoHalfStepsIncreasesAtOnce(t *testing.T) {
	q := mustPipe(t, studyStep, 5, "up")
	iv := studyStep.JitterInterval
	const periods = 2000
	levels := make([]time.Duration, periods)
	firstHalf := make([]time.Duration, periods)
	for k := 0; k < periods; k++ {
		start := time.Duration(k) * iv
		// constant within each half of the period
		firstHalf[k] = q.StepDelay(start)
		for _, at := range []time.Duration{start + iv/8, start + iv/2 - 1} {
			if d := q.StepDelay(at); d != firstHalf[k] {
				t.Fatalf("period %d: %v at its start, %v at %v", k, firstHalf[k], d, at)
			}
		}
		levels[k] = q.StepDelay(start + iv/2)
		if d := q.StepDelay(start + iv - 1); d != levels[k] {
			t.Fatalf("period %d: second half %v then %v", k, levels[k], d)
		}
	}
	if firstHalf[0] != levels[0] {
		t.Fatalf("the first period has no previous level, but a half-step: %v then %v", firstHalf[0], levels[0])
	}
	ups, downs := 0, 0
	for k := 1; k < periods; k++ {
		switch {
		case levels[k] >= levels[k-1]:
			ups++
			if firstHalf[k] != levels[k] {
				t.Fatalf("period %d: increase %v -> %v applied as %v first", k, levels[k-1], levels[k], firstHalf[k])
			}
		default:
			downs++
			if want := (levels[k-1] + levels[k]) / 2; firstHalf[k] != want {
				t.Fatalf("period %d: decrease %v -> %v, first half %v, want %v", k, levels[k-1], levels[k], firstHalf[k], want)
			}
		}
	}
	if ups < periods/3 || downs < periods/3 {
		t.Fatalf("%d increases and %d decreases of %d", ups, downs, periods)
	}
}

func TestStepIntervalSetsTheRedrawRate(t *testing.T) {
	for _, iv := range []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond} {
		p := studyStep
		p.JitterInterval = iv
		q := mustPipe(t, p, 3, "down")
		changes := map[time.Duration]bool{} // where the delay changed, relative to a period's start
		prev := q.StepDelay(0)
		const span = 100 * time.Second
		n := 0
		for at := time.Millisecond; at < span; at += time.Millisecond {
			if d := q.StepDelay(at); d != prev {
				changes[at%iv] = true
				prev = d
				n++
			}
		}
		for off := range changes {
			if off != 0 && off != iv/2 {
				t.Fatalf("interval %v: the delay changed %v into a period", iv, off)
			}
		}
		// one change per period, plus the half-steps of the decreasing half of them
		want := 1.5 * float64(span/iv)
		if math.Abs(float64(n)-want) > 0.1*want {
			t.Fatalf("interval %v: %d changes in %v, want about %g", iv, n, span, want)
		}
	}
}

func TestStepSameSeedSameLevels(t *testing.T) {
	a, b := mustPipe(t, studyStep, 9, "down"), mustPipe(t, studyStep, 9, "down")
	c := mustPipe(t, studyStep, 9, "up")
	same := true
	for k := 0; k < 100; k++ {
		at := time.Duration(k) * studyStep.JitterInterval
		if a.StepDelay(at) != b.StepDelay(at) {
			t.Fatalf("period %d: same seed, different levels", k)
		}
		same = same && a.StepDelay(at) == c.StepDelay(at)
	}
	if same {
		t.Fatal("both directions share one jitter stream")
	}
}

// Packets overtake only where the delay drops: every overtaken packet departed
// within one half-step before a drop, and the overtaken packets number the drops'
// sizes times the packet rate.
func TestStepOvertakesOnlyAtDrops(t *testing.T) {
	q := mustPipe(t, studyStep, 4, "down")
	const gap = 100 * time.Microsecond // 10,000 packets/s
	const n = 400000                   // 40 s, 400 periods
	dep := make([]time.Duration, n)
	rel := make([]time.Duration, n)
	for i := range dep {
		dep[i] = time.Duration(i) * gap
		r, v := q.Offer(dep[i], 100, false)
		if v != Forward {
			t.Fatal("dropped without loss or rate")
		}
		rel[i] = r
	}
	// the drops, read from the model: where and by how much the delay went down
	type drop struct{ at, by time.Duration }
	var drops []drop
	ref := mustPipe(t, studyStep, 4, "down")
	prev := ref.StepDelay(0)
	total := time.Duration(0)
	for at := gap; at < time.Duration(n)*gap; at += gap {
		d := ref.StepDelay(at)
		if d < prev {
			drops = append(drops, drop{at, prev - d})
			total += prev - d
			if prev-d > studyStep.Jitter/2 {
				t.Fatalf("a drop of %v at %v: more than a half-step of the range", prev-d, at)
			}
		}
		prev = d
	}
	// overtaken: a later packet was released earlier
	minLater := time.Duration(math.MaxInt64)
	overtaken := 0
	var maxLate time.Duration
	for i := n - 1; i >= 0; i-- {
		if rel[i] > minLater {
			overtaken++
			maxLate = max(maxLate, rel[i]-minLater)
			near := false
			for _, d := range drops {
				if dep[i] < d.at && dep[i] >= d.at-d.by {
					near = true
					break
				}
			}
			if !near {
				t.Fatalf("packet %d (departed %v) overtaken away from any drop", i, dep[i])
			}
		}
		minLater = min(minLater, rel[i])
	}
	want := int(total / gap)
	if math.Abs(float64(overtaken-want)) > float64(len(drops)) {
		t.Fatalf("%d packets overtaken, want %d (drops total %v) +/- %d", overtaken, want, total, len(drops))
	}
	if maxLate > studyStep.Jitter/2 {
		t.Fatalf("a packet arrived %v after one sent later: more than a half-step", maxLate)
	}
	// the study's expectation: per period the drops add up to E[(L1-L2)+] = range/6
	perPeriod := float64(total) / float64(n*gap/studyStep.JitterInterval)
	if exp := float64(studyStep.Jitter) / 6; math.Abs(perPeriod-exp) > 0.2*exp {
		t.Fatalf("drops add up to %v per period, want about %v", time.Duration(perPeriod), time.Duration(exp))
	}
}

func TestStepIdleGapKeepsTheBand(t *testing.T) {
	q := mustPipe(t, studyStep, 2, "up")
	lo, hi := studyStep.Delay-studyStep.Jitter/2, studyStep.Delay+studyStep.Jitter/2
	for _, at := range []time.Duration{0, time.Hour, time.Hour + 50*time.Millisecond, 1000 * time.Hour} {
		if d := q.StepDelay(at); d < lo || d > hi {
			t.Fatalf("at %v after an idle gap: %v outside %v..%v", at, d, lo, hi)
		}
	}
}

func TestECNMarksCapablePacketsAboveTheThresholdOnly(t *testing.T) {
	q := mustPipe(t, Params{RateBps: rate1ms, QueueBytes: 5 * 1514, ECNThresholdBytes: 2 * 1514}, 1, "down")
	// at t=0 the FIFO holds 0, 1514, 3028 ... bytes when each frame arrives
	want := []Verdict{Forward, Forward, ForwardCE, ForwardCE, ForwardCE, DropQueue}
	for i, w := range want {
		if _, v := q.Offer(0, 1514, true); v != w {
			t.Fatalf("ECT frame %d (FIFO %d bytes): got %v, want %v", i, int64(i)*1514, v, w)
		}
	}
	// a packet that is not ECN-capable is queued unmarked, and dropped only when full
	q = mustPipe(t, Params{RateBps: rate1ms, QueueBytes: 5 * 1514, ECNThresholdBytes: 2 * 1514}, 1, "down")
	for i := 0; i < 5; i++ {
		if _, v := q.Offer(0, 1514, false); v != Forward {
			t.Fatalf("Not-ECT frame %d: got %v, want forward", i, v)
		}
	}
	if _, v := q.Offer(0, 1514, false); v != DropQueue {
		t.Fatalf("Not-ECT frame into a full FIFO: got %v", v)
	}
	// the marking changes no release time: the same frames, capable or not
	a := mustPipe(t, Params{RateBps: rate1ms, QueueBytes: 5 * 1514, ECNThresholdBytes: 1514}, 1, "up")
	b := mustPipe(t, Params{RateBps: rate1ms, QueueBytes: 5 * 1514}, 1, "up")
	for i := 0; i < 4; i++ {
		ra, _ := a.Offer(time.Duration(i)*100*time.Microsecond, 1514, true)
		rb, _ := b.Offer(time.Duration(i)*100*time.Microsecond, 1514, false)
		if ra != rb {
			t.Fatalf("frame %d: released at %v marked, %v unmarked", i, ra, rb)
		}
	}
}

func TestECNThresholdIsCheckedByName(t *testing.T) {
	for want, p := range map[string]Params{
		"ecn_threshold_bytes: must be >= 0": {RateBps: rate1ms, QueueBytes: 3000, ECNThresholdBytes: -1},
		"needs a rate":                      {ECNThresholdBytes: 1000},
		"is not below queue_bytes 3000":     {RateBps: rate1ms, QueueBytes: 3000, ECNThresholdBytes: 3000},
	} {
		err := p.Validate()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: got %v, want an error containing %q", p, err, want)
		}
	}
}
