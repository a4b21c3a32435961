package quic

// Added to quic-go v0.65.0 by quicbed's build-time patch (go/patches in
// quicbed); not part of quic-go's API. The settings are process-wide and
// apply to connections made after the call.

import (
	"fmt"

	"github.com/quic-go/quic-go/internal/congestion"
)

// Congestion controllers that SetCongestionControl accepts.
const (
	// CongestionControlReno is quic-go's own choice in v0.65.0 (NewReno,
	// RFC 9002: a loss cuts the window to 0.7 of itself, then it grows by one
	// datagram per window's worth of ACKs). It is the default.
	CongestionControlReno = "reno"
	// CongestionControlCubic is quic-go's CUBIC (a port of Chromium's
	// cubic.cc, unused upstream), tuned by SetCubicParams.
	CongestionControlCubic = "cubic"
)

// SetCongestionControl chooses CongestionControlReno (the default) or
// CongestionControlCubic.
func SetCongestionControl(name string) error {
	switch name {
	case CongestionControlReno:
		congestion.SetUseReno(true)
	case CongestionControlCubic:
		congestion.SetUseReno(false)
	default:
		return fmt.Errorf("congestion control %q: quic-go has %q and %q", name, CongestionControlReno, CongestionControlCubic)
	}
	return nil
}

// CongestionControl names the controller that new connections use.
func CongestionControl() string {
	if congestion.UseReno() {
		return CongestionControlReno
	}
	return CongestionControlCubic
}

// SetCubicParams sets CUBIC's number of emulated connections n (>= 1; quic-go's
// default 1, Chromium's 2) and one connection's backoff beta (0 < beta < 1,
// default 0.7): a loss cuts the window to (n-1+beta)/n of itself. They apply
// only to CongestionControlCubic.
func SetCubicParams(n int, beta float32) error { return congestion.SetCubicParams(n, beta) }

// CubicParams returns the values set by SetCubicParams (default 1, 0.7).
func CubicParams() (n int, beta float32) { return congestion.CubicParams() }
