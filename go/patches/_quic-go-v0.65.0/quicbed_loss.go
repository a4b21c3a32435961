package quic

// Added to quic-go v0.65.0 by quicbed's build-time patch (go/patches in
// quicbed); not part of quic-go's API. The setting is process-wide and applies
// to connections made after the call.

import (
	"fmt"

	"github.com/quic-go/quic-go/internal/ackhandler"
)

// Loss detections that SetLossDetection accepts.
const (
	// LossDetectionAdaptive is quic-go's own (the default): RFC 9002's packet
	// threshold (3) and time threshold (9/8 RTT) until a spurious loss, which
	// switches the packet threshold off and, when the loss was overtaken by
	// more than the time threshold, doubles the threshold's extra allowance,
	// up to 2 RTT.
	LossDetectionAdaptive = "adaptive"
	// LossDetectionRFC9002 keeps RFC 9002's thresholds fixed: 3 packets and
	// 9/8 RTT, whatever the reordering. Spurious losses are still detected
	// and logged (qlog's recovery:spurious_loss).
	LossDetectionRFC9002 = "rfc9002"
)

// SetLossDetection chooses LossDetectionAdaptive (the default) or
// LossDetectionRFC9002 for connections made afterwards.
func SetLossDetection(name string) error {
	switch name {
	case LossDetectionAdaptive:
		ackhandler.SetAdaptiveLossDetection(true)
	case LossDetectionRFC9002:
		ackhandler.SetAdaptiveLossDetection(false)
	default:
		return fmt.Errorf("loss detection %q: quic-go has %q and %q", name, LossDetectionAdaptive, LossDetectionRFC9002)
	}
	return nil
}

// LossDetection names the loss detection that new connections use.
func LossDetection() string {
	if ackhandler.AdaptiveLossDetection() {
		return LossDetectionAdaptive
	}
	return LossDetectionRFC9002
}
