package handshake

// QuicbedWroteSHLO reports whether the server has written its SHLO into the
// crypto stream (quicbed: the session is then handed to Accept, see quicbed_accept.go
// in quic-go's root package). It is set before the handshake event that follows the
// SHLO, so the session sees it when it handles that event.
func (h *cryptoSetupServer) QuicbedWroteSHLO() bool { return h.quicbedWroteSHLO.Get() }
