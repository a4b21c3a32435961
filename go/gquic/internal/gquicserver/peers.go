package gquicserver

import (
	"bytes"
	"hash/fnv"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// quic-go v0.10.2 tells little of a gQUIC connection: a session's public API has
// its addresses, its version (GetVersion, outside the interface) and, on the
// server, the SNI; it has no handshake start, no 0-RTT flag and no counters. So
// the server's UDP socket is wrapped (observedConn), and what it sees of each client
// address is kept (peer): when its first datagram came, how many datagrams and
// bytes went either way, and whether the server sent it a REJ. A connection is
// found by its client's address and port, which Chromium gives each connection
// (a socket of its own).

// peer is what the socket saw of one client address since its first datagram.
type peer struct {
	first                            time.Time // the first datagram received
	last                             atomic.Int64
	recv, recvBytes, sent, sentBytes atomic.Int64
	// rejects counts the REJ messages sent to it (a REJ spread over several
	// packets counts once: its tag is in the first).
	rejects atomic.Int64
	// connID is the conn_id logged when its handshake completed, 0 before.
	connID atomic.Int64
	// shared: a second connection from this address completed its handshake while
	// the first was open, so requests from it cannot be attributed.
	shared atomic.Bool
	// sentFlight: the bytes sent to it over time (flight.go)
	sentFlight flight
}

func (p *peer) stats() map[string]any {
	return map[string]any{
		"sent": p.sent.Load(), "recv": p.recv.Load(),
		"sent_bytes": p.sentBytes.Load(), "recv_bytes": p.recvBytes.Load(),
	}
}

// observedConn is the server's UDP socket, counting per client address.
type observedConn struct {
	net.PacketConn
	peers sync.Map // netip.AddrPort → *peer
	srv   *Server  // the server it belongs to (h2quic's listen hook finds it here)
}

func addrKey(a net.Addr) (netip.AddrPort, bool) {
	if u, ok := a.(*net.UDPAddr); ok {
		ap := u.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), true
	}
	ap, err := netip.ParseAddrPort(a.String())
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), err == nil
}

func (c *observedConn) lookup(k netip.AddrPort) *peer {
	if v, ok := c.peers.Load(k); ok {
		return v.(*peer)
	}
	return nil
}

// ReadFrom counts a datagram; the first from an address starts its record.
func (c *observedConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, addr, err := c.PacketConn.ReadFrom(b)
	if err != nil {
		return n, addr, err
	}
	if k, ok := addrKey(addr); ok {
		now := time.Now()
		p := c.lookup(k)
		if p == nil {
			v, _ := c.peers.LoadOrStore(k, &peer{first: now, sentFlight: flight{start: now}})
			p = v.(*peer)
		}
		p.recv.Add(1)
		p.recvBytes.Add(int64(n))
		p.last.Store(now.UnixNano())
	}
	return n, addr, err
}

// WriteTo counts a datagram and, until the handshake completed, looks for a REJ
// in it (before sending it, so the count is in place when the client can answer).
func (c *observedConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	k, ok := addrKey(addr)
	var p *peer
	if ok {
		p = c.lookup(k)
	}
	if p != nil && p.connID.Load() == 0 && carriesREJ(b) {
		p.rejects.Add(1)
	}
	n, err := c.PacketConn.WriteTo(b, addr)
	if p != nil && err == nil {
		now := time.Now()
		p.sent.Add(1)
		p.sentBytes.Add(int64(n))
		p.last.Store(now.UnixNano())
		p.sentFlight.add(now, n)
	}
	return n, err
}

// prune forgets addresses that completed no handshake and were silent for idle:
// failed handshakes, and datagrams that came after their connection closed.
func (c *observedConn) prune(idle time.Duration) {
	cut := time.Now().Add(-idle).UnixNano()
	c.peers.Range(func(k, v any) bool {
		if p := v.(*peer); p.connID.Load() == 0 && p.last.Load() < cut {
			c.peers.CompareAndDelete(k, p)
		}
		return true
	})
}

// A gQUIC server rejects a client hello (CHLO) it cannot accept with a REJ
// message; it accepts one that names its current server config and carries a
// valid source-address token with SHLO. A connection without a REJ is a 0-RTT
// handshake: the client had the config cached and could send its requests before
// any reply. A REJ goes out in packets that are only authenticated: gQUIC's null
// encryption (quic-go v0.10.2's internal/crypto/null_aead_fnv128a.go for Q039,
// Q043 and Q044) puts after the packet's header a 12-byte FNV-1a-128 hash of the
// header, the plaintext and "Server", and the crypto message starts with its tag,
// "REJ\x00" (internal/handshake/tags.go, written little-endian). A packet carries
// a REJ if it has that tag and, for some header length, that hash: the check
// proves the packet is a null-encrypted one of ours, which an encrypted packet
// that happens to hold the 4 bytes is not (2^-96).
var rejTag = []byte("REJ\x00")

// maxHeaderLen bounds the header lengths tried (gQUIC's are at most 51 bytes, a
// server's null-encrypted ones about 30).
const maxHeaderLen = 64

func carriesREJ(b []byte) bool {
	for off := 0; off < len(b); {
		i := bytes.Index(b[off:], rejTag)
		if i < 0 {
			return false
		}
		i += off
		if nullSealedBefore(b, i) {
			return true
		}
		off = i + 1
	}
	return false
}

// nullSealedBefore reports whether b is header | hash | plaintext with the server's
// null-encryption hash, for a header that ends 12 bytes or more before index at.
func nullSealedBefore(b []byte, at int) bool {
	for k := 1; k <= maxHeaderLen && k+12 <= at; k++ {
		h := fnv.New128a()
		h.Write(b[:k])
		h.Write(b[k+12:])
		h.Write([]byte("Server"))
		var sum [16]byte
		h.Sum(sum[:0])
		// quic-go sends the hash reversed (little-endian), its first 12 bytes.
		match := true
		for j := 0; j < 12 && match; j++ {
			match = b[k+j] == sum[15-j]
		}
		if match {
			return true
		}
	}
	return false
}
