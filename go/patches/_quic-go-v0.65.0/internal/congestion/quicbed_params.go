package congestion

// Added to quic-go v0.65.0 by quicbed's build-time patch (go/patches in
// quicbed). Upstream has these settings as constants: CUBIC's
// defaultNumConnections (1) and beta (0.7) in cubic.go, and the reno = true
// that internal/ackhandler passes to NewCubicSender. Here they are
// process-wide settings with the same defaults, read when a connection's
// congestion controller is made (so a change applies to later connections).

import (
	"fmt"
	"sync"
)

var quicbedSettings = struct {
	sync.Mutex
	reno bool
	n    int
	beta float32
}{reno: true, n: defaultNumConnections, beta: beta}

// SetUseReno chooses NewReno (true, quic-go's own choice) or CUBIC (false)
// for connections made afterwards.
func SetUseReno(reno bool) {
	quicbedSettings.Lock()
	defer quicbedSettings.Unlock()
	quicbedSettings.reno = reno
}

// UseReno reports whether new connections use NewReno (default true).
func UseReno() bool {
	quicbedSettings.Lock()
	defer quicbedSettings.Unlock()
	return quicbedSettings.reno
}

// SetCubicParams sets CUBIC's number of emulated connections n (>= 1, default
// 1) and one connection's backoff beta (0 < beta < 1, default 0.7) for every
// Cubic made afterwards. A loss cuts the window to (n-1+beta)/n of itself;
// Chromium's quiche uses n = 2, beta 0.7, a cut to 0.85. The extra backoff of
// the remembered maximum when a loss comes before the window regained it is
// (n-1+betaLastMax)/n as upstream, with betaLastMax = (1+beta)/2 (RFC 8312,
// section 4.6), upstream's 0.85 for beta 0.7.
func SetCubicParams(n int, b float32) error {
	if n < 1 {
		return fmt.Errorf("CUBIC's emulated connections must be >= 1 (got %d)", n)
	}
	if !(b > 0 && b < 1) { // also refuses NaN
		return fmt.Errorf("CUBIC's beta must be > 0 and < 1 (got %v)", b)
	}
	quicbedSettings.Lock()
	defer quicbedSettings.Unlock()
	quicbedSettings.n, quicbedSettings.beta = n, b
	return nil
}

// CubicParams returns the emulated connections and beta that a Cubic made
// now takes.
func CubicParams() (n int, b float32) {
	quicbedSettings.Lock()
	defer quicbedSettings.Unlock()
	return quicbedSettings.n, quicbedSettings.beta
}

// quicbedCubicParams is what NewCubic takes: n, beta and betaLastMax of one
// connection.
func quicbedCubicParams() (n int, b, bLastMax float32) {
	n, b = CubicParams()
	return n, b, (1 + b) / 2
}
