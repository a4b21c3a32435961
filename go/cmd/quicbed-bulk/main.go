// quicbed-bulk downloads one object (or the same object again and again for a given
// time) over HTTP/2 on TCP+TLS 1.3 or HTTP/3 on QUIC, discards the body and prints
// JSON lines: a sample of the bytes received so far every -interval, and a final
// record with the bytes, the completion time and the goodput. One program for both
// arms, so the client side of a bulk or compete experiment is the same code: Go's
// net/http with its bundled HTTP/2 (golang.org/x/net/http2, forced: -proto h2 fails
// rather than fall back to HTTP/1.1) and quic-go's http3 client.
//
//	quicbed-bulk -proto h2|h3 -url https://10.10.1.1/bulk/100MB.bin -ca ca.pem
//	             [-addr 10.10.1.1:443] [-duration 10s [-every 2s]] [-interval 100ms]
//	             [-start-at UNIX_NS] [-linger 1s] [-flow NAME]
//	             [-upload -size BYTES] [h2: -tcp-cc NAME] [h3: -cc reno|cubic]
//	             [h3 only: -initial-max-data B] [-initial-max-stream-data B]
//	             [-initial-max-streams-bidi N] [-initial-max-streams-uni N]
//	             [-max-idle-timeout D] [-flow-control-autotune=false]
//
// The h3 flags are the transport parameters the client advertises (RFC 9000's
// names; quic-go has one stream window for the three initial_max_stream_data
// limits), unset: the defaults below. The final record of an h3 flow carries
// both sides' parameters as quic-go's qlog recorded them (tp_local: what the
// client advertised; tp_remote: what the server did) and the windows it ran.
//
// Without -duration it downloads the object once; with it, it requests the object
// back to back on one connection until the duration is up, then cancels. With
// -every too, the k-th request starts at k x -every after the start (at once if
// the one before it ended later, counted as late): chunks of a size at a steady
// interval, as a video player fetches its segments. With -upload it sends
// instead: each request POSTs -size bytes to -url (a quicbed-h3server sink, which
// counts what arrives), its bytes counted as the transport reads them; -tcp-cc
// and -cc set the congestion control the client's sends run. Times in
// the records are seconds since the start (-start-at, when given: flows of a
// compete experiment start together or staggered on the client's clock).
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"quicbed/internal/qtp"
	"quicbed/internal/tcpcc"
	"quicbed/internal/udpbuf"
)

// Receive windows, the same for both arms: large enough for 100 Mbit/s at 336 ms
// (112 ms base RTT with a full 2 x BDP queue) so flow control never limits a flow.
// They are the maxima; a QUIC window starts at quic-go's 512 KiB (or the
// -initial-* flag) and grows to them as the body is read (auto-tuning).
const (
	streamWindow = 16 << 20
	connWindow   = 32 << 20
	// quic-go's initial windows (internal/protocol: DefaultInitialMaxStreamData,
	// and DefaultInitialMaxData, 1.5 times that)
	quicGoInitialStreamWindow = 512 << 10
	quicGoInitialConnWindow   = 768 << 10
)

// transportParams are the QUIC client's transport parameters (0: the default).
type transportParams struct {
	InitialMaxData       uint64
	InitialMaxStreamData uint64
	MaxStreamsBidi       int64 // -1: none (RFC 9000's 0)
	MaxStreamsUni        int64
	MaxIdleTimeout       time.Duration
	NoAutotune           bool
}

// windows returns the initial and maximum stream and connection windows.
func (tp transportParams) windows() (initStream, maxStream, initConn, maxConn uint64) {
	initStream, initConn = tp.InitialMaxStreamData, tp.InitialMaxData
	if initStream == 0 {
		initStream = quicGoInitialStreamWindow
	}
	if initConn == 0 {
		initConn = quicGoInitialConnWindow
	}
	maxStream, maxConn = max(initStream, streamWindow), max(initConn, connWindow)
	if tp.NoAutotune {
		maxStream, maxConn = initStream, initConn
	}
	return initStream, maxStream, initConn, maxConn
}

func (tp transportParams) quicConfig() *quic.Config {
	initStream, maxStream, initConn, maxConn := tp.windows()
	return &quic.Config{
		InitialStreamReceiveWindow:     initStream,
		MaxStreamReceiveWindow:         maxStream,
		InitialConnectionReceiveWindow: initConn,
		MaxConnectionReceiveWindow:     maxConn,
		MaxIncomingStreams:             tp.MaxStreamsBidi,
		MaxIncomingUniStreams:          tp.MaxStreamsUni,
		MaxIdleTimeout:                 tp.MaxIdleTimeout,
		Tracer:                         qtp.Tracer(nil),
	}
}

// config is one download.
type config struct {
	Proto    string
	URL      string
	CA       string
	Duration time.Duration
	Every    time.Duration // with Duration: one request per Every (0: back to back)
	Interval time.Duration
	StartAt  time.Time // zero: now
	Linger   time.Duration
	Flow     string
	Addr     string // dial this address instead of the URL's host (whose name TLS checks)
	TP       transportParams
	tpGiven  bool // an h3 flag was given (h2 refuses them)
	// SO_RCVBUF and SO_SNDBUF of the h3 client's UDP socket, bytes (0: quic-go's
	// 7 MiB attempt, on a socket of quic.DialAddr's own)
	UDPRcvBuf, UDPSndBuf int
	// Upload sends instead of fetching: each request is a POST of Size bytes to URL
	// (a quicbed-h3server sink), whose server counts what arrives
	Upload bool
	Size   int64
	// KeyLog: append the connection's TLS secrets here (NSS key log format), so a
	// capture of the flow decrypts (quicbed.traces.wire); "" writes none
	KeyLog string
	// the client's congestion control, which an upload's sends run: TCPCC on the h2
	// socket (TCP_CONGESTION), QuicCC quic-go's ("": the namespace's, quic-go's own)
	TCPCC, QuicCC string
}

// buffersGiven: the flow sets its UDP socket's buffers, so it dials on a socket
// of its own (see dialOwn).
func (c config) buffersGiven() bool { return c.UDPRcvBuf > 0 || c.UDPSndBuf > 0 }

// dialOwn dials addr from a UDP socket of the client's own whose buffers are set
// after quic-go has wrapped it (quic.Transport's init, which raises both to
// 7 MiB: here triggered by a ReadNonQUICPacket that returns at once), so the
// sizes asked for are the ones the connection runs with. The transport is not
// quic.DialAddr's single-use one: the client's connection IDs are quic-go's
// default 4 bytes, not 0. Returns the connection and what the kernel holds.
func dialOwn(ctx context.Context, c config, addr string, tc *tls.Config, qc *quic.Config) (*quic.Conn, udpbuf.Sizes, error) {
	raddr, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, udpbuf.Sizes{}, err
	}
	udp, err := net.ListenUDP("udp", nil)
	if err != nil {
		return nil, udpbuf.Sizes{}, err
	}
	tr := &quic.Transport{Conn: udp}
	done, cancel := context.WithCancel(ctx)
	cancel()
	_, _, _ = tr.ReadNonQUICPacket(done, nil) // only quic-go's init: ctx is done
	bufs, err := udpbuf.Apply(udp, c.UDPRcvBuf, c.UDPSndBuf)
	if err != nil {
		_ = tr.Close()
		_ = udp.Close()
		return nil, bufs, err
	}
	conn, err := tr.Dial(ctx, raddr, tc, qc)
	if err != nil {
		_ = tr.Close()
		_ = udp.Close()
	}
	return conn, bufs, err
}

// record is one JSON line of output.
type record map[string]any

type emitter struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (e *emitter) emit(r record) {
	e.mu.Lock()
	defer e.mu.Unlock()
	_ = e.enc.Encode(r)
}

func main() {
	var c config
	var startAt int64
	flag.StringVar(&c.Proto, "proto", "h2", "h2 (TCP+TLS 1.3) or h3 (QUIC)")
	flag.StringVar(&c.URL, "url", "", "the object's https URL")
	flag.StringVar(&c.CA, "ca", "", "PEM file of the CA that signed the server's certificate")
	flag.DurationVar(&c.Duration, "duration", 0, "download for this long (repeating the object); 0: the object once")
	flag.DurationVar(&c.Every, "every", 0, "with -duration: start a request every this long, not back to back (chunks at a steady interval)")
	flag.DurationVar(&c.Interval, "interval", 100*time.Millisecond, "time between samples")
	flag.Int64Var(&startAt, "start-at", 0, "start at this time (Unix nanoseconds on this machine's clock); 0: now")
	flag.DurationVar(&c.Linger, "linger", 0, "keep the connection open this long after the final record")
	flag.StringVar(&c.Flow, "flow", "", "a name for this flow, echoed in every record")
	flag.StringVar(&c.Addr, "addr", "", "connect to this host:port instead of the URL's (the URL's host is still the TLS server name)")
	flag.Uint64Var(&c.TP.InitialMaxData, "initial-max-data", 0, "h3: initial_max_data the client advertises, bytes (0: quic-go's 768 KiB)")
	flag.Uint64Var(&c.TP.InitialMaxStreamData, "initial-max-stream-data", 0, "h3: initial_max_stream_data_bidi_local, _bidi_remote and _uni, bytes (0: quic-go's 512 KiB)")
	flag.Int64Var(&c.TP.MaxStreamsBidi, "initial-max-streams-bidi", 0, "h3: initial_max_streams_bidi (0: quic-go's 100; -1: none)")
	flag.Int64Var(&c.TP.MaxStreamsUni, "initial-max-streams-uni", 0, "h3: initial_max_streams_uni (0: quic-go's 100; HTTP/3 needs 3)")
	flag.DurationVar(&c.TP.MaxIdleTimeout, "max-idle-timeout", 0, "h3: max_idle_timeout (0: quic-go's 30s)")
	flag.IntVar(&c.UDPRcvBuf, "udp-rcvbuf", 0, "h3: SO_RCVBUF of the client's UDP socket, bytes, set after quic-go's own 7 MiB attempt (0: quic-go's); the kernel doubles it, capped at net.core.rmem_max")
	flag.IntVar(&c.UDPSndBuf, "udp-sndbuf", 0, "h3: SO_SNDBUF of the client's UDP socket, bytes, likewise (0: quic-go's)")
	flag.BoolVar(&c.Upload, "upload", false, "send instead of fetch: POST bodies of -size bytes to -url (a quicbed-h3server -sink-interval server), as -duration and -every say")
	flag.Int64Var(&c.Size, "size", 0, "with -upload: bytes of each request body")
	flag.StringVar(&c.TCPCC, "tcp-cc", "", "h2: kernel congestion control of the client's socket (TCP_CONGESTION), which an upload's sends run; \"\" = the namespace's default")
	flag.StringVar(&c.KeyLog, "keylog", "", "append the TLS secrets of the connection to this file (NSS key log format), for a capture to decrypt")
	flag.StringVar(&c.QuicCC, "cc", "", "h3: quic-go's congestion control for the client's sends (reno, cubic); \"\" = quic-go's own")
	autotune := flag.Bool("flow-control-autotune", true, "h3: grow the receive windows as the body is read (quic-go's own); false: they stay at their initial values")
	flag.Parse()
	c.TP.NoAutotune = !*autotune
	flag.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "initial-max-data", "initial-max-stream-data", "initial-max-streams-bidi",
			"initial-max-streams-uni", "max-idle-timeout", "flow-control-autotune",
			"udp-rcvbuf", "udp-sndbuf":
			c.tpGiven = true
		}
	})
	if startAt > 0 {
		c.StartAt = time.Unix(0, startAt)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quicbed-bulk:", err)
		os.Exit(1)
	}
}

func (c config) check() error {
	switch {
	case c.Proto != "h2" && c.Proto != "h3":
		return fmt.Errorf("-proto must be h2 or h3 (got %q)", c.Proto)
	case c.URL == "":
		return errors.New("-url is required")
	case c.CA == "":
		return errors.New("-ca is required")
	case c.Interval <= 0:
		return errors.New("-interval must be > 0")
	case c.Duration < 0:
		return errors.New("-duration must be >= 0")
	case c.Every < 0:
		return fmt.Errorf("-every must be >= 0 (got %v)", c.Every)
	case c.Upload && c.Size <= 0:
		return fmt.Errorf("-upload needs -size > 0 (got %d): the bytes of each request body", c.Size)
	case !c.Upload && c.Size != 0:
		return fmt.Errorf("-size %d: applies only to -upload (a download's size is its object's)", c.Size)
	case c.TCPCC != "" && c.Proto != "h2":
		return fmt.Errorf("-tcp-cc %s: applies only to -proto h2", c.TCPCC)
	case c.QuicCC != "" && c.Proto != "h3":
		return fmt.Errorf("-cc %s: applies only to -proto h3 (-tcp-cc for h2)", c.QuicCC)
	case c.Every > 0 && c.Duration == 0:
		return fmt.Errorf("-every %v: applies only with -duration (one object has no interval)", c.Every)
	case c.tpGiven && c.Proto != "h3":
		return fmt.Errorf("-proto %s: the transport parameter flags are QUIC's (h3 only)", c.Proto)
	case c.TP.MaxStreamsBidi < -1:
		return fmt.Errorf("-initial-max-streams-bidi must be >= -1 (got %d)", c.TP.MaxStreamsBidi)
	case c.TP.MaxStreamsUni < 0 || (c.TP.MaxStreamsUni > 0 && c.TP.MaxStreamsUni < 3):
		return fmt.Errorf("-initial-max-streams-uni %d: HTTP/3 needs at least 3 (the server's control and QPACK streams)", c.TP.MaxStreamsUni)
	case c.UDPRcvBuf < 0 || c.UDPSndBuf < 0:
		return fmt.Errorf("-udp-rcvbuf and -udp-sndbuf must be >= 0 (got %d, %d)", c.UDPRcvBuf, c.UDPSndBuf)
	case c.TP.MaxIdleTimeout < 0:
		return fmt.Errorf("-max-idle-timeout must be >= 0 (got %v)", c.TP.MaxIdleTimeout)
	}
	return nil
}

func tlsConfig(caFile string) (*tls.Config, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate", caFile)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}, nil
}

// client is one arm's HTTP client and what it learned about its connection.
type client struct {
	http     *http.Client
	close    func()
	mu       sync.Mutex
	local    string
	remote   string
	quicConn *quic.Conn
	tp       *qtp.Record
	bufs     *udpbuf.Sizes // the UDP socket's buffers, when the flow set them
	// when the first connection was ready (Unix ns): h2 from the request's trace,
	// h3 from the dial (quic-go's http3 client calls no trace hook for it)
	connectedAt atomic.Int64
}

func (cl *client) setAddrs(local, remote net.Addr) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.local, cl.remote = local.String(), remote.String()
}

func newClient(c config, tlsCfg *tls.Config) *client {
	cl := &client{}
	if c.Proto == "h2" {
		tr := &http.Transport{
			TLSClientConfig:    tlsCfg,
			ForceAttemptHTTP2:  true,
			DisableCompression: true,
			HTTP2: &http.HTTP2Config{
				MaxReceiveBufferPerStream:     streamWindow,
				MaxReceiveBufferPerConnection: connWindow,
			},
		}
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetHTTP2(true) // HTTP/2 only: no silent fall-back to HTTP/1.1
		d := &net.Dialer{Control: tcpcc.Control(c.TCPCC)}
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if c.Addr != "" {
				addr = c.Addr
			}
			return d.DialContext(ctx, network, addr)
		}
		cl.http = &http.Client{Transport: tr}
		cl.close = tr.CloseIdleConnections
		return cl
	}
	tr := &http3.Transport{
		TLSClientConfig:    tlsCfg,
		DisableCompression: true,
		QUICConfig:         c.TP.quicConfig(),
		Dial: func(ctx context.Context, addr string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
			if c.Addr != "" {
				addr = c.Addr
			}
			ctx, rec := qtp.WithRecord(ctx) // both sides' transport parameters, from the qlog events
			var conn *quic.Conn
			var err error
			var bufs udpbuf.Sizes
			if c.buffersGiven() {
				conn, bufs, err = dialOwn(ctx, c, addr, tc, qc)
				if err == nil {
					cl.mu.Lock()
					cl.bufs = &bufs
					cl.mu.Unlock()
				}
			} else {
				conn, err = quic.DialAddr(ctx, addr, tc, qc)
			}
			if err == nil {
				cl.connectedAt.CompareAndSwap(0, time.Now().UnixNano())
				cl.setAddrs(conn.LocalAddr(), conn.RemoteAddr())
				cl.mu.Lock()
				cl.quicConn, cl.tp = conn, rec
				cl.mu.Unlock()
			}
			return conn, err
		},
	}
	cl.http = &http.Client{Transport: tr}
	cl.close = func() { _ = tr.Close() }
	return cl
}

// countingDiscard counts what it is given, atomically, so the sampler can read it.
type countingDiscard struct{ n *atomic.Int64 }

func (w countingDiscard) Write(p []byte) (int, error) {
	w.n.Add(int64(len(p)))
	return len(p), nil
}

func seconds(d time.Duration) float64 { return d.Seconds() }

// run does one download and writes its records to out.
func run(ctx context.Context, c config, out io.Writer) error {
	if err := c.check(); err != nil {
		return err
	}
	tlsCfg, err := tlsConfig(c.CA)
	if err != nil {
		return err
	}
	if c.KeyLog != "" {
		f, err := os.OpenFile(c.KeyLog, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return fmt.Errorf("-keylog: %v", err)
		}
		defer func() { _ = f.Close() }()
		tlsCfg.KeyLogWriter = f
	}
	if c.QuicCC != "" { // process-wide in quic-go (quicbed's patch): this client's connection
		if err := quic.SetCongestionControl(c.QuicCC); err != nil {
			return fmt.Errorf("-cc %s: %v", c.QuicCC, err)
		}
	}
	em := &emitter{enc: json.NewEncoder(out)}
	cl := newClient(c, tlsCfg)
	defer cl.close()

	start := time.Now()
	if !c.StartAt.IsZero() {
		if wait := time.Until(c.StartAt); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		start = time.Now()
	}
	lag := time.Duration(0) // how late this flow started against the time it was told
	if !c.StartAt.IsZero() {
		lag = start.Sub(c.StartAt)
	}
	first := record{"event": "start", "flow": c.Flow, "proto": c.Proto, "url": c.URL,
		"start_unix_ns": start.UnixNano(), "lag_s": seconds(lag)}
	if c.Proto == "h3" { // what this client's sends run (an upload's CC)
		first["quic_cc"] = quic.CongestionControl()
	}
	em.emit(first)

	var got atomic.Int64
	dlCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if c.Duration > 0 {
		var cancelT context.CancelFunc
		dlCtx, cancelT = context.WithDeadline(dlCtx, start.Add(c.Duration))
		defer cancelT()
	}

	// the sampler: bytes so far, every interval since the start
	samplerDone := make(chan struct{})
	stopSampler := make(chan struct{})
	go func() {
		defer close(samplerDone)
		for i := 1; ; i++ {
			next := start.Add(time.Duration(i) * c.Interval)
			select {
			case <-time.After(time.Until(next)):
				em.emit(record{"event": "sample", "flow": c.Flow, "t": seconds(time.Since(start)), "bytes": got.Load()})
			case <-stopSampler:
				return
			}
		}
	}()

	var firstByte atomic.Int64 // nanoseconds since the start, of the first request
	trace := &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			cl.connectedAt.CompareAndSwap(0, time.Now().UnixNano())
			if info.Conn != nil {
				cl.setAddrs(info.Conn.LocalAddr(), info.Conn.RemoteAddr())
			}
		},
		GotFirstResponseByte: func() {
			firstByte.CompareAndSwap(0, int64(time.Since(start)))
		},
	}
	requests, status, proto, late := 0, 0, "", 0
	var dlErr error
	var last time.Time
	for {
		if c.Every > 0 && requests > 0 {
			due := start.Add(time.Duration(requests) * c.Every)
			if !due.Before(start.Add(c.Duration)) {
				break // the next chunk is due when the flow ends: not started
			}
			if wait := time.Until(due); wait > 0 {
				select {
				case <-time.After(wait):
				case <-dlCtx.Done():
				}
				if dlCtx.Err() != nil {
					break
				}
			} else {
				late++ // the request before it ran past this one's start
			}
		}
		req, err := c.request(httptrace.WithClientTrace(dlCtx, trace), &got)
		if err != nil {
			dlErr = err
			break
		}
		resp, err := cl.http.Do(req)
		if err != nil {
			dlErr = err
			break
		}
		requests++
		status, proto = resp.StatusCode, resp.Proto
		if resp.StatusCode != http.StatusOK {
			_ = resp.Body.Close()
			dlErr = fmt.Errorf("status %d", resp.StatusCode)
			break
		}
		if c.Upload { // the body went out as it was read (got); the answer is short
			_, err = io.Copy(io.Discard, resp.Body)
		} else {
			_, err = io.Copy(countingDiscard{&got}, resp.Body)
		}
		_ = resp.Body.Close()
		last = time.Now()
		if err != nil {
			dlErr = err
			break
		}
		if c.Duration == 0 {
			break
		}
	}
	end := time.Now()
	close(stopSampler)
	<-samplerDone

	timedOut := c.Duration > 0 && errors.Is(dlCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
	if timedOut {
		dlErr = nil // the duration is up: the planned end, not a failure
		end = start.Add(c.Duration)
	} else if !last.IsZero() && dlErr == nil {
		end = last
	}
	elapsed := end.Sub(start)
	n := got.Load()
	final := record{
		"event": "done", "flow": c.Flow, "proto": c.Proto, "http_proto": proto, "status": status,
		"requests": requests, "bytes": n, "completion_s": seconds(elapsed),
		"connect_s": connectS(cl.connectedAt.Load(), start), "ttfb_s": seconds(time.Duration(firstByte.Load())),
		"goodput_bps": 0.0, "mode": mode(c), "direction": map[bool]string{true: "up", false: "down"}[c.Upload],
		"ok": dlErr == nil && n > 0, "error": nil,
	}
	if c.Every > 0 {
		final["every_s"], final["late_requests"] = seconds(c.Every), late
	}
	if elapsed > 0 {
		final["goodput_bps"] = float64(n) * 8 / elapsed.Seconds()
	}
	if dlErr != nil {
		final["error"] = dlErr.Error()
	}
	cl.mu.Lock()
	final["local_addr"], final["remote_addr"] = cl.local, cl.remote
	if cl.quicConn != nil {
		st := cl.quicConn.ConnectionStats()
		final["quic_client"] = map[string]any{
			"min_rtt_ms": float64(st.MinRTT.Microseconds()) / 1000, "smoothed_rtt_ms": float64(st.SmoothedRTT.Microseconds()) / 1000,
			"packets_received": st.PacketsReceived, "bytes_received": st.BytesReceived,
			"packets_sent": st.PacketsSent, "packets_lost": st.PacketsLost,
		}
		initStream, maxStream, initConn, maxConn := c.TP.windows()
		final["windows"] = map[string]any{"initial_stream": initStream, "max_stream": maxStream,
			"initial_conn": initConn, "max_conn": maxConn}
		final["flow_control_autotune"] = maxStream > initStream || maxConn > initConn
	}
	if cl.tp != nil {
		final["tp_local"], final["tp_remote"] = cl.tp.Sets()
	}
	if cl.bufs != nil { // as the kernel held them after they were set (twice the request)
		final["udp_rcvbuf"], final["udp_sndbuf"] = cl.bufs.Rcv, cl.bufs.Snd
	}
	if cl.quicConn != nil {
		final["tls_cipher"] = tls.CipherSuiteName(cl.quicConn.ConnectionState().TLS.CipherSuite)
	}
	cl.mu.Unlock()
	em.emit(final)
	if c.Linger > 0 {
		select {
		case <-time.After(c.Linger):
		case <-ctx.Done():
		}
	}
	if dlErr != nil {
		return dlErr
	}
	return nil
}

// request is the next request: a GET of the object, or with -upload a POST of
// -size bytes whose body counts into got as the transport reads it.
func (c config) request(ctx context.Context, got *atomic.Int64) (*http.Request, error) {
	if !c.Upload {
		return http.NewRequestWithContext(ctx, http.MethodGet, c.URL, nil)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, &zeros{left: c.Size, n: got})
	if err != nil {
		return nil, err
	}
	req.ContentLength = c.Size
	req.Header.Set("Content-Type", "application/octet-stream")
	return req, nil
}

// zeros is an upload's body: left zero bytes, counted into n as they are read. TLS
// encrypts them, so the wire carries no compressible run.
type zeros struct {
	left int64
	n    *atomic.Int64
}

func (z *zeros) Read(p []byte) (int, error) {
	if z.left <= 0 {
		return 0, io.EOF
	}
	k := int64(len(p))
	if k > z.left {
		k = z.left
	}
	clear(p[:k])
	z.left -= k
	z.n.Add(k)
	return int(k), nil
}

// mode names what the flow did: one object, objects back to back for a time, or
// one object per -every for a time.
func mode(c config) string {
	switch {
	case c.Every > 0:
		return "chunks"
	case c.Duration > 0:
		return "duration"
	}
	return "object"
}

// connectS is the time from the start to the first connection, in seconds (0: none).
func connectS(at int64, start time.Time) float64 {
	if at == 0 {
		return 0
	}
	return seconds(time.Unix(0, at).Sub(start))
}
