package gquicserver

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	_ "unsafe" // go:linkname, below

	quic "github.com/lucas-clemente/quic-go"
	"github.com/lucas-clemente/quic-go/h2quic"

	"quicbed/gquic/internal/docroot"
)

// Name is the server's name in its start record.
const Name = "quicbed-gquic-server"

// Congestion control. quic-go v0.10.2 has no setting for it: every connection's
// sent packet handler makes its controller with
// congestion.NewCubicSender(..., false /* don't use reno since chromium doesn't
// (why?) */, ...) (internal/ackhandler/sent_packet_handler.go), so it runs CUBIC,
// a port of Chromium's, emulating defaultNumConnections = 2 connections
// (internal/congestion/cubic.go, and cubic_sender.go's numConnections; nothing
// outside the tests calls SetNumEmulatedConnections) with backoff beta = 0.7 for
// one: a loss cuts the window to (N-1+beta)/N = 0.85 of itself. These are the
// constants of the compiled source, which source_test.go checks against the module;
// they are logged under the h3 servers' names.
const (
	CC        = "cubic"
	CubicN    = 2
	CubicBeta = "0.7"
)

func ccFields() map[string]any {
	return map[string]any{"cc": CC, "cubic_n": CubicN, "cubic_beta": json.Number(CubicBeta)}
}

// pruneIdle is how long an address that completed no handshake is remembered after
// its last datagram: longer than quic-go's handshake timeout (10 s), so an address
// still in its handshake is never forgotten.
const pruneIdle = 15 * time.Second

// h2quic.Server listens through its package variable quicListen (quic.Listen,
// "allows mocking of quic.Listen" in the tests) and keeps the sessions it accepts
// to itself. Replacing that variable is the one way to see each session, its
// version and its end without changing quic-go: listen wraps the listener so that
// every accepted session is logged before h2quic serves it. The release is pinned
// (v0.10.2 will not change); the tests fail if the hook stops working.
//
//go:linkname h2quicListen github.com/lucas-clemente/quic-go/h2quic.quicListen
var h2quicListen func(net.PacketConn, *tls.Config, *quic.Config) (quic.Listener, error)

var hookOnce sync.Once

func installHook() {
	hookOnce.Do(func() {
		h2quicListen = func(conn net.PacketConn, tlsConf *tls.Config, qc *quic.Config) (quic.Listener, error) {
			oc, ok := conn.(*observedConn)
			if !ok || oc.srv == nil {
				return nil, errors.New("gquicserver: h2quic listened on a socket that is not a gquicserver's")
			}
			ln, err := quic.Listen(conn, tlsConf, qc)
			if err != nil {
				return nil, err
			}
			return &loggingListener{Listener: ln, srv: oc.srv}, nil
		}
	})
}

type loggingListener struct {
	quic.Listener
	srv *Server
}

// Accept returns a session once its handshake completed (quic-go queues it then),
// after logging it.
func (l *loggingListener) Accept() (quic.Session, error) {
	sess, err := l.Listener.Accept()
	if err == nil {
		l.srv.accepted(sess)
	}
	return sess, err
}

// Server is a running gQUIC server.
type Server struct {
	cfg      Config
	log      *Logger
	conn     *observedConn
	h2       *h2quic.Server
	nextID   atomic.Int64
	serving  chan error
	stopping atomic.Bool
	done     chan struct{}
}

// Start listens and serves in the background; the start record is logged first.
func Start(cfg Config, log *Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	versions, _ := ParseVersions(cfg.Versions)
	cert, err := tls.LoadX509KeyPair(cfg.Cert, cfg.Key)
	if err != nil {
		return nil, fmt.Errorf("-cert/-key: %v", err)
	}
	s := &Server{cfg: cfg, log: log, serving: make(chan error, 1), done: make(chan struct{})}
	handler, err := docroot.NewHandler(cfg.Docroot, s.logRequest)
	if err != nil {
		return nil, err
	}
	udpAddr, err := net.ResolveUDPAddr("udp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("-addr %q: %v", cfg.Addr, err)
	}
	udp, err := net.ListenUDP("udp", udpAddr)
	if err != nil {
		return nil, fmt.Errorf("-addr %q: %v", cfg.Addr, err)
	}
	s.conn = &observedConn{PacketConn: udp, srv: s}
	s.h2 = &h2quic.Server{
		Server: &http.Server{
			Handler:   withDate(handler),
			TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
		},
		QuicConfig: &quic.Config{Versions: versions},
	}
	installHook()
	var names []string
	for _, v := range versions {
		names = append(names, WireName(v))
	}
	qv, qr := QuicGoVersion()
	start := map[string]any{
		"server": Name, "addr": udp.LocalAddr().String(), "docroot": cfg.Docroot, "config": cfg,
		"versions": names, "quic_go_module": QuicGoModule, "quic_go_version": qv,
		"go_version": runtime.Version(), "pid": os.Getpid(),
		// quicbed's patch of quic-go (go/patches), its name and digest; a build
		// without the patched copy does not compile.
		"quic_go_patch": quic.QuicbedPatch,
		// the pacing step and the congestion window's start and cap compiled in
		"pacing_min_delay_us": quic.QuicbedMinPacingDelay.Microseconds(),
		"initial_cwnd_bytes":  quic.QuicbedInitialCongestionWindow,
		"max_cwnd_bytes":      quic.QuicbedMaxCongestionWindow,
	}
	if qr != "" {
		start["quic_go_replace"] = qr
	}
	for k, v := range ccFields() {
		start[k] = v
	}
	log.Log("start", start)
	go func() { s.serving <- s.h2.Serve(s.conn) }()
	go s.pruneLoop()
	return s, nil
}

// withDate adds the Date header, as Go's HTTP servers (and quic-go's HTTP/3 server)
// do for every response; h2quic does not.
func withDate(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", time.Now().UTC().Format(http.TimeFormat))
		h.ServeHTTP(w, r)
	})
}

// Addr is the bound UDP address.
func (s *Server) Addr() net.Addr { return s.conn.LocalAddr() }

// Serving delivers the error h2quic stopped serving with (after Stop too).
func (s *Server) Serving() <-chan error { return s.serving }

func (s *Server) pruneLoop() {
	t := time.NewTicker(pruneIdle / 3)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
			s.conn.prune(pruneIdle)
		}
	}
}

// accepted logs a session whose handshake completed and, when it ends, its close.
func (s *Server) accepted(sess quic.Session) {
	now := time.Now()
	id := s.nextID.Add(1)
	rec := map[string]any{
		"conn_id": id, "remote": sess.RemoteAddr().String(), "sni": sess.ConnectionState().ServerName,
		"quic_version": nil, "handshake_ms": nil, "used_0rtt": nil, "rejects": nil,
		// gQUIC's crypto has no TLS, no ALPN and no session resumption: a client
		// that comes back uses its cached server config, which is used_0rtt.
		"did_resume": nil, "alpn": nil, "tls_version": nil,
	}
	// The negotiated version: session.GetVersion, exported by quic-go's session
	// type but not in the Session interface.
	if v, ok := sess.(interface{ GetVersion() quic.VersionNumber }); ok {
		rec["quic_version"] = WireName(v.GetVersion())
	}
	k, _ := addrKey(sess.RemoteAddr())
	p := s.conn.lookup(k)
	begin := now
	if p != nil && p.connID.CompareAndSwap(0, id) {
		begin = p.first
		rejects := p.rejects.Load()
		rec["handshake_ms"] = ms(now.Sub(p.first))
		rec["rejects"] = rejects
		rec["used_0rtt"] = rejects == 0
		// the round trips before the client's hello was accepted: one per REJ (the
		// requests go with the accepted hello and are answered with the SHLO)
		rec["handshake_rtts"] = rejects
	} else {
		// Another live connection from this address and port, or none seen: what
		// the socket saw cannot be told apart, so the handshake fields stay null
		// (and this connection's requests are not told apart either).
		rec["shared_address"] = p != nil
		if p != nil {
			p.shared.Store(true)
		}
		p = nil
	}
	for k, v := range ccFields() {
		rec[k] = v
	}
	for k, v := range windowFields(sess) {
		rec[k] = v
	}
	s.log.Log("conn", rec)
	go func() {
		<-sess.Context().Done()
		end := map[string]any{"conn_id": id, "duration_ms": ms(time.Since(begin))}
		if p != nil {
			st := p.stats()
			st["cc"] = CC
			end["stats"] = st
			s.conn.peers.CompareAndDelete(k, p)
		}
		s.log.Log("conn_close", end)
	}()
}

// connOf is the conn_id of the connection a request came on (h2quic gives the
// request its session's remote address) and what the socket saw of it, 0 and nil
// if it cannot be told: no connection from that address, or two.
func (s *Server) connOf(r *http.Request) (int64, *peer) {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return 0, nil
	}
	if p := s.conn.lookup(netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())); p != nil && !p.shared.Load() {
		if id := p.connID.Load(); id != 0 {
			return id, p
		}
	}
	return 0, nil
}

func (s *Server) logRequest(r *http.Request, status int, n int64, took time.Duration) {
	rec := map[string]any{
		"conn_id": nil, "method": r.Method, "path": r.URL.Path, "status": status,
		"bytes": n, "duration_ms": ms(took), "proto": r.Proto,
	}
	if id, p := s.connOf(r); id != 0 {
		rec["conn_id"] = id
		// the connection's flight so far: its handler returned once the response was
		// handed to quic-go, so for the page's last object this is (nearly) all of it
		rec["flight"] = map[string]any{
			"bin_ms": BinMS, "sent_bytes": p.sentBytes.Load(), "peak_bytes": p.sentFlight.peaks(),
		}
	}
	s.log.Log("request", rec)
}

// Stop closes every connection (quic-go v0.10.2 has no graceful shutdown: h2quic's
// CloseGracefully does nothing) and the socket, and logs "stop".
func (s *Server) Stop() {
	if !s.stopping.CompareAndSwap(false, true) {
		return
	}
	close(s.done)
	_ = s.h2.Close()
	_ = s.conn.Close()
	s.log.Log("stop", nil)
}
