// Command quicbed-h3server serves a document tree, or a replay archive of a
// multi-origin page, over HTTP/3 (IETF QUIC v1, TLS 1.3, ALPN h3, 0-RTT
// accepted) with quic-go, logging one JSON line per connection and per request.
// See README.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"

	"quicbed/internal/h3server"
)

func main() {
	var cfg h3server.Config
	flag.StringVar(&cfg.Addr, "addr", ":443", "UDP address to listen on")
	flag.StringVar(&cfg.Docroot, "docroot", "", "document tree to serve (this or -replay is required)")
	flag.StringVar(&cfg.Cert, "cert", "", "certificate chain, PEM (required with -docroot)")
	flag.StringVar(&cfg.Key, "key", "", "private key, PEM (required with -docroot)")
	flag.StringVar(&cfg.Replay, "replay", "", "replay archive folder to serve instead of -docroot (docs/replay.md): every origin on -addr, picked by :authority")
	flag.StringVar(&cfg.ReplayCerts, "replay-certs", "", `JSON object: each origin host -> {"cert": PEM file, "key": PEM file}, picked by SNI (required with -replay)`)
	flag.BoolVar(&cfg.ReplayWait, "replay-wait", false, "sleep each entry's recorded wait_ms before its response (only with -replay)")
	logPath := flag.String("log", "", "JSON-lines log file to append to (default stderr)")
	flag.StringVar(&cfg.QlogDir, "qlog-dir", "", "write qlog files here (default: none)")
	flag.Uint64Var(&cfg.InitialStreamWindow, "initial-stream-window", 0, "initial stream receive window, bytes (0 = quic-go default 512 KiB)")
	flag.Uint64Var(&cfg.MaxStreamWindow, "max-stream-window", 0, "max stream receive window, bytes (0 = quic-go default 6 MB)")
	flag.Uint64Var(&cfg.InitialConnWindow, "initial-conn-window", 0, "initial connection receive window, bytes (0 = quic-go default 768 KiB)")
	flag.Uint64Var(&cfg.MaxConnWindow, "max-conn-window", 0, "max connection receive window, bytes (0 = quic-go default 15 MB)")
	flag.Int64Var(&cfg.MaxIncomingStreams, "max-incoming-streams", 0, "concurrent bidirectional streams a client may open (0 = quic-go default 100)")
	flag.Int64Var(&cfg.MaxIncomingUniStreams, "max-incoming-uni-streams", 0, "concurrent unidirectional streams (0 = quic-go default 100)")
	flag.DurationVar(&cfg.IdleTimeout, "idle-timeout", 0, "idle timeout (0 = quic-go default 30s)")
	autotune := flag.Bool("flow-control-autotune", true, "grow the receive windows up to their maximum as data is read (quic-go's own); false: the windows stay at their initial values")
	flag.StringVar(&cfg.CC, "cc", h3server.DefaultCC, "congestion control: reno (quic-go's own) or cubic (quic-go's CUBIC, switched on by quicbed's patch)")
	flag.StringVar(&cfg.LossDetection, "loss-detection", h3server.DefaultLossDetection, "loss detection: adaptive (quic-go's own: a spurious loss switches the packet threshold off and raises the time threshold) or rfc9002 (3 packets and 9/8 RTT, never adapted; quicbed's patch)")
	cubicN := flag.Int("cubic-n", h3server.DefaultCubicN, "CUBIC's emulated connections N, >= 1 (Chromium: 2); only with -cc cubic")
	cubicBeta := flag.Float64("cubic-beta", h3server.DefaultCubicBeta, "CUBIC's backoff of one connection, 0 < beta < 1; a loss cuts the window to (N-1+beta)/N; only with -cc cubic")
	flag.IntVar(&cfg.UDPRcvBuf, "udp-rcvbuf", 0, "SO_RCVBUF of the UDP socket, bytes, set after quic-go's own 7 MiB attempt (0 = quic-go's); the kernel doubles it and caps it at net.core.rmem_max")
	flag.IntVar(&cfg.UDPSndBuf, "udp-sndbuf", 0, "SO_SNDBUF of the UDP socket, bytes, likewise (0 = quic-go's); capped at net.core.wmem_max")
	groups := flag.String("groups", "", "TLS 1.3 key-exchange groups the server accepts, comma-separated, of "+h3server.GroupNames()+
		` (case-insensitive); "" = Go's default (X25519MLKEM768 first). A set, not an order: crypto/tls picks by its own order, so name one group to pin it`)
	flag.StringVar(&cfg.TCPAddr, "tcp-addr", "", "also serve -docroot over HTTP/2 on TCP+TLS 1.3 at this address (a background flow's server); \"\" = none")
	flag.StringVar(&cfg.TCPCC, "tcp-cc", "", "kernel congestion control of the -tcp-addr listener's connections (TCP_CONGESTION, e.g. cubic, bbr); \"\" = the namespace's default")
	flag.DurationVar(&cfg.SinkInterval, "sink-interval", 0, "answer POST /sink on both sides, discarding and counting the body, and log the count this often (a background upload's receiver); 0 = no sink")
	// A bad flag is one line on stderr and exit 2; -help prints the flags.
	flag.CommandLine.Init(os.Args[0], flag.ContinueOnError)
	flag.CommandLine.SetOutput(io.Discard)
	if err := flag.CommandLine.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			flag.CommandLine.SetOutput(os.Stderr)
			flag.PrintDefaults()
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "quicbed-h3server: %v\n", err)
		os.Exit(2)
	}
	// The CUBIC settings go into the configuration with -cc cubic, or when given
	// explicitly (then Validate refuses them with -cc reno).
	flag.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "cubic-n":
			cfg.CubicN = *cubicN
		case "cubic-beta":
			cfg.CubicBeta = *cubicBeta
		}
	})
	if cfg.CC == quic.CongestionControlCubic {
		cfg.CubicN, cfg.CubicBeta = *cubicN, *cubicBeta
	}
	cfg.NoAutotune = !*autotune
	var err error
	if cfg.Groups, err = h3server.ParseGroups(*groups); err != nil {
		fmt.Fprintf(os.Stderr, "quicbed-h3server: %v\n", err)
		os.Exit(2)
	}

	out := os.Stderr
	if *logPath != "" {
		f, err := os.OpenFile(*logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			fmt.Fprintf(os.Stderr, "quicbed-h3server: -log %s: %v\n", *logPath, err)
			os.Exit(2)
		}
		defer func() {
			if err := f.Close(); err != nil {
				fmt.Fprintf(os.Stderr, "quicbed-h3server: -log %s: %v\n", *logPath, err)
			}
		}()
		out = f
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "quicbed-h3server: %v\n", err)
		os.Exit(2)
	}
	srv, err := h3server.Start(cfg, h3server.NewLogger(out))
	if err != nil {
		fmt.Fprintf(os.Stderr, "quicbed-h3server: %v\n", err)
		os.Exit(1)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	<-sigs
	srv.Stop(5 * time.Second)
}
