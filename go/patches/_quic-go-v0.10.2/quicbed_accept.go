package quic

import "github.com/lucas-clemente/quic-go/internal/protocol"

// quicbed (go/patches/quic-go-v0.10.2-keep-ciphertext.patch): a gQUIC server
// session is handed to Accept once it has written its SHLO, not when the first
// forward-secure packet of the client arrives one round trip later. From the SHLO
// on, the server has its forward-secure keys and may send stream data
// (packet_packer_legacy.go's canSendData), and the requests a client sent with
// its hello are decrypted (the keep-ciphertext part of the patch), so h2quic
// answers them at once, as Google's server does; upstream delayed every first
// response by one round trip. The packer sends crypto stream data first, so the
// SHLO leaves before any response.
func (s *session) quicbedMaybeAccept() {
	if s.quicbedAccepted || s.perspective != protocol.PerspectiveServer || s.version.UsesTLS() {
		return
	}
	if c, ok := s.cryptoStreamHandler.(interface{ QuicbedWroteSHLO() bool }); ok && c.QuicbedWroteSHLO() {
		s.quicbedAccepted = true
		s.sessionRunner.onHandshakeComplete(s)
	}
}

// QuicbedPeerWindows returns the flow-control windows the peer's hello gave, in
// bytes: the stream window (gQUIC's SFCW) and the connection window (CFCW), the
// limits of what this side may send before the peer's first window update; 0, 0
// before the peer's parameters arrived. A server session has them once it is
// handed to Accept (the crypto setup waits until the session took them).
func (s *session) QuicbedPeerWindows() (stream, conn uint64) {
	if p := s.peerParams; p != nil {
		return uint64(p.StreamFlowControlWindow), uint64(p.ConnectionFlowControlWindow)
	}
	return 0, 0
}

// QuicbedMaxCongestionWindow is the largest congestion window a connection may
// reach, in bytes (sent_packet_handler.go makes every controller with it).
const QuicbedMaxCongestionWindow = uint64(protocol.DefaultMaxCongestionWindow)

// QuicbedInitialCongestionWindow is every connection's first congestion window, in bytes.
const QuicbedInitialCongestionWindow = uint64(protocol.InitialCongestionWindow)

// QuicbedMinPacingDelay is the shortest wait between two pacing wake-ups (the
// patched MinPacingDelay).
const QuicbedMinPacingDelay = protocol.MinPacingDelay
