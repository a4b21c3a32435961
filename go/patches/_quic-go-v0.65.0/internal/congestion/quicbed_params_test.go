package congestion

// Added by quicbed's build-time patch (go/patches). Run in the patched module:
//   cd go && go run ./patches -out ../build/quic-go-patched
//   go test -modfile ../build/quic-go-patched/quicbed.mod github.com/quic-go/quic-go/internal/congestion -run Quicbed
// (quicbed's `make test` runs the whole package, upstream's tests included).

import (
	"math"
	"testing"

	"github.com/quic-go/quic-go/internal/monotime"
	"github.com/quic-go/quic-go/internal/protocol"
	"github.com/quic-go/quic-go/internal/utils"
)

type quicbedClock struct{}

func (quicbedClock) Now() monotime.Time { return monotime.Time(1) }

// quicbedDefaults puts the upstream settings back when the test ends.
func quicbedDefaults(t *testing.T) {
	t.Cleanup(func() {
		SetUseReno(true)
		if err := SetCubicParams(defaultNumConnections, beta); err != nil {
			t.Fatal(err)
		}
	})
}

func quicbedSender() *cubicSender {
	return NewCubicSender(quicbedClock{}, utils.NewRTTStats(), &utils.ConnectionStats{},
		initialMaxDatagramSize, UseReno(), nil)
}

// oneLoss sends ten packets from a fresh sender, loses one, and returns the
// window before and after.
func quicbedOneLoss(t *testing.T) (before, after protocol.ByteCount) {
	t.Helper()
	s := quicbedSender()
	before = s.GetCongestionWindow()
	for pn := protocol.PacketNumber(0); pn < 10; pn++ {
		s.OnPacketSent(monotime.Time(1), 0, pn, initialMaxDatagramSize, true)
	}
	s.OnCongestionEvent(5, initialMaxDatagramSize, 10*initialMaxDatagramSize)
	return before, s.GetCongestionWindow()
}

func TestQuicbedDefaultsAreUpstreams(t *testing.T) {
	if !UseReno() {
		t.Error("default is not NewReno (upstream passes reno = true)")
	}
	if n, b := CubicParams(); n != 1 || b != 0.7 {
		t.Errorf("default CUBIC params %d, %v; upstream has 1, 0.7", n, b)
	}
	if n, b, lm := quicbedCubicParams(); n != defaultNumConnections || b != beta || lm != betaLastMax {
		t.Errorf("NewCubic takes %d, %v, %v; upstream's constants are %d, %v, %v",
			n, b, lm, defaultNumConnections, beta, betaLastMax)
	}
}

// The window after one loss is cwnd * (N - 1 + beta) / N, with quic-go's real
// CUBIC sender (NewCubicSender, reno = false).
func TestQuicbedCubicCwndAfterOneLoss(t *testing.T) {
	quicbedDefaults(t)
	SetUseReno(false)
	for _, tc := range []struct {
		n    int
		beta float32
		want protocol.ByteCount // by hand: 40960 bytes (32 x 1280) times the factor
	}{
		{1, 0.7, 28672}, // quic-go's default: 0.7
		{2, 0.7, 34816}, // Chromium's quiche: 0.85
		{2, 0.5, 30720}, // 0.75
	} {
		if err := SetCubicParams(tc.n, tc.beta); err != nil {
			t.Fatal(err)
		}
		before, after := quicbedOneLoss(t)
		exact := float64(before) * (float64(tc.n) - 1 + float64(tc.beta)) / float64(tc.n)
		if before != 40960 || after != tc.want || math.Abs(float64(after)-exact) > 1 {
			t.Errorf("N=%d beta=%v: cwnd %d -> %d, want %d (exactly %.1f)", tc.n, tc.beta, before, after, tc.want, exact)
		}
	}
}

// NewReno (upstream's choice) ignores N and beta: 0.7 of the window.
func TestQuicbedRenoIgnoresCubicParams(t *testing.T) {
	quicbedDefaults(t)
	if err := SetCubicParams(2, 0.5); err != nil {
		t.Fatal(err)
	}
	if _, after := quicbedOneLoss(t); after != 28672 {
		t.Errorf("NewReno: cwnd 40960 -> %d, want 28672 (renoBeta 0.7)", after)
	}
}

// betaLastMax follows beta: (N - 1 + (1 + beta)/2) / N.
func TestQuicbedBetaLastMax(t *testing.T) {
	quicbedDefaults(t)
	if err := SetCubicParams(2, 0.5); err != nil {
		t.Fatal(err)
	}
	c := NewCubic(quicbedClock{})
	c.CongestionWindowAfterPacketLoss(100 * maxDatagramSize) // remembers 100 datagrams
	c.CongestionWindowAfterPacketLoss(80 * maxDatagramSize)  // loss before regaining them
	want := protocol.ByteCount(float32(80*maxDatagramSize) * 0.875)
	if c.lastMaxCongestionWindow != want {
		t.Errorf("remembered maximum %d, want %d (0.875 of 80 datagrams)", c.lastMaxCongestionWindow, want)
	}
}

// A Cubic keeps the settings it was made with.
func TestQuicbedSettingsApplyToNewCubics(t *testing.T) {
	quicbedDefaults(t)
	old := NewCubic(quicbedClock{})
	if err := SetCubicParams(2, 0.5); err != nil {
		t.Fatal(err)
	}
	if b := old.beta(); b != 0.7 {
		t.Errorf("existing Cubic's backoff changed to %v", b)
	}
	if b := NewCubic(quicbedClock{}).beta(); b != 0.75 {
		t.Errorf("new Cubic's backoff %v, want 0.75", b)
	}
}

func TestQuicbedBadParams(t *testing.T) {
	quicbedDefaults(t)
	for _, tc := range []struct {
		n int
		b float32
	}{{0, 0.7}, {-1, 0.7}, {1, 0}, {1, 1}, {1, -0.5}, {1, 1.5}, {1, float32(math.NaN())}} {
		if err := SetCubicParams(tc.n, tc.b); err == nil {
			t.Errorf("SetCubicParams(%d, %v) accepted", tc.n, tc.b)
		}
	}
	if n, b := CubicParams(); n != 1 || b != 0.7 {
		t.Errorf("refused values changed the settings to %d, %v", n, b)
	}
}

// An ECN-CE signal (0 lost bytes, as sent_packet_handler reports it) is no lost
// packet; losses and signals inside one recovery episode cut the window once.
func TestQuicbedStatsTellLossesFromECNSignals(t *testing.T) {
	quicbedDefaults(t)
	stats := &utils.ConnectionStats{}
	s := NewCubicSender(quicbedClock{}, utils.NewRTTStats(), stats,
		initialMaxDatagramSize, UseReno(), nil)
	for pn := protocol.PacketNumber(0); pn < 20; pn++ {
		s.OnPacketSent(monotime.Time(1), 0, pn, initialMaxDatagramSize, true)
	}
	s.OnCongestionEvent(3, 0, 20*initialMaxDatagramSize)                      // ECN: a cutback
	s.OnCongestionEvent(4, initialMaxDatagramSize, 20*initialMaxDatagramSize) // same episode
	s.OnCongestionEvent(5, 0, 20*initialMaxDatagramSize)                      // same episode
	for pn := protocol.PacketNumber(20); pn < 30; pn++ {
		s.OnPacketSent(monotime.Time(1), 0, pn, initialMaxDatagramSize, true)
	}
	s.OnCongestionEvent(25, initialMaxDatagramSize, 10*initialMaxDatagramSize) // a new episode
	got := [4]uint64{stats.PacketsLost.Load(), stats.BytesLost.Load(),
		stats.ECNCongestionSignals.Load(), stats.CongestionCutbacks.Load()}
	want := [4]uint64{2, 2 * uint64(initialMaxDatagramSize), 2, 2}
	if got != want {
		t.Errorf("lost, lost bytes, ECN signals, cutbacks = %v, want %v", got, want)
	}
}
