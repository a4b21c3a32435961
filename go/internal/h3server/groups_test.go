package h3server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"quicbed/internal/replay"
)

func TestParseGroups(t *testing.T) {
	good := map[string][]tls.CurveID{
		"":                                nil,
		"x25519":                          {tls.X25519},
		"X25519":                          {tls.X25519},
		"secp256r1":                       {tls.CurveP256},
		"x25519mlkem768":                  {tls.X25519MLKEM768},
		"X25519MLKEM768, x25519":          {tls.X25519MLKEM768, tls.X25519},
		"secp256r1,x25519,x25519mlkem768": {tls.CurveP256, tls.X25519, tls.X25519MLKEM768},
	}
	for s, want := range good {
		got, err := ParseGroups(s)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseGroups(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	bad := map[string]string{
		"x448":          `-groups "x448": unknown group "x448" (the groups: x25519, secp256r1, x25519mlkem768)`,
		"x25519,x448":   `unknown group "x448"`,
		"P256":          `unknown group "P256"`,
		"x25519,":       `-groups "x25519,": group 2 is empty (the groups: x25519, secp256r1, x25519mlkem768)`,
		",x25519":       `-groups ",x25519": group 1 is empty`,
		"x25519,,p":     `-groups "x25519,,p": group 2 is empty`,
		" ":             `-groups " ": group 1 is empty`,
		"x25519;x448":   `unknown group "x25519;x448"`,
		"x25519mlkem76": `unknown group "x25519mlkem76"`,
	}
	for s, want := range bad {
		if got, err := ParseGroups(s); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseGroups(%q) = %v, %v; want an error with %q", s, got, err, want)
		}
	}
	// a Config made in code is held to the same names
	cfg := Config{Docroot: t.TempDir(), Cert: "c", Key: "k", CC: "reno", LossDetection: "adaptive", Groups: []tls.CurveID{tls.X25519, tls.CurveP384}}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "-groups: group 24 (CurveP384) is not one of x25519, secp256r1, x25519mlkem768") {
		t.Errorf("Validate with CurveP384: %v", err)
	}
}

// offerBoth is the client of the group tests: it supports X25519MLKEM768 and
// X25519 and sends a key share for each (crypto/tls's client sends the hybrid's
// and its X25519 share), so the server picks between them without a retry.
var offerBoth = []tls.CurveID{tls.X25519MLKEM768, tls.X25519}

// -groups pins the key-exchange group: a server that allows only X25519 runs it
// with a client that offers X25519MLKEM768 first, one with Go's default runs
// X25519MLKEM768, and the order of -groups is not a preference (crypto/tls's
// own order picks). The client's ConnectionState and the server's conn record
// (tls_group, the IANA number) agree.
func TestGroupsPinTheKeyExchange(t *testing.T) {
	certPath, keyPath, pool := certFiles(t)
	dir := tree(t)
	cases := []struct {
		name   string
		groups []tls.CurveID
		want   tls.CurveID
	}{
		{"x25519", []tls.CurveID{tls.X25519}, tls.X25519},
		{"default", nil, tls.X25519MLKEM768},
		{"x25519,x25519mlkem768", []tls.CurveID{tls.X25519, tls.X25519MLKEM768}, tls.X25519MLKEM768},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			logBuf := &safeBuffer{mu: make(chanMutex, 1)}
			srv, err := Start(Config{Addr: "127.0.0.1:0", Docroot: dir, Cert: certPath, Key: keyPath, CC: "reno",
				LossDetection: DefaultLossDetection, Groups: c.groups}, NewLogger(logBuf))
			must(t, err)
			defer srv.Stop(time.Second)
			var conn *quic.Conn
			tr := &http3.Transport{
				TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost", CurvePreferences: offerBoth},
				Dial: func(ctx context.Context, addr string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
					var err error
					conn, err = quic.DialAddr(ctx, addr, tc, qc)
					return conn, err
				},
			}
			defer func() { _ = tr.Close() }()
			url := "https://localhost:" + strconv.Itoa(srv.Addr().(*net.UDPAddr).Port) + "/5kb/img-000.jpg"
			resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(url)
			must(t, err)
			_ = resp.Body.Close()
			if got := conn.ConnectionState().TLS.CurveID; got != c.want {
				t.Errorf("client negotiated %v, want %v", got, c.want)
			}
			rec := waitFor(t, logBuf, "conn", 1)[0]
			if rec["tls_group"] != float64(c.want) {
				t.Errorf("conn record's tls_group %v, want %d", rec["tls_group"], uint16(c.want))
			}
			start := waitFor(t, logBuf, "start", 1)[0]
			if got := fmt.Sprint(start["config"].(map[string]any)["groups"]); got != fmt.Sprint(jsonNumbers(c.groups)) {
				t.Errorf("start record's config.groups %s, want %v", got, jsonNumbers(c.groups))
			}
		})
	}
}

// jsonNumbers is ids as a JSON array decodes into an any: nil for none.
func jsonNumbers(ids []tls.CurveID) any {
	if ids == nil {
		return nil
	}
	out := []any{}
	for _, id := range ids {
		out = append(out, float64(id))
	}
	return out
}

// -replay builds its own TLS configuration (a certificate per SNI): -groups
// applies there too.
func TestGroupsPinTheKeyExchangeInReplay(t *testing.T) {
	port := freeUDPPort(t)
	www := fmt.Sprintf("https://www.a.test:%d", port)
	dir := writeReplay(t, []response{{www + "/", "text/html", []byte("<html></html>")}})
	certDir := t.TempDir()
	pool := x509.NewCertPool()
	data, _ := json.Marshal(map[string]replay.CertFiles{"www.a.test": hostCert(t, certDir, "www.a.test", pool)})
	certsFile := filepath.Join(certDir, "certs.json")
	must(t, os.WriteFile(certsFile, data, 0o644))
	logBuf := &safeBuffer{mu: make(chanMutex, 1)}
	srv, err := Start(Config{Addr: "127.0.0.1:" + strconv.Itoa(port), Replay: dir, ReplayCerts: certsFile,
		CC: "reno", LossDetection: DefaultLossDetection, Groups: []tls.CurveID{tls.X25519}}, NewLogger(logBuf))
	must(t, err)
	defer srv.Stop(time.Second)
	client, _ := h3Client(t, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}, &tls.Config{RootCAs: pool, CurvePreferences: offerBoth})
	resp, err := client.Get(www + "/")
	must(t, err)
	_ = resp.Body.Close()
	if resp.TLS == nil || resp.TLS.CurveID != tls.X25519 {
		t.Fatalf("client's connection state: %+v", resp.TLS)
	}
	if rec := waitFor(t, logBuf, "conn", 1)[0]; rec["tls_group"] != float64(tls.X25519) || rec["sni"] != "www.a.test" {
		t.Fatalf("conn record: %v", rec)
	}
}
