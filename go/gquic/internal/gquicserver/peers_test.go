package gquicserver

import (
	"context"
	"hash/fnv"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	quic "github.com/lucas-clemente/quic-go"
)

// seal builds a packet as quic-go v0.10.2's null encryption does:
// header | FNV-1a-128(header, plaintext, label) reversed, first 12 bytes | plaintext.
func seal(header, plaintext []byte, label string) []byte {
	h := fnv.New128a()
	h.Write(header)
	h.Write(plaintext)
	h.Write([]byte(label))
	sum := h.Sum(nil)
	for l, r := 0, len(sum)-1; l < r; l, r = l+1, r-1 {
		sum[l], sum[r] = sum[r], sum[l]
	}
	return append(append(append([]byte{}, header...), sum[:12]...), plaintext...)
}

func TestCarriesREJ(t *testing.T) {
	q039 := []byte{0x08, 1, 2, 3, 4, 5, 6, 7, 8, 0x01}                                 // flags, connection ID, packet number
	q044 := []byte{0xfd, 'Q', '0', '4', '4', 0x50, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 1} // long header
	frame := []byte{0xa0, 0x01, 0x00, 0x04}                                            // a STREAM frame on stream 1
	rej := append(append([]byte{}, frame...), "REJ\x00\x05\x00\x00\x00SCFG..."...)
	shlo := append(append([]byte{}, frame...), "SHLO\x05\x00\x00\x00..."...)
	cases := []struct {
		name string
		b    []byte
		want bool
	}{
		{"Q039 REJ", seal(q039, rej, "Server"), true},
		{"Q044 REJ", seal(q044, rej, "Server"), true},
		{"REJ behind a REJ-like header byte run", seal([]byte("REJ\x00REJ\x00"), rej, "Server"), true},
		{"SHLO", seal(q039, shlo, "Server"), false},
		{"the client's hash", seal(q039, rej, "Client"), false},
		{"encrypted bytes that hold the tag", append(append([]byte{}, q039...), []byte(strings.Repeat("x", 20)+"REJ\x00"+strings.Repeat("y", 1200))...), false},
		{"short", []byte("REJ\x00"), false},
		{"empty", nil, false},
	}
	for _, c := range cases {
		if got := carriesREJ(c.b); got != c.want {
			t.Errorf("%s: %v", c.name, got)
		}
	}
	// A tampered byte breaks the hash.
	b := seal(q039, rej, "Server")
	b[len(b)-1] ^= 1
	if carriesREJ(b) {
		t.Errorf("tampered packet passed")
	}
}

// fakeSession is just enough of a quic.Session for accepted().
type fakeSession struct {
	quic.Session
	remote  net.Addr
	version quic.VersionNumber
	ctx     context.Context
}

func (s fakeSession) RemoteAddr() net.Addr           { return s.remote }
func (s fakeSession) Context() context.Context       { return s.ctx }
func (s fakeSession) GetVersion() quic.VersionNumber { return s.version }
func (s fakeSession) ConnectionState() quic.ConnectionState {
	return quic.ConnectionState{ServerName: "localhost"}
}

// TestZeroRTTVerdict: a connection to whose address the server sent no REJ is
// logged as 0-RTT, one with a REJ is not, and one whose address the socket cannot
// attribute has null handshake fields. (quic-go's client never does 0-RTT, so the
// end-to-end tests only see the REJ case.)
func TestZeroRTTVerdict(t *testing.T) {
	log := &syncBuffer{}
	s := &Server{log: NewLogger(log), conn: &observedConn{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := &net.UDPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 40001}
	b := &net.UDPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 40002}
	for _, addr := range []*net.UDPAddr{a, b} {
		k, _ := addrKey(addr)
		s.conn.peers.Store(k, &peer{first: time.Now().Add(-30 * time.Millisecond)})
	}
	kb, _ := addrKey(b)
	s.conn.lookup(kb).rejects.Add(1)
	for _, addr := range []*net.UDPAddr{a, b, a, {IP: net.IPv4(10, 0, 0, 3), Port: 1}} {
		s.accepted(fakeSession{remote: addr, version: quic.VersionGQUIC43, ctx: ctx})
	}
	if id, _ := s.connOf(&http.Request{RemoteAddr: b.String()}); id != 2 {
		t.Errorf("a request from %s: conn %d, want 2", b, id)
	}
	if id, _ := s.connOf(&http.Request{RemoteAddr: a.String()}); id != 0 {
		t.Errorf("a request from %s, shared by conns 1 and 3: conn %d, want 0 (unknown)", a, id)
	}
	conns := events(t, log.String(), "conn")
	if len(conns) != 4 {
		t.Fatalf("%d conn records", len(conns))
	}
	want := []struct {
		zeroRTT, rejects, shared any
	}{{true, 0.0, nil}, {false, 1.0, nil}, {nil, nil, true}, {nil, nil, false}}
	for i, w := range want {
		c := conns[i]
		if c["used_0rtt"] != w.zeroRTT || c["rejects"] != w.rejects || c["shared_address"] != w.shared || c["quic_version"] != "Q043" {
			t.Errorf("conn %d: %v", i, c)
		}
		if hs, ok := c["handshake_ms"].(float64); (w.zeroRTT != nil) != ok || (ok && hs < 30) {
			t.Errorf("conn %d: handshake_ms %v", i, c["handshake_ms"])
		}
	}
}

func TestPruneForgetsOnlyIdleHandshakes(t *testing.T) {
	c := &observedConn{}
	old := time.Now().Add(-time.Minute).UnixNano()
	for port, connID := range map[uint16]int64{1: 0, 2: 7} {
		p := &peer{}
		p.last.Store(old)
		p.connID.Store(connID)
		k, _ := addrKey(&net.UDPAddr{IP: net.IPv4(10, 0, 0, 2), Port: int(port)})
		c.peers.Store(k, p)
	}
	fresh, _ := addrKey(&net.UDPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 3})
	p := &peer{}
	p.last.Store(time.Now().UnixNano())
	c.peers.Store(fresh, p)
	c.prune(15 * time.Second)
	left := map[uint16]bool{}
	c.peers.Range(func(k, _ any) bool {
		left[k.(interface{ Port() uint16 }).Port()] = true
		return true
	})
	if len(left) != 2 || !left[2] || !left[3] {
		t.Errorf("left: %v (want the live connection 2 and the fresh handshake 3)", left)
	}
}
