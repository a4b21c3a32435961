package ackhandler

// Added by quicbed's build-time patch (go/patches). Run in the patched module:
//   cd go && go run ./patches -out ../build/quic-go-patched
//   go test -modfile ../build/quic-go-patched/quicbed.mod github.com/quic-go/quic-go/internal/ackhandler -run Quicbed

import (
	"testing"
	"time"

	"github.com/quic-go/quic-go/internal/monotime"
	"github.com/quic-go/quic-go/internal/protocol"
	"github.com/quic-go/quic-go/internal/utils"
	"github.com/quic-go/quic-go/internal/wire"
	"github.com/quic-go/quic-go/qlog"
	"github.com/quic-go/quic-go/qlogwriter"
	"github.com/quic-go/quic-go/testutils/events"

	"github.com/stretchr/testify/require"
)

// quicbedSpurious sends 20 packets 10 ms apart, acknowledges the 1st and 7th
// after an RTT of 1 s (the 2nd to 4th are declared lost by the packet
// threshold), then, 200 ms later, all of the first 7: the three losses were
// spurious, and they came far beyond the time threshold. Then, 1 ms later, an
// ACK that adds the 12th: under the packet threshold (3) the 8th and 9th are
// lost at once; the time threshold alone loses none yet. It returns the
// handler, the qlog events of the second and third ACK, and the packets the
// third declared lost.
func quicbedSpurious(t *testing.T, adaptive bool) (*sentPacketHandler, *events.Recorder, []protocol.PacketNumber) {
	t.Helper()
	SetAdaptiveLossDetection(adaptive)
	t.Cleanup(func() { SetAdaptiveLossDetection(true) })
	var rec events.Recorder
	sph := NewSentPacketHandler(0, 1200, utils.NewRTTStats(), &utils.ConnectionStats{}, true, false, nil,
		protocol.PerspectiveClient, &rec, utils.DefaultLogger)
	SetAdaptiveLossDetection(!adaptive) // a later change does not touch this handler
	var packets packetTracker
	start := monotime.Now()
	now := start
	var pns []protocol.PacketNumber
	for range 20 {
		pn := sph.PopPacketNumber(protocol.PacketNumberSpaceAppData)
		sph.SentPacket(now, pn, protocol.InvalidPacketNumber, nil, []Frame{packets.NewPingFrame(pn)}, protocol.Encryption1RTT, protocol.ECNNon, 1000, false, false)
		pns = append(pns, pn)
		now = now.Add(10 * time.Millisecond)
	}
	now = start.Add(time.Second)
	_, err := sph.ReceivedAck(&wire.AckFrame{AckRanges: ackRanges(pns[0], pns[6])}, protocol.Encryption1RTT, now)
	require.NoError(t, err)
	require.Equal(t, []protocol.PacketNumber{pns[1], pns[2], pns[3]}, packets.Lost)
	rec.Clear()
	packets.Reset()
	now = now.Add(200 * time.Millisecond)
	_, err = sph.ReceivedAck(&wire.AckFrame{AckRanges: ackRanges(pns[:7]...)}, protocol.Encryption1RTT, now)
	require.NoError(t, err)
	require.Empty(t, packets.Lost)
	now = now.Add(time.Millisecond)
	_, err = sph.ReceivedAck(&wire.AckFrame{AckRanges: ackRanges(append(pns[:7:7], pns[11])...)}, protocol.Encryption1RTT, now)
	require.NoError(t, err)
	return sph.(*sentPacketHandler), &rec, packets.Lost
}

func TestQuicbedAdaptiveLossDetectionAdapts(t *testing.T) {
	sph, rec, lost := quicbedSpurious(t, true)
	require.Len(t, rec.Events(qlog.SpuriousLoss{}), 3)
	require.True(t, sph.packetThresholdDisabled)
	require.Equal(t, uint8(2), sph.timeThresholdEighths) // 1/8 doubled: 10/8 RTT
	require.Equal(t, []qlogwriter.Event{qlog.RecoveryParametersSet{
		ReorderingThreshold: packetThreshold, PacketThresholdDisabled: true,
		TimeThreshold: 1.25, TimerGranularity: protocol.TimerGranularity,
	}}, rec.Events(qlog.RecoveryParametersSet{}))
	require.Empty(t, lost) // no packet threshold any more
}

func TestQuicbedRFC9002LossDetectionStaysFixed(t *testing.T) {
	sph, rec, lost := quicbedSpurious(t, false)
	// the spurious losses are still detected and logged
	require.Len(t, rec.Events(qlog.SpuriousLoss{}), 3)
	require.False(t, sph.packetThresholdDisabled)
	require.Equal(t, uint8(defaultTimeThresholdEighths), sph.timeThresholdEighths) // 9/8 RTT
	require.Empty(t, rec.Events(qlog.RecoveryParametersSet{}))
	require.Len(t, lost, 2) // the 8th and 9th, by the packet threshold
	for _, ev := range rec.Events(qlog.PacketLost{}) {
		require.Equal(t, qlog.PacketLossReorderingThreshold, ev.(qlog.PacketLost).Trigger)
	}
}
