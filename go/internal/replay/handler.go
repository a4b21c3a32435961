package replay

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"time"
)

// Logger receives one record per request: the fields Handler documents.
type Logger func(r *http.Request, fields map[string]any)

// Handler serves an archive by the matching rule. The request's origin is
// https://host[:port]: the host of its :authority (Host), in lower case, and the
// port the request arrived on (the listener's, from http.LocalAddrContextKey),
// shown only when not 443. A port in the :authority is not used, as Apache's
// name-based virtual hosts pick by the address and port a request came to.
//
// A matched request gets the entry's status, its recorded headers (the header
// rule has been applied in the archive), content-length from the body, no
// content-encoding and no sniffed content-type, and the body's bytes; with Wait,
// it is answered after the entry's wait_ms. An unmatched one gets 404 and an
// empty body.
//
// Each request is logged (Log, if set) with these fields: host (the :authority
// as received), origin, method, url (path and query as received), match ("url",
// "path" or "none"), entry (the matched entry's URL, null when none), status,
// bytes (body bytes written), sha256 (the first 16 hex digits of the served
// body's SHA-256, which Load checked; null when none), wait_ms (ms slept before
// the response), duration_ms, local (the address the request came to) and proto.
type Handler struct {
	Archive *Archive
	// Wait sleeps each entry's recorded wait_ms before its response (default
	// off: the server answers at once).
	Wait bool
	// Port is the listener's port for a request whose context has no local
	// address (tests); 0 means 443.
	Port int
	Log  Logger
}

// SHA256Prefix is how many hex digits of a body's SHA-256 the log gives.
const SHA256Prefix = 16

// Origin is the origin a request is served from (see Handler).
func (h *Handler) Origin(r *http.Request) string {
	host, _, _ := hostPort(r.Host)
	port := h.Port
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		switch a := la.(type) {
		case *net.UDPAddr:
			port = a.Port
		case *net.TCPAddr:
			port = a.Port
		}
	}
	if port == 0 {
		port = 443
	}
	return originString(host, port)
}

// MatchHeader is the response header that says how a request matched (url, path or
// none): quicbed.replay.verify.REPLAY_HEADER.
const MatchHeader = "X-Quicbed-Replay"

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	origin := h.Origin(r)
	raw := r.RequestURI
	if raw == "" {
		raw = r.URL.RequestURI()
	}
	path, query := target(raw)
	e, how := h.Archive.match(r.Method, origin, path, query)
	fields := map[string]any{
		"host": r.Host, "origin": origin, "method": r.Method, "url": raw,
		"match": string(how), "entry": nil, "sha256": nil, "proto": r.Proto,
	}
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		fields["local"] = la.String()
	}
	var status int
	var n int64
	var waited time.Duration
	// how the request matched, on every response (as every replay server marks it:
	// the browser's own HAR then says per request what the server did)
	w.Header().Set(MatchHeader, string(how))
	if e == nil {
		status = http.StatusNotFound
		w.Header()["Content-Type"] = nil // nothing sniffed
		w.Header().Set("Content-Length", "0")
		w.WriteHeader(status)
	} else {
		fields["entry"], fields["sha256"] = e.URL, e.Body[:SHA256Prefix]
		status = e.Status
		hdr := w.Header()
		for _, kv := range e.Headers {
			hdr.Add(kv[0], kv[1])
		}
		if _, ok := hdr["Content-Type"]; !ok {
			hdr["Content-Type"] = nil // served as recorded: without one
		}
		body := h.Archive.BodyOf(e)
		if bodyAllowed(status) {
			hdr.Set("Content-Length", strconv.Itoa(len(body)))
		}
		if h.Wait && e.WaitMs != nil && *e.WaitMs > 0 {
			waited = sleep(r.Context(), time.Duration(*e.WaitMs*float64(time.Millisecond)))
		}
		w.WriteHeader(status)
		if bodyAllowed(status) && r.Method != http.MethodHead {
			m, _ := w.Write(body)
			n = int64(m)
		}
	}
	if h.Log != nil {
		fields["status"], fields["bytes"] = status, n
		fields["wait_ms"] = ms(waited)
		fields["duration_ms"] = ms(time.Since(start))
		h.Log(r, fields)
	}
}

// sleep waits d or until ctx ends (the client went away); it returns how long.
func sleep(ctx context.Context, d time.Duration) time.Duration {
	start := time.Now()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return time.Since(start)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// bodyAllowed: RFC 9110 forbids content in 204 and 304 responses (Parse refuses
// 1xx entries and bodies on these).
func bodyAllowed(status int) bool {
	return status != http.StatusNoContent && status != http.StatusNotModified
}
