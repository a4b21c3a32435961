// Command quicbed-gquic-server serves a document tree over HTTP/2-over-gQUIC
// (Google QUIC Q039, Q043, Q044; QUIC crypto) with quic-go v0.10.2, for Chromium's
// gQUIC, logging one JSON line per connection and per request in the schema of
// quicbed's HTTP/3 servers. See go/gquic/README.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"quicbed/gquic/internal/gquicserver"
)

func main() {
	var cfg gquicserver.Config
	flag.StringVar(&cfg.Addr, "addr", ":443", "UDP address to listen on")
	flag.StringVar(&cfg.Docroot, "docroot", "", "document tree to serve (required)")
	flag.StringVar(&cfg.Cert, "cert", "", "certificate chain, PEM: the leaf, then its CA chain (required)")
	flag.StringVar(&cfg.Key, "key", "", "private key, PEM (required)")
	flag.StringVar(&cfg.Versions, "versions", gquicserver.DefaultVersions, "gQUIC versions offered, a comma list of Q039, Q043, Q044")
	logPath := flag.String("log", "", "JSON-lines log file to append to (default stderr)")
	// A bad flag is one line on stderr and exit 2; -help prints the flags.
	flag.CommandLine.Init(os.Args[0], flag.ContinueOnError)
	flag.CommandLine.SetOutput(io.Discard)
	if err := flag.CommandLine.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			flag.CommandLine.SetOutput(os.Stderr)
			flag.PrintDefaults()
			os.Exit(0)
		}
		fail(2, err)
	}
	if flag.NArg() > 0 {
		fail(2, fmt.Errorf("unexpected argument %q", flag.Arg(0)))
	}
	if err := cfg.Validate(); err != nil {
		fail(2, err)
	}
	out := os.Stderr
	if *logPath != "" {
		f, err := os.OpenFile(*logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			fail(2, fmt.Errorf("-log %s: %v", *logPath, err))
		}
		defer func() {
			if err := f.Close(); err != nil {
				fmt.Fprintf(os.Stderr, "quicbed-gquic-server: -log %s: %v\n", *logPath, err)
			}
		}()
		out = f
	}
	srv, err := gquicserver.Start(cfg, gquicserver.NewLogger(out))
	if err != nil {
		fail(1, err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sigs:
		srv.Stop()
	case err := <-srv.Serving():
		srv.Stop()
		fail(1, err)
	}
}

func fail(code int, err error) {
	fmt.Fprintf(os.Stderr, "quicbed-gquic-server: %v\n", err)
	os.Exit(code)
}
