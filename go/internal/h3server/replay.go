package h3server

import (
	"crypto/tls"
	"net/http"

	"quicbed/internal/replay"
)

// replaySetup loads the archive (-replay) and its certificates (-replay-certs):
// the handler, the TLS configuration that picks a certificate by SNI, and what
// the start record says of them.
func (s *Server) replaySetup() (http.Handler, *tls.Config, map[string]any, error) {
	a, err := replay.Load(s.cfg.Replay)
	if err != nil {
		return nil, nil, nil, err
	}
	certs, err := replay.LoadCerts(s.cfg.ReplayCerts, a)
	if err != nil {
		return nil, nil, nil, err
	}
	h := &replay.Handler{Archive: a, Wait: s.cfg.ReplayWait, Log: s.logReplay}
	tlsConf := &tls.Config{
		// -groups: the key-exchange groups, as with -docroot
		CurvePreferences: s.cfg.Groups,
		// An unknown or absent server name: no certificate, so crypto/tls ends
		// the handshake with unrecognized_name; the refusal is logged here, as
		// the connection is never accepted (no conn or conn_failed record).
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if c := certs.For(hello.ServerName); c != nil {
				return c, nil
			}
			rec := map[string]any{"sni": hello.ServerName, "reason": "no origin of the archive has this host name"}
			if hello.Conn != nil {
				rec["remote"], rec["local"] = hello.Conn.RemoteAddr().String(), hello.Conn.LocalAddr().String()
			}
			s.log.Log("tls_refused", rec)
			return nil, nil
		},
	}
	var origins []map[string]any
	var total int64
	for _, o := range a.Origins {
		var bytes int64
		for _, e := range o.Entries {
			bytes += e.Size
		}
		total += bytes
		origins = append(origins, map[string]any{"origin": o.Origin, "entries": len(o.Entries),
			"bytes": bytes, "cert": certs.Files[o.Host].Cert})
	}
	rec := map[string]any{
		"dir": s.cfg.Replay, "name": a.Name, "main": a.Main, "manifest_sha256": a.ManifestSHA256,
		"entries": len(a.Entries()), "bytes": total, "origins": origins, "wait": s.cfg.ReplayWait,
	}
	return h, tlsConf, rec, nil
}

// logReplay writes a request's "replay" record (fields: replay.Handler) with
// its connection's id.
func (s *Server) logReplay(r *http.Request, fields map[string]any) {
	fields["conn_id"], _ = r.Context().Value(connIDKey{}).(int64)
	s.log.Log("replay", fields)
}
