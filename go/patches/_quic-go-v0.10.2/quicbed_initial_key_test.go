package quic

// Added by quicbed's build-time patch quic-go-v0.10.2-keep-ciphertext
// (go/patches). Run in the patched module:
//   cd go && go run ./patches -patch quic-go-v0.10.2-keep-ciphertext -out ../build/quic-go-v0.10.2-patched
//   cd gquic && go test -modfile ../../build/quic-go-v0.10.2-patched/quicbed.mod -run '^TestQuicbed' github.com/lucas-clemente/quic-go
// (quicbed's `make test` does). This module's go.mod says go 1.12: the
// language of this file is Go 1.12's.
//
// Chromium sends its first request in packets encrypted with the initial key
// right behind its full client hello, cold (after the REJs) or 0-RTT. Here
// quic-go's own client crypto setup does the same: it goes through the REJs
// with a real server session (newSession, as the server makes it), sends its
// full client hello, and seals a request (an HTTP/2 HEADERS frame on the
// headers stream, as h2quic's client writes it) with its initial key; the
// packets are made by quic-go's packet packer and taken apart as quic-go's
// packet handler map does, and the session unpacks them with its own
// unpacker. The test passes when that request is decrypted the first time the
// session tries it with its keys, without a retransmission, and the session was
// handed to Accept once it wrote its SHLO, before any forward-secure packet of the
// client. Without the patch the try with the forward-secure key zeroes the packet
// and it never is, and the session waits for the client's forward-secure packet.

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/lucas-clemente/quic-go/internal/crypto"
	"github.com/lucas-clemente/quic-go/internal/handshake"
	"github.com/lucas-clemente/quic-go/internal/protocol"
	"github.com/lucas-clemente/quic-go/internal/utils"
	"github.com/lucas-clemente/quic-go/internal/wire"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// quicbedWait bounds every wait, so that a broken handshake fails instead of
// hanging; nothing is timed.
const quicbedWait = 10 * time.Second

func TestQuicbedInitialKeyRequestWithCHLO(t *testing.T) {
	for _, v := range []protocol.VersionNumber{protocol.Version39, protocol.Version43, protocol.Version44} {
		// together: the request right behind the client hello, as Chromium
		// sends them; the session may try it before or after its crypto
		// setup has handled the hello.
		// keys-first: the request arrives after the server made its keys
		// and sent its SHLO.
		// request-first: the request arrives before the client hello, so the
		// first try has no key and fails; the session queues the packet and
		// tries it again once it has its keys (tryDecryptingQueuedPackets).
		for _, order := range []string{"together", "keys-first", "request-first"} {
			v, order := v, order
			t.Run(fmt.Sprintf("%s/%s", v, order), func(t *testing.T) { quicbedRequestWithCHLO(t, v, order) })
		}
	}
}

func quicbedRequestWithCHLO(t *testing.T, v protocol.VersionNumber, order string) {
	serverTLS, clientTLS := quicbedTLS(t)
	remote := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 50000}
	connID := protocol.ConnectionID{0xc1, 0x1e, 0x47, 0x00, 0x00, 0x00, 0x00, 0x01}
	logger := utils.DefaultLogger.WithPrefix("quicbed")

	// The server session, as server.handlePacketImpl makes it, with a tap on
	// its crypto stream: what the server's crypto setup writes (REJ, SHLO)
	// also goes to the client's crypto setup; the server's packets go nowhere.
	toClient := newQuicbedBuffer()
	defer toClient.Close()
	shlo := make(chan struct{})
	var serverCS handshake.CryptoSetup
	origNewCryptoSetup := newCryptoSetup
	defer func() { newCryptoSetup = origNewCryptoSetup }()
	newCryptoSetup = func(cryptoStream io.ReadWriter, connID protocol.ConnectionID, remoteAddr net.Addr,
		version protocol.VersionNumber, divNonce []byte, scfg *handshake.ServerConfig,
		params *handshake.TransportParameters, supportedVersions []protocol.VersionNumber,
		acceptSTK func(net.Addr, *handshake.Cookie) bool, paramsChan chan<- handshake.TransportParameters,
		handshakeEvent chan<- struct{}, logger utils.Logger) (handshake.CryptoSetup, error) {
		tap := &quicbedTap{ReadWriter: cryptoStream, to: toClient, shlo: shlo}
		cs, err := origNewCryptoSetup(tap, connID, remoteAddr, version, divNonce, scfg, params,
			supportedVersions, acceptSTK, paramsChan, handshakeEvent, logger)
		serverCS = cs
		return cs, err
	}
	kex, err := crypto.NewCurve25519KEX()
	if err != nil {
		t.Fatal(err)
	}
	scfg, err := handshake.NewServerConfig(kex, crypto.NewCertChain(serverTLS))
	if err != nil {
		t.Fatal(err)
	}
	config := populateServerConfig(&Config{Versions: []protocol.VersionNumber{v}})
	destConnID, srcConnID := connID, connID
	if v.UsesIETFHeaderFormat() {
		destConnID = nil
	}
	// the server's runner queues a session for Accept (h2quic) here
	accepted := make(chan struct{}, 2)
	run := &runner{onHandshakeCompleteImpl: func(Session) { accepted <- struct{}{} }, removeConnectionIDImpl: func(protocol.ConnectionID) {}}
	qs, err := newSession(quicbedConn{remote: remote}, run, v, destConnID, srcConnID, scfg, serverTLS, config, logger)
	if err != nil {
		t.Fatal(err)
	}
	sess := qs.(*session)
	rec := &quicbedUnpacker{inner: sess.unpacker, cs: serverCS, tries: make(chan quicbedTry, 1000)}
	sess.unpacker = rec
	// The diversification nonce of the server's packets at the initial
	// encryption level. quic-go's client derives its initial keys only once
	// it has it (from the SHLO packet's header); the key it seals with does
	// not depend on it (crypto.deriveKeys diversifies the server's key only),
	// and Chromium seals without. Handing it over lets quic-go's client seal
	// with its initial key before the SHLO, as Chromium does.
	divNonce := sess.packer.(*packetPackerLegacy).divNonce
	go sess.run()
	defer sess.Close()

	// deliver hands a datagram to the session as the packet handler map does.
	deliver := func(datagram []byte) protocol.PacketNumber {
		data := *getPacketBuffer()
		data = data[:len(datagram)]
		copy(data, datagram)
		r := bytes.NewReader(data)
		iHdr, err := wire.ParseInvariantHeader(r, config.ConnectionIDLength)
		if err != nil {
			t.Fatal(err)
		}
		hdr, err := iHdr.Parse(r, protocol.PerspectiveClient, v)
		if err != nil {
			t.Fatal(err)
		}
		hdr.Raw = data[:len(data)-r.Len()]
		pn := hdr.PacketNumber // small: the session's inferred number is the same
		sess.handlePacket(&receivedPacket{remoteAddr: remote, header: hdr, data: data[len(data)-r.Len():], rcvTime: time.Now()})
		return pn
	}

	// The client: quic-go's crypto setup and packet packer.
	clientStream := &quicbedClientStream{in: toClient, out: make(chan []byte, 8)}
	clientEvents := make(chan struct{}, 8)
	clientParams := make(chan handshake.TransportParameters, 1)
	clientErr := make(chan error, 1)
	params := &handshake.TransportParameters{
		StreamFlowControlWindow:     protocol.ReceiveStreamFlowControlWindow,
		ConnectionFlowControlWindow: protocol.ReceiveConnectionFlowControlWindow,
		MaxStreams:                  protocol.DefaultMaxIncomingStreams,
		IdleTimeout:                 protocol.DefaultIdleTimeout,
	}
	client, err := handshake.NewCryptoSetupClient(clientStream, connID, v, clientTLS, params, clientParams,
		clientEvents, v, nil, logger)
	if err != nil {
		t.Fatal(err)
	}
	go func() { clientErr <- client.HandleCryptoStream() }()
	defer toClient.Close()
	clientSrcConnID := connID
	if v == protocol.Version44 {
		clientSrcConnID = nil // as client.generateConnectionIDs
	}
	packer := newPacketPackerLegacy(connID, clientSrcConnID,
		func(protocol.PacketNumber) protocol.PacketNumberLen { return protocol.PacketNumberLen2 },
		remote, nil, nil, nil, nil, nil, protocol.PerspectiveClient, v)
	pack := func(level protocol.EncryptionLevel, sealer handshake.Sealer, f wire.Frame) []byte {
		raw, err := packer.writeAndSealPacket(packer.getHeader(level), []wire.Frame{f}, sealer)
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte(nil), raw...)
	}

	// The client hellos, each in packets of its own, until the full one.
	var offset protocol.ByteCount
	var hello [][]byte
	var rejects int
	for n := 1; hello == nil; n++ {
		var msg []byte
		select {
		case msg = <-clientStream.out:
		case err := <-clientErr:
			t.Fatalf("client hello %d: the client's crypto setup ended: %v", n, err)
		case <-time.After(quicbedWait):
			t.Fatalf("no client hello %d", n)
		}
		m, err := handshake.ParseHandshakeMessage(bytes.NewReader(msg))
		if err != nil || m.Tag != handshake.TagCHLO {
			t.Fatalf("client hello %d: %v %v", n, m, err)
		}
		level, sealer := client.GetSealerForCryptoStream()
		var pkts [][]byte
		for len(msg) > 0 {
			l := len(msg)
			if l > 1000 {
				l = 1000
			}
			f := &wire.StreamFrame{StreamID: v.CryptoStreamID(), Offset: offset, Data: msg[:l], DataLenPresent: true}
			pkts = append(pkts, pack(level, sealer, f))
			offset += protocol.ByteCount(l)
			msg = msg[l:]
		}
		if _, full := m.Data[handshake.TagPUBS]; full {
			hello = pkts
			break
		}
		rejects++
		for _, p := range pkts {
			deliver(p)
		}
	}
	if rejects != 2 {
		t.Errorf("%d REJs before the full client hello, want 2 (cold, quic-go v0.10.2)", rejects)
	}

	// The request, sealed with the client's initial key.
	if err := client.(divNonceSetter).SetDiversificationNonce(divNonce); err != nil {
		t.Fatal(err)
	}
	select {
	case <-clientEvents:
	case err := <-clientErr:
		t.Fatalf("the client's crypto setup ended: %v", err)
	case <-time.After(quicbedWait):
		t.Fatal("the client made no initial key")
	}
	level, sealer := client.GetSealer()
	if level != protocol.EncryptionSecure {
		t.Fatalf("the client seals at %s, want %s", level, protocol.EncryptionSecure)
	}
	headers := quicbedRequestHeaders(t)
	req := pack(level, sealer, &wire.StreamFrame{StreamID: 3, Data: headers, DataLenPresent: true})

	var reqPN protocol.PacketNumber
	switch order {
	case "together":
		for _, p := range hello {
			deliver(p)
		}
		reqPN = deliver(req)
	case "keys-first":
		for _, p := range hello {
			deliver(p)
		}
		select {
		case <-shlo:
		case <-time.After(quicbedWait):
			t.Fatal("the server sent no SHLO")
		}
		reqPN = deliver(req)
	case "request-first":
		reqPN = deliver(req)
		first := rec.next(t, reqPN)
		if first.keys || first.err == nil {
			t.Fatalf("request-first: the first try had keys %v, error %v; want no key and an error", first.keys, first.err)
		}
		if !first.intact {
			t.Fatal("request-first: a try without the initial key changed the packet")
		}
		for _, p := range hello {
			deliver(p)
		}
	}

	// The first try of the request with the server's keys made.
	var try quicbedTry
	for {
		try = rec.next(t, reqPN)
		if try.keys || try.err == nil {
			break
		}
	}
	if try.err != nil {
		changed := "left it as received"
		if !try.intact {
			changed = "zeroed it"
		}
		t.Fatalf("the request sealed with the initial key (packet %d) was not decrypted once the server had its keys: %v; the failed open %s",
			reqPN, try.err, changed)
	}
	if try.level != protocol.EncryptionSecure || len(try.frames) != 1 {
		t.Fatalf("request: level %s, frames %v; want %s and one STREAM frame", try.level, try.frames, protocol.EncryptionSecure)
	}
	if f, ok := try.frames[0].(*wire.StreamFrame); !ok || f.StreamID != 3 || !bytes.Equal(f.Data, headers) {
		t.Fatalf("request: %#v, want the HEADERS frame on stream 3", try.frames[0])
	}
	// It reached the headers stream, where h2quic's server reads it.
	got := make(chan []byte, 1)
	go func() {
		str, err := sess.AcceptStream()
		if err != nil {
			got <- nil
			return
		}
		b := make([]byte, len(headers))
		if _, err := io.ReadFull(str, b); err != nil {
			b = nil
		}
		got <- b
	}()
	select {
	case b := <-got:
		if !bytes.Equal(b, headers) {
			t.Fatalf("the headers stream has %x, want %x", b, headers)
		}
	case <-time.After(quicbedWait):
		t.Fatal("the request never reached the headers stream")
	}
	// The session was handed to Accept once its SHLO was written, although the
	// client sent no forward-secure packet (its handshake is not complete): h2quic
	// serves the request now, not a round trip later (the patch's third part).
	select {
	case <-accepted:
	case <-time.After(quicbedWait):
		t.Fatal("the session was not handed to Accept after its SHLO: it waits for the client's first forward-secure packet")
	}
}

// quicbedRequestHeaders is a GET of https://quicbed.test/ for stream 5 as
// h2quic's client writes it on the headers stream: an HTTP/2 HEADERS frame.
func quicbedRequestHeaders(t *testing.T) []byte {
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "quicbed.test"}, {":path", "/"}} {
		if err := enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
			t.Fatal(err)
		}
	}
	var frame bytes.Buffer
	err := http2.NewFramer(&frame, nil).WriteHeaders(http2.HeadersFrameParam{
		StreamID: 5, BlockFragment: block.Bytes(), EndStream: true, EndHeaders: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	return frame.Bytes()
}

// quicbedTLS is a self-signed ECDSA certificate for quicbed.test: the
// server's, and the client's trust in it.
func quicbedTLS(t *testing.T) (server, client *tls.Config) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "quicbed.test"},
		DNSNames:              []string{"quicbed.test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	server = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}}}
	return server, &tls.Config{RootCAs: pool, ServerName: "quicbed.test"}
}

// quicbedTry is one Unpack of a packet by the server session.
type quicbedTry struct {
	pn     protocol.PacketNumber
	keys   bool // the server had made its keys before the try
	intact bool // the packet was as received after the try
	level  protocol.EncryptionLevel
	frames []wire.Frame
	err    error
}

// quicbedUnpacker records each try of the session's own unpacker.
type quicbedUnpacker struct {
	inner unpacker
	cs    handshake.CryptoSetup
	tries chan quicbedTry
}

func (u *quicbedUnpacker) Unpack(headerBinary []byte, hdr *wire.Header, data []byte) (*unpackedPacket, error) {
	// The server's crypto setup makes both keys under one lock; its crypto
	// stream sealer is the initial one from then on.
	level, _ := u.cs.GetSealerForCryptoStream()
	received := append([]byte(nil), data...)
	p, err := u.inner.Unpack(headerBinary, hdr, data)
	try := quicbedTry{pn: hdr.PacketNumber, keys: level == protocol.EncryptionSecure, err: err}
	try.intact = err != nil && bytes.Equal(data, received)
	if p != nil {
		try.level, try.frames = p.encryptionLevel, p.frames
	}
	select {
	case u.tries <- try:
	default:
		panic("quicbedUnpacker: too many packets")
	}
	return p, err
}

// next is the next try of packet pn.
func (u *quicbedUnpacker) next(t *testing.T, pn protocol.PacketNumber) quicbedTry {
	t.Helper()
	deadline := time.After(quicbedWait)
	for {
		select {
		case try := <-u.tries:
			if try.pn == pn {
				return try
			}
		case <-deadline:
			t.Fatalf("the session did not try packet %d", pn)
		}
	}
}

// quicbedTap passes the server's crypto stream through and gives what the
// server writes to the client as well.
type quicbedTap struct {
	io.ReadWriter
	to   *quicbedBuffer
	shlo chan struct{}
	once sync.Once
}

func (t *quicbedTap) Write(p []byte) (int, error) {
	t.to.Write(p)
	if m, err := handshake.ParseHandshakeMessage(bytes.NewReader(p)); err == nil && m.Tag == handshake.TagSHLO {
		// after the write below: the session has the SHLO to send
		defer t.once.Do(func() { close(t.shlo) })
	}
	return t.ReadWriter.Write(p)
}

// quicbedClientStream is the client's crypto stream: it reads what the
// server's crypto setup wrote and hands each message it writes to the test.
type quicbedClientStream struct {
	in  *quicbedBuffer
	out chan []byte
}

func (s *quicbedClientStream) Read(p []byte) (int, error) { return s.in.Read(p) }

func (s *quicbedClientStream) Write(p []byte) (int, error) {
	s.out <- append([]byte(nil), p...)
	return len(p), nil
}

// quicbedBuffer is a pipe whose writes never block.
type quicbedBuffer struct {
	mu     sync.Mutex
	cond   *sync.Cond
	buf    bytes.Buffer
	closed bool
}

func newQuicbedBuffer() *quicbedBuffer {
	b := &quicbedBuffer{}
	b.cond = sync.NewCond(&b.mu)
	return b
}

func (b *quicbedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	b.cond.Broadcast()
	return len(p), nil
}

func (b *quicbedBuffer) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.buf.Len() == 0 && !b.closed {
		b.cond.Wait()
	}
	if b.buf.Len() == 0 {
		return 0, io.EOF
	}
	return b.buf.Read(p)
}

func (b *quicbedBuffer) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	b.cond.Broadcast()
	return nil
}

// quicbedConn is the server session's connection: its packets go nowhere
// (the client reads the handshake messages from the crypto stream's tap).
type quicbedConn struct{ remote net.Addr }

func (c quicbedConn) Write([]byte) error { return nil }
func (c quicbedConn) Read([]byte) (int, net.Addr, error) {
	return 0, nil, fmt.Errorf("quicbedConn: not read")
}
func (c quicbedConn) Close() error { return nil }
func (c quicbedConn) LocalAddr() net.Addr {
	return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 443}
}
func (c quicbedConn) RemoteAddr() net.Addr          { return c.remote }
func (c quicbedConn) SetCurrentRemoteAddr(net.Addr) {}
