package ackhandler

// Added to quic-go v0.65.0 by quicbed's build-time patch (go/patches in
// quicbed). Upstream's loss detection is adaptive: the first spurious loss
// (a packet declared lost, then acknowledged) switches the packet threshold
// off in the application-data space, and a spurious loss that came later than
// the time threshold doubles the threshold's extra allowance, from 1/8 up to
// 8/8 of an RTT (detectSpuriousLosses). RFC 9002 (section 6.1) has fixed
// thresholds: 3 packets and 9/8 of an RTT. This process-wide setting chooses
// between the two for connections made afterwards; spurious losses are
// detected, logged in qlog (recovery:spurious_loss) and reported to the
// congestion controller (whose undo of a spurious cut is congestion control's)
// either way.

import "sync"

var quicbedLoss = struct {
	sync.Mutex
	adaptive bool
}{adaptive: true}

// SetAdaptiveLossDetection chooses upstream's adaptive thresholds (true, the
// default) or RFC 9002's fixed ones (false) for handlers made afterwards.
func SetAdaptiveLossDetection(adaptive bool) {
	quicbedLoss.Lock()
	defer quicbedLoss.Unlock()
	quicbedLoss.adaptive = adaptive
}

// AdaptiveLossDetection reports whether handlers made now adapt their loss
// detection thresholds to spurious losses (default true).
func AdaptiveLossDetection() bool {
	quicbedLoss.Lock()
	defer quicbedLoss.Unlock()
	return quicbedLoss.adaptive
}
