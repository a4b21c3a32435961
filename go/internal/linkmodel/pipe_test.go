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
		rel, v := q.Offer(0, 1514)
		if v != Forward || rel != want*time.Millisecond {
			t.Fatalf("frame %d: got %v %v, want %v", i, rel, v, want*time.Millisecond)
		}
	}
	// an arrival after the link went idle starts at its own arrival time
	if rel, _ := q.Offer(50*time.Millisecond, 1514); rel != 61*time.Millisecond {
		t.Fatalf("idle link: got %v, want 61ms", rel)
	}
	// a late caller (arrival before the last departure) never gets an earlier slot
	if rel, _ := q.Offer(50500*time.Microsecond, 1514); rel != 62*time.Millisecond {
		t.Fatalf("busy link: got %v, want 62ms", rel)
	}
}

func TestIPCountingExcludesTheEthernetHeader(t *testing.T) {
	q := mustPipe(t, Params{RateBps: 1500 * 8 * 1000, QueuePackets: 10, CountIP: true}, 1, "down")
	if rel, _ := q.Offer(0, 1514); rel != time.Millisecond {
		t.Fatalf("got %v, want 1ms (1500 IP bytes)", rel)
	}
}

func TestTailDropAtTheByteLimit(t *testing.T) {
	q := mustPipe(t, Params{RateBps: rate1ms, QueueBytes: 3 * 1514}, 1, "up")
	for i := 0; i < 3; i++ {
		if _, v := q.Offer(0, 1514); v != Forward {
			t.Fatalf("frame %d dropped below the limit", i)
		}
	}
	if _, v := q.Offer(0, 1514); v != DropQueue {
		t.Fatalf("4th frame: got %v, want drop-queue", v)
	}
	// a smaller frame still fits? no: the queue is full to the byte
	if _, v := q.Offer(0, 60); v != DropQueue {
		t.Fatalf("60-byte frame into a full queue: got %v", v)
	}
	// after the first frame has left (t=1ms) there is room for exactly one more
	if _, v := q.Offer(time.Millisecond, 1514); v != Forward {
		t.Fatalf("after one departure: got %v", v)
	}
	if _, v := q.Offer(time.Millisecond, 1514); v != DropQueue {
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
		if _, v := q.Offer(0, 100); v == Forward {
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
		if _, v := q.Offer(time.Duration(i), 100); v == DropLoss {
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
		if _, v := q.Offer(time.Duration(i)*time.Millisecond, 100); v == DropLoss {
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
		rel, v := q.Offer(time.Duration(i)*200*time.Microsecond, 1000)
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

func TestReorderingOnlyInTheReorderKind(t *testing.T) {
	base := Params{RateBps: 100e6, QueuePackets: 1000, Delay: 50 * time.Millisecond,
		Jitter: 20 * time.Millisecond, JitterInterval: 20 * time.Millisecond}
	for _, k := range []JitterKind{JitterReorder, JitterSmooth} {
		p := base
		p.Kind = k
		n := reorderings(t, p)
		if (n > 0) != (k == JitterReorder) {
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
			rel, _ := q.Offer(now, 100)
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
		"needs kind reorder or smooth":                {DelayUs: 10, JitterUs: 5},
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
	if _, err := ParseConfig([]byte(good)); err != nil {
		t.Fatal(err)
	}
	bad := map[string]string{
		`"format":1,`:       `"format":2,`,
		`"seed":1`:          `"seed":1,"extra":true`,
		`"delay_us":1000,`:  `"delay_us":-1,`,
		`"client_if":"cli"`: `"client_if":"srv"`,
	}
	for from, to := range bad {
		if _, err := ParseConfig([]byte(strings.Replace(good, from, to, 1))); err == nil {
			t.Errorf("%s accepted", to)
		}
	}
}

func TestOccupancyCountsWhatHasNotLeft(t *testing.T) {
	q := mustPipe(t, Params{RateBps: rate1ms, QueuePackets: 10}, 1, "up")
	for i := 0; i < 3; i++ { // 1514-byte frames serialize in 1 ms each: depart at 1, 2, 3 ms
		if _, v := q.Offer(0, 1514); v != Forward {
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
