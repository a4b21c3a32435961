package h3server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"time"

	"quicbed/internal/tcpcc"
)

// The TCP side: the same tree over HTTP/2 on TCP+TLS 1.3, for a page cell's
// background flows (quicbed.run.background). A background TCP flow must run the
// congestion control it names whatever the page arms' TCP runs (the server
// namespace's default, which Apache's connections take), so the listener sets
// TCP_CONGESTION on its own socket: Linux gives every connection it accepts the
// listener's choice (tcp_ca_openreq_child keeps a congestion control set by
// setsockopt), and `ss -ti` shows it per connection.

var kernelCCName = regexp.MustCompile(`^[a-z0-9_]{0,15}$`)

// validKernelCC: empty (the default) or a name the kernel could have (at most
// 15 characters, TCP_CA_NAME_MAX - 1); whether it has it is the kernel's to say.
func validKernelCC(name string) bool { return kernelCCName.MatchString(name) }

// tcpSide is the HTTP/2 listener and what it runs.
type tcpSide struct {
	srv   *http.Server
	ln    net.Listener
	facts map[string]any // logged in the start record under "tcp"
}

// listenTCP opens TCPAddr with TCPCC set on the socket and reads back what the
// kernel holds, so the start record says what the connections will run.
func (s *Server) listenTCP(handler http.Handler, base *tls.Config) (*tcpSide, error) {
	lc := net.ListenConfig{Control: tcpcc.Control(s.cfg.TCPCC)}
	ln, err := lc.Listen(context.Background(), "tcp", s.cfg.TCPAddr)
	if err != nil {
		var refused *tcpcc.Refused
		if errors.As(err, &refused) {
			return nil, refused
		}
		return nil, fmt.Errorf("-tcp-addr %q: %v", s.cfg.TCPAddr, err)
	}
	held, err := tcpcc.Of(ln.(*net.TCPListener))
	if err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("-tcp-addr: reading TCP_CONGESTION back: %v", err)
	}
	conf := base.Clone()
	conf.NextProtos = []string{"h2"}
	srv := &http.Server{
		Handler:   http2Only(handler),
		TLSConfig: conf,
		ConnContext: func(ctx context.Context, _ net.Conn) context.Context {
			return context.WithValue(ctx, connIDKey{}, s.nextID.Add(1))
		},
		ReadHeaderTimeout: 10 * time.Second,
	}
	facts := map[string]any{"addr": ln.Addr().String(), "cc": held, "alpn": conf.NextProtos}
	return &tcpSide{srv: srv, ln: ln, facts: facts}, nil
}

// http2Only answers a request of any other version 505: crypto/tls lets a client
// that offers only http/1.1 in, as if it offered no ALPN (Go's issue 46310), and a
// background flow that fell back to HTTP/1.1 would not be the flow asked for.
func http2Only(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			http.Error(w, "HTTP/2 only", http.StatusHTTPVersionNotSupported)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// serve runs until Stop shuts the server down.
func (t *tcpSide) serve() {
	// the certificate is in TLSConfig; Go's server adds HTTP/2 to a TLS listener
	_ = t.srv.ServeTLS(t.ln, "", "")
}
