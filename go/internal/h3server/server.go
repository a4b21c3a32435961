package h3server

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/qlogwriter"

	"quicbed/internal/qtp"
	"quicbed/internal/udpbuf"
)

// Congestion control. quic-go v0.65.0 runs NewReno and nothing else; quicbed
// builds it with a patch (go/patches) that can switch its dormant CUBIC (a
// port of Chromium's) back on, with the number of emulated connections N and
// the backoff beta as run-time settings. A loss cuts CUBIC's window to
// (N-1+beta)/N of itself: 0.7 with quic-go's N = 1, 0.85 with Chromium's
// N = 2. See README.md, "CUBIC is not Chromium's CUBIC".
const (
	// DefaultCC is quic-go's own choice, NewReno.
	DefaultCC = quic.CongestionControlReno
	// DefaultCubicN and DefaultCubicBeta are quic-go's CUBIC constants.
	DefaultCubicN    = 1
	DefaultCubicBeta = 0.7
	// DefaultLossDetection is quic-go's own, adaptive: a spurious loss switches
	// the packet threshold off and may raise the time threshold up to 2 RTT.
	// quicbed's patch adds RFC 9002's fixed thresholds (3 packets, 9/8 RTT).
	DefaultLossDetection = quic.LossDetectionAdaptive
)

// Config is everything the server is started with; it is logged at start.
type Config struct {
	// Addr is the UDP address to listen on (default ":443").
	Addr string `json:"addr"`
	// Docroot is the document tree to serve; it, or Replay, is required.
	Docroot string `json:"docroot"`
	// Cert and Key are PEM files (required with Docroot, refused with Replay;
	// there is no fallback certificate).
	Cert string `json:"cert"`
	Key  string `json:"key"`
	// Replay is a replay archive to serve instead of a document tree
	// (docs/replay.md, package replay): every origin of the archive on Addr, the
	// origin picked by each request's :authority.
	Replay string `json:"replay,omitempty"`
	// ReplayCerts is a JSON object mapping each origin host of the archive to
	// {"cert": PEM file, "key": PEM file} (relative paths from the file's
	// folder); the handshake picks one by SNI and refuses an unknown name.
	// Required with Replay.
	ReplayCerts string `json:"replay_certs,omitempty"`
	// ReplayWait sleeps each entry's recorded wait_ms before its response
	// (default false: answered at once). Only with Replay.
	ReplayWait bool `json:"replay_wait,omitempty"`
	// QlogDir enables qlog output to this directory (opt-in; "" = none).
	QlogDir string `json:"qlog_dir"`
	// Flow-control windows in bytes; 0 = quic-go's default (512 KiB initial,
	// 6 MiB max per stream; 768 KiB initial, 15 MiB max per connection). The
	// initial ones are the transport parameters the server advertises
	// (initial_max_stream_data_* for all three stream kinds: quic-go has one
	// stream window; initial_max_data); quic-go grows a window up to its
	// maximum as the application reads (auto-tuning).
	InitialStreamWindow uint64 `json:"initial_stream_window"`
	MaxStreamWindow     uint64 `json:"max_stream_window"`
	InitialConnWindow   uint64 `json:"initial_conn_window"`
	MaxConnWindow       uint64 `json:"max_conn_window"`
	// NoAutotune keeps each window at its initial value (the maximum is set
	// to it), so what the server advertised is all the peer ever gets.
	NoAutotune bool `json:"no_autotune"`
	// Stream limits; 0 = quic-go's default (100 bidirectional, 100 unidirectional).
	MaxIncomingStreams    int64 `json:"max_incoming_streams"`
	MaxIncomingUniStreams int64 `json:"max_incoming_uni_streams"`
	// IdleTimeout closes idle connections; 0 = quic-go's default (30 s).
	IdleTimeout time.Duration `json:"idle_timeout"`
	// CC is the congestion control: "reno" (quic-go's own, NewReno) or "cubic"
	// (quic-go's CUBIC, switched on by quicbed's patch). Required.
	CC string `json:"cc"`
	// CubicN is CUBIC's number of emulated connections (>= 1; quic-go's 1,
	// Chromium's 2) and CubicBeta one connection's backoff (0 < beta < 1,
	// quic-go's and Chromium's 0.7). Required with CC "cubic", and must be 0
	// with "reno", which has neither (its backoff is 0.7).
	CubicN    int     `json:"cubic_n"`
	CubicBeta float64 `json:"cubic_beta"`
	// LossDetection is "adaptive" (quic-go's own) or "rfc9002" (its
	// thresholds never adapted; quicbed's patch). Required.
	LossDetection string `json:"loss_detection"`
	// UDPRcvBuf and UDPSndBuf are the SO_RCVBUF and SO_SNDBUF asked for the
	// listening socket, bytes (0: quic-go's own, which raises both to 7 MiB).
	// Set after quic-go has wrapped the socket, so the request wins (package
	// udpbuf); the kernel doubles it, and the start record gives what it holds.
	UDPRcvBuf int `json:"udp_rcvbuf"`
	UDPSndBuf int `json:"udp_sndbuf"`
	// Groups are the TLS 1.3 key-exchange groups the server accepts, its
	// tls.Config's CurvePreferences (-groups, ParseGroups; nil: crypto/tls's
	// default, which prefers X25519MLKEM768). quicbed pins the same group on
	// every arm of a cell, so that HTTP/2 and HTTP/3 run the same handshake;
	// crypto/tls takes the list as a set (groups.go), so one group pins it.
	// Logged as IANA numbers (29 x25519, 23 secp256r1, 4588 x25519mlkem768);
	// each conn record's tls_group is the one negotiated.
	Groups []tls.CurveID `json:"groups"`
	// TCPAddr, when set, also serves the tree over HTTP/2 on TCP+TLS 1.3 at this
	// address (tcp.go): the TCP side of a background flow, whose congestion
	// control is the socket's own (TCPCC), not the host's. "" = no TCP listener.
	TCPAddr string `json:"tcp_addr,omitempty"`
	// TCPCC is the kernel congestion control set on the TCP listener
	// (TCP_CONGESTION, inherited by every accepted connection); "" = the
	// namespace's default. Only with TCPAddr.
	TCPCC string `json:"tcp_cc,omitempty"`
	// SinkInterval, when > 0, answers POST /sink (sink.go) on both sides,
	// discarding and counting the body, and logs the count every interval: the
	// receiving end of a background upload. 0 = no sink.
	SinkInterval time.Duration `json:"sink_interval,omitempty"`
}

// Validate names the first bad setting the way the command line spells it.
func (c Config) Validate() error {
	switch {
	case c.Docroot == "" && c.Replay == "":
		return errors.New("-docroot is required (or -replay DIR)")
	case c.Docroot != "" && c.Replay != "":
		return errors.New("-docroot and -replay: give one of them")
	case c.Replay != "" && c.ReplayCerts == "":
		return errors.New("-replay needs -replay-certs (a certificate per origin host; there is no fallback certificate)")
	case c.Replay != "" && (c.Cert != "" || c.Key != ""):
		return errors.New("-cert and -key: with -replay, each origin's certificate comes from -replay-certs")
	case c.Replay == "" && c.ReplayCerts != "":
		return errors.New("-replay-certs applies only to -replay")
	case c.Replay == "" && c.ReplayWait:
		return errors.New("-replay-wait applies only to -replay")
	case c.Replay == "" && (c.Cert == "" || c.Key == ""):
		return errors.New("-cert and -key are required (there is no fallback certificate)")
	case c.CC != quic.CongestionControlReno && c.CC != quic.CongestionControlCubic:
		return fmt.Errorf("congestion control %q is not supported by quic-go (it has reno, its default, and cubic)", c.CC)
	case c.CC == quic.CongestionControlReno && c.CubicN != 0:
		return fmt.Errorf("-cubic-n %d: applies only to -cc cubic", c.CubicN)
	case c.CC == quic.CongestionControlReno && c.CubicBeta != 0:
		return fmt.Errorf("-cubic-beta %v: applies only to -cc cubic", c.CubicBeta)
	case c.CC == quic.CongestionControlCubic && c.CubicN < 1:
		return fmt.Errorf("-cubic-n must be >= 1 (got %d)", c.CubicN)
	case c.CC == quic.CongestionControlCubic && !(float32(c.CubicBeta) > 0 && float32(c.CubicBeta) < 1):
		return fmt.Errorf("-cubic-beta must be > 0 and < 1 (got %v)", c.CubicBeta)
	case c.LossDetection != quic.LossDetectionAdaptive && c.LossDetection != quic.LossDetectionRFC9002:
		return fmt.Errorf("-loss-detection %q: quic-go has %s (its own) and %s", c.LossDetection, quic.LossDetectionAdaptive, quic.LossDetectionRFC9002)
	case c.MaxIncomingStreams < 0:
		return fmt.Errorf("-max-incoming-streams must be >= 0 (got %d)", c.MaxIncomingStreams)
	case c.MaxIncomingUniStreams < 0:
		return fmt.Errorf("-max-incoming-uni-streams must be >= 0 (got %d)", c.MaxIncomingUniStreams)
	case c.UDPRcvBuf < 0:
		return fmt.Errorf("-udp-rcvbuf must be >= 0 (got %d)", c.UDPRcvBuf)
	case c.UDPSndBuf < 0:
		return fmt.Errorf("-udp-sndbuf must be >= 0 (got %d)", c.UDPSndBuf)
	case c.SinkInterval < 0:
		return fmt.Errorf("-sink-interval must be >= 0 (got %v)", c.SinkInterval)
	case c.SinkInterval > 0 && c.Replay != "":
		return errors.New("-sink-interval serves a -docroot's server; a replayed page has no sink")
	case c.TCPCC != "" && c.TCPAddr == "":
		return fmt.Errorf("-tcp-cc %s: applies only to -tcp-addr", c.TCPCC)
	case c.TCPAddr != "" && c.Replay != "":
		return errors.New("-tcp-addr serves a -docroot; a replayed page has no TCP listener here")
	case !validKernelCC(c.TCPCC):
		return fmt.Errorf("-tcp-cc %q: not a kernel congestion control name", c.TCPCC)
	case validGroups(c.Groups) != nil:
		return validGroups(c.Groups)
	case c.IdleTimeout < 0:
		return fmt.Errorf("-idle-timeout must be >= 0 (got %v)", c.IdleTimeout)
	case c.MaxStreamWindow != 0 && c.InitialStreamWindow > c.MaxStreamWindow:
		return fmt.Errorf("-initial-stream-window %d is larger than -max-stream-window %d", c.InitialStreamWindow, c.MaxStreamWindow)
	case c.MaxConnWindow != 0 && c.InitialConnWindow > c.MaxConnWindow:
		return fmt.Errorf("-initial-conn-window %d is larger than -max-conn-window %d", c.InitialConnWindow, c.MaxConnWindow)
	case c.NoAutotune && (c.MaxStreamWindow != 0 || c.MaxConnWindow != 0):
		return errors.New("-flow-control-autotune=false sets the maximum windows to the initial ones: give no -max-stream-window or -max-conn-window")
	}
	if c.Replay != "" {
		if st, err := os.Stat(c.Replay); err != nil || !st.IsDir() {
			return fmt.Errorf("-replay %q is not a readable directory", c.Replay)
		}
		return nil
	}
	if st, err := os.Stat(c.Docroot); err != nil || !st.IsDir() {
		return fmt.Errorf("-docroot %q is not a readable directory", c.Docroot)
	}
	return nil
}

// Logger writes one JSON object per line.
type Logger struct {
	mu sync.Mutex
	w  io.Writer
}

// NewLogger logs to w.
func NewLogger(w io.Writer) *Logger { return &Logger{w: w} }

// Log writes event with fields and a timestamp.
func (l *Logger) Log(event string, fields map[string]any) {
	rec := map[string]any{"ts": time.Now().UTC().Format(time.RFC3339Nano), "event": event}
	for k, v := range fields {
		rec[k] = v
	}
	b, _ := json.Marshal(rec)
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.w.Write(append(b, '\n'))
}

type connIDKey struct{}

// QuicGoVersion is the quic-go module version compiled in.
func QuicGoVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/quic-go/quic-go" {
				return d.Version
			}
		}
	}
	return "unknown"
}

// Server is a running HTTP/3 server.
type Server struct {
	cfg     Config
	log     *Logger
	h3      *http3.Server
	tr      *quic.Transport
	ln      *quic.EarlyListener
	udp     net.PacketConn
	nextID  atomic.Int64
	serving chan error
	tcp     *tcpSide // the HTTP/2 listener (TCPAddr), or nil
	sink    sink     // POST /sink's count (SinkInterval)
}

// qlogTracer writes each connection's qlog to dir, as <odcid>_server.sqlog, the
// file quic-go's qlog.DefaultConnectionTracer would write there. That one reads
// its directory from the QLOGDIR environment variable; this one takes it as an
// argument, so that setting up a server changes no process-wide state.
func qlogTracer(dir string, log *Logger) func(context.Context, bool, quic.ConnectionID) qlogwriter.Trace {
	return func(_ context.Context, isClient bool, connID quic.ConnectionID) qlogwriter.Trace {
		label := "server"
		if isClient {
			label = "client"
		}
		path := filepath.Join(dir, fmt.Sprintf("%s_%s.sqlog", connID, label))
		f, err := os.Create(path)
		if err != nil {
			log.Log("qlog_failed", map[string]any{"path": path, "error": err.Error()})
			return nil
		}
		fileSeq := qlogwriter.NewConnectionFileSeq(&bufferedFile{bufio.NewWriter(f), f}, isClient, connID)
		go fileSeq.Run()
		return fileSeq
	}
}

// bufferedFile flushes its buffer before closing the file.
type bufferedFile struct {
	*bufio.Writer
	f *os.File
}

func (b *bufferedFile) Close() error {
	if err := b.Flush(); err != nil {
		_ = b.f.Close()
		return err
	}
	return b.f.Close()
}

// quic-go's defaults for the windows (its internal/protocol, which we cannot
// import: DefaultInitialMaxStreamData, DefaultInitialMaxData = 1.5 times
// that, DefaultMaxReceiveStreamFlowControlWindow and ...ConnectionFlowControlWindow).
const (
	quicGoInitialStreamWindow = 512 << 10
	quicGoInitialConnWindow   = 768 << 10
	quicGoMaxStreamWindow     = 6 << 20
	quicGoMaxConnWindow       = 15 << 20
)

// Windows returns the initial and maximum stream and connection receive
// windows the server runs with: quic-go's defaults where unset, a maximum of
// at least the initial value (quic-go would shrink a window larger than its
// maximum when it first grows it), and the initial value itself without
// auto-tuning.
func (c Config) Windows() (initStream, maxStream, initConn, maxConn uint64) {
	initStream, maxStream = c.InitialStreamWindow, c.MaxStreamWindow
	initConn, maxConn = c.InitialConnWindow, c.MaxConnWindow
	if initStream == 0 {
		initStream = quicGoInitialStreamWindow
	}
	if initConn == 0 {
		initConn = quicGoInitialConnWindow
	}
	if maxStream == 0 {
		maxStream = max(initStream, quicGoMaxStreamWindow)
	}
	if maxConn == 0 {
		maxConn = max(initConn, quicGoMaxConnWindow)
	}
	if c.NoAutotune {
		maxStream, maxConn = initStream, initConn
	}
	return initStream, maxStream, initConn, maxConn
}

func (c Config) quicConfig(log *Logger) *quic.Config {
	initStream, maxStream, initConn, maxConn := c.Windows()
	q := &quic.Config{
		Allow0RTT:                      true,
		InitialStreamReceiveWindow:     initStream,
		MaxStreamReceiveWindow:         maxStream,
		InitialConnectionReceiveWindow: initConn,
		MaxConnectionReceiveWindow:     maxConn,
		MaxIncomingStreams:             c.MaxIncomingStreams,
		MaxIncomingUniStreams:          c.MaxIncomingUniStreams,
		MaxIdleTimeout:                 c.IdleTimeout,
	}
	// Every connection carries a qtp.Record (Transport.ConnContext): its
	// transport parameters, both sides, as quic-go's qlog records them, go into
	// its conn record; the qlog file only with -qlog-dir.
	var file func(context.Context, bool, quic.ConnectionID) qlogwriter.Trace
	if c.QlogDir != "" {
		file = qlogTracer(c.QlogDir, log)
	}
	q.Tracer = qtp.Tracer(file)
	return q
}

// setCC sets the congestion control and the loss detection in quic-go. The
// settings are process-wide (quic-go's package state) and apply to
// connections accepted afterwards.
func (c Config) setCC() error {
	if err := quic.SetCongestionControl(c.CC); err != nil {
		return err
	}
	if err := quic.SetLossDetection(c.LossDetection); err != nil {
		return err
	}
	n, beta := DefaultCubicN, float32(DefaultCubicBeta)
	if c.CC == quic.CongestionControlCubic {
		n, beta = c.CubicN, float32(c.CubicBeta)
	}
	return quic.SetCubicParams(n, beta)
}

// ccFields are the congestion control settings in effect, read back from
// quic-go: cc, and cubic_n and cubic_beta (null unless cc is cubic), and
// loss_detection.
func ccFields() map[string]any {
	cc := quic.CongestionControl()
	f := map[string]any{"cc": cc, "cubic_n": nil, "cubic_beta": nil, "loss_detection": quic.LossDetection()}
	if cc == quic.CongestionControlCubic {
		n, beta := quic.CubicParams()
		// beta is a float32: 0.7, not 0.699999988079071.
		f["cubic_n"], f["cubic_beta"] = n, json.Number(strconv.FormatFloat(float64(beta), 'g', -1, 32))
	}
	return f
}

// Start listens and serves in the background; the start record is logged first.
// The congestion control settings are process-wide: a second Start in the same
// process changes them for the first server's later connections too.
func Start(cfg Config, log *Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.setCC(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: log, serving: make(chan error, 1)}
	var handler http.Handler
	var tlsBase *tls.Config
	var replayed map[string]any
	if cfg.Replay != "" {
		var err error
		handler, tlsBase, replayed, err = s.replaySetup()
		if err != nil {
			return nil, err
		}
	} else {
		cert, err := tls.LoadX509KeyPair(cfg.Cert, cfg.Key)
		if err != nil {
			return nil, fmt.Errorf("-cert/-key: %v", err)
		}
		handler, err = NewHandler(cfg.Docroot, s.logRequest)
		if err != nil {
			return nil, err
		}
		tlsBase = &tls.Config{Certificates: []tls.Certificate{cert}, CurvePreferences: cfg.Groups}
		if cfg.SinkInterval > 0 {
			handler = s.sinkHandler(handler)
		}
	}
	s.h3 = &http3.Server{Handler: handler, ConnContext: s.connContext}
	tlsBase.MinVersion = tls.VersionTLS13
	tlsConf := http3.ConfigureTLSConfig(tlsBase)
	udpAddr, err := net.ResolveUDPAddr("udp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("-addr %q: %v", cfg.Addr, err)
	}
	s.udp, err = net.ListenUDP("udp", udpAddr)
	if err != nil {
		return nil, fmt.Errorf("-addr %q: %v", cfg.Addr, err)
	}
	if cfg.QlogDir != "" {
		if err := os.MkdirAll(cfg.QlogDir, 0o755); err != nil {
			_ = s.udp.Close()
			return nil, fmt.Errorf("-qlog-dir: %v", err)
		}
	}
	s.tr = &quic.Transport{Conn: s.udp, ConnContext: func(ctx context.Context, _ *quic.ClientInfo) (context.Context, error) {
		ctx, _ = qtp.WithRecord(ctx)
		return ctx, nil
	}}
	s.ln, err = s.tr.ListenEarly(tlsConf, cfg.quicConfig(log))
	if err != nil {
		_ = s.udp.Close()
		return nil, err
	}
	// quic-go has wrapped the socket (ListenEarly): its 7 MiB attempt is done,
	// so the buffers asked for are the ones that stay
	bufs, err := udpbuf.Apply(s.udp.(*net.UDPConn), cfg.UDPRcvBuf, cfg.UDPSndBuf)
	if err != nil {
		_ = s.ln.Close()
		_ = s.tr.Close()
		_ = s.udp.Close()
		return nil, fmt.Errorf("UDP buffers: %v", err)
	}
	start := map[string]any{
		"addr": s.udp.LocalAddr().String(), "config": cfg,
		"quic_go_version": QuicGoVersion(), "quic_go_patch": quic.QuicbedPatch, "go_version": runtime.Version(),
		"pid": os.Getpid(),
	}
	if replayed != nil {
		start["replay"] = replayed
	} else {
		start["docroot"] = cfg.Docroot
	}
	for k, v := range ccFields() {
		start[k] = v
	}
	initStream, maxStream, initConn, maxConn := cfg.Windows()
	start["windows"] = map[string]any{"initial_stream": initStream, "max_stream": maxStream,
		"initial_conn": initConn, "max_conn": maxConn}
	start["flow_control_autotune"] = maxStream > initStream || maxConn > initConn
	// the socket's buffers as the kernel holds them (getsockopt: twice the request)
	start["udp_rcvbuf"], start["udp_sndbuf"] = bufs.Rcv, bufs.Snd
	start["quic_go_disable_gso"] = os.Getenv("QUIC_GO_DISABLE_GSO")
	if cfg.TCPAddr != "" {
		if s.tcp, err = s.listenTCP(handler, tlsBase); err != nil {
			_ = s.ln.Close()
			_ = s.tr.Close()
			_ = s.udp.Close()
			return nil, err
		}
		start["tcp"] = s.tcp.facts
	}
	log.Log("start", start)
	go func() { s.serving <- s.h3.ServeListener(s.ln) }()
	if s.tcp != nil {
		go s.tcp.serve()
	}
	if cfg.SinkInterval > 0 {
		s.sink.stop, s.sink.done = make(chan struct{}), make(chan struct{})
		go s.sample(cfg.SinkInterval)
	}
	return s, nil
}

// Addr is the bound UDP address.
func (s *Server) Addr() net.Addr { return s.udp.LocalAddr() }

func (s *Server) connContext(ctx context.Context, c *quic.Conn) context.Context {
	id := s.nextID.Add(1)
	accepted := time.Now()
	go func() {
		select {
		case <-c.HandshakeComplete():
		case <-c.Context().Done():
			s.log.Log("conn_failed", map[string]any{"conn_id": id, "remote": c.RemoteAddr().String(),
				"error": fmt.Sprint(context.Cause(c.Context()))})
			return
		}
		st := c.ConnectionState()
		rec := map[string]any{
			"conn_id": id, "remote": c.RemoteAddr().String(),
			"handshake_ms": float64(time.Since(accepted).Microseconds()) / 1000,
			"used_0rtt":    st.Used0RTT, "did_resume": st.TLS.DidResume,
			"quic_version": st.Version.String(), "alpn": st.TLS.NegotiatedProtocol,
			"tls_version": tls.VersionName(st.TLS.Version),
			// the AEAD the handshake negotiated (TLS 1.3 suite, as Go names it)
			"tls_cipher": tls.CipherSuiteName(st.TLS.CipherSuite),
			// the key-exchange group, its IANA number (29 x25519, 23 secp256r1,
			// 4588 x25519mlkem768; -groups)
			"tls_group": uint16(st.TLS.CurveID),
		}
		for k, v := range ccFields() {
			rec[k] = v
		}
		if s.cfg.Replay != "" {
			// which origin the connection serves: the name its certificate was
			// picked by, and the address the client sent to
			rec["sni"], rec["local"] = st.TLS.ServerName, c.LocalAddr().String()
		}
		// what each side advertised, from quic-go's qlog events (package qtp)
		if tp := qtp.FromContext(c.Context()); tp != nil {
			rec["tp_local"], rec["tp_remote"] = tp.Sets()
		}
		initStream, maxStream, initConn, maxConn := s.cfg.Windows()
		rec["flow_control_autotune"] = maxStream > initStream || maxConn > initConn
		s.log.Log("conn", rec)
		<-c.Context().Done()
		s.log.Log("conn_close", map[string]any{"conn_id": id,
			"duration_ms": float64(time.Since(accepted).Microseconds()) / 1000,
			"stats":       closeStats(c.ConnectionStats())})
	}()
	return context.WithValue(ctx, connIDKey{}, id)
}

// closeStats is a closed connection's counters, named as the quiche server logs them
// (sent, recv, lost and their bytes), so one reader serves both stacks. quic-go counts
// lost packets, not packets that carried retransmitted data: there is no "retrans".
// quicbed's patch keeps ECN-CE signals out of "lost" (upstream counts each as a lost
// packet) and adds them and the window reductions: "ecn_signals", "cutbacks".
func closeStats(st quic.ConnectionStats) map[string]any {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return map[string]any{
		"sent": st.PacketsSent, "recv": st.PacketsReceived, "lost": st.PacketsLost,
		"sent_bytes": st.BytesSent, "recv_bytes": st.BytesReceived, "lost_bytes": st.BytesLost,
		"cwnd": st.CongestionWindow, "rtt_ms": ms(st.SmoothedRTT), "min_rtt_ms": ms(st.MinRTT),
		"ecn_signals": st.ECNCongestionSignals, "cutbacks": st.CongestionCutbacks,
	}
}

func (s *Server) logRequest(r *http.Request, status int, n int64, took time.Duration) {
	id, _ := r.Context().Value(connIDKey{}).(int64)
	s.log.Log("request", map[string]any{
		"conn_id": id, "method": r.Method, "path": r.URL.Path, "status": status,
		"bytes": n, "duration_ms": float64(took.Microseconds()) / 1000, "proto": r.Proto,
	})
}

// Stop closes the server gracefully (bounded by timeout) and logs "stop".
func (s *Server) Stop(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_ = s.h3.Shutdown(ctx)
	if s.sink.stop != nil {
		close(s.sink.stop)
		<-s.sink.done
	}
	if s.tcp != nil {
		_ = s.tcp.srv.Shutdown(ctx)
	}
	_ = s.ln.Close()
	_ = s.tr.Close()
	_ = s.udp.Close()
	s.log.Log("stop", nil)
}
