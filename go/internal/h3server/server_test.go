package h3server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

func tree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, "5kb"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "5kb", "index.html"), []byte("<html><img src=img-000.jpg></html>"), 0o644))
	body := bytes.Repeat([]byte{0xff, 0xd8, 0x17}, 2000)
	must(t, os.WriteFile(filepath.Join(dir, "5kb", "img-000.jpg"), body, 0o644))
	must(t, os.WriteFile(filepath.Join(t.TempDir(), "secret"), []byte("x"), 0o644))
	return dir
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestHandlerHeadersAndBody(t *testing.T) {
	dir := tree(t)
	h, err := NewHandler(dir, nil)
	must(t, err)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/5kb/img-000.jpg", nil))
	want, _ := os.ReadFile(filepath.Join(dir, "5kb", "img-000.jpg"))
	if rec.Code != 200 || !bytes.Equal(rec.Body.Bytes(), want) {
		t.Fatalf("status %d, %d bytes", rec.Code, rec.Body.Len())
	}
	got := map[string]string{}
	for k := range rec.Header() {
		got[strings.ToLower(k)] = rec.Header().Get(k)
	}
	wantHdr := map[string]string{"cache-control": "no-store, no-cache", "content-type": "image/jpeg", "content-length": "6000"}
	for k, v := range wantHdr {
		if got[k] != v {
			t.Errorf("%s: got %q want %q", k, got[k], v)
		}
	}
	for _, k := range []string{"etag", "last-modified", "accept-ranges", "alt-svc", "content-encoding"} {
		if _, ok := got[k]; ok {
			t.Errorf("unexpected header %s", k)
		}
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/5kb/", nil))
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "text/html" {
		t.Fatalf("index: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
}

func TestHandlerRefusals(t *testing.T) {
	dir := tree(t)
	must(t, os.Symlink("/etc/passwd", filepath.Join(dir, "escape")))
	h, _ := NewHandler(dir, nil)
	cases := map[string]int{
		"GET /nothing":                404,
		"GET /../../etc/passwd":       404,
		"GET /escape":                 404,
		"POST /5kb/img-000.jpg":       405,
		"HEAD /5kb/img-000.jpg":       200,
		"GET /5kb/%2e%2e/%2e%2e/etc/": 404,
	}
	for req, want := range cases {
		m, p, _ := strings.Cut(req, " ")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(m, p, nil))
		if rec.Code != want {
			t.Errorf("%s: got %d want %d", req, rec.Code, want)
		}
		if m == "HEAD" && rec.Body.Len() != 0 {
			t.Errorf("HEAD returned a body")
		}
	}
}

func certFiles(t *testing.T) (certPath, keyPath string, pool *x509.CertPool) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	must(t, err)
	dir := t.TempDir()
	certPath, keyPath = filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	must(t, os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644))
	kb, _ := x509.MarshalECPrivateKey(key)
	must(t, os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600))
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return
}

func readLog(t *testing.T, buf *safeBuffer, event string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(buf.String()))
	for sc.Scan() {
		var m map[string]any
		must(t, json.Unmarshal(sc.Bytes(), &m))
		if m["event"] == event {
			out = append(out, m)
		}
	}
	return out
}

type safeBuffer struct {
	mu  chanMutex
	buf bytes.Buffer
}

type chanMutex chan struct{}

func (b *safeBuffer) Write(p []byte) (int, error) {
	b.mu <- struct{}{}
	defer func() { <-b.mu }()
	return b.buf.Write(p)
}

func (b *safeBuffer) String() string {
	b.mu <- struct{}{}
	defer func() { <-b.mu }()
	return b.buf.String()
}

func waitFor(t *testing.T, buf *safeBuffer, event string, n int) []map[string]any {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if ev := readLog(t, buf, event); len(ev) >= n {
			return ev
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("fewer than %d %q events in log:\n%s", n, event, buf.String())
	return nil
}

func TestEndToEndWithZeroRTT(t *testing.T) {
	certPath, keyPath, pool := certFiles(t)
	dir := tree(t)
	logBuf := &safeBuffer{mu: make(chanMutex, 1)}
	srv, err := Start(Config{Addr: "127.0.0.1:0", Docroot: dir, Cert: certPath, Key: keyPath, CC: "cubic", CubicN: 1, CubicBeta: 0.7, LossDetection: DefaultLossDetection}, NewLogger(logBuf))
	must(t, err)
	defer srv.Stop(time.Second)
	url := "https://localhost:" + strings.Split(srv.Addr().String(), ":")[1] + "/5kb/img-000.jpg"
	cache := tls.NewLRUClientSessionCache(10)
	tlsConf := &tls.Config{RootCAs: pool, ClientSessionCache: cache, ServerName: "localhost"}

	tr := &http3.Transport{TLSClientConfig: tlsConf}
	resp, err := (&http.Client{Transport: tr}).Get(url)
	must(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || len(body) != 6000 || resp.Header.Get("Cache-Control") != CacheControl {
		t.Fatalf("first GET: %d, %d bytes, %v", resp.StatusCode, len(body), resp.Header)
	}
	if resp.Header.Get("Alt-Svc") != "" || resp.Header.Get("Etag") != "" {
		t.Fatalf("forbidden header in %v", resp.Header)
	}
	conns := waitFor(t, logBuf, "conn", 1)
	if conns[0]["used_0rtt"] != false || conns[0]["did_resume"] != false || conns[0]["alpn"] != "h3" || conns[0]["tls_version"] != "TLS 1.3" {
		t.Fatalf("first connection: %v", conns[0])
	}
	time.Sleep(100 * time.Millisecond) // the session ticket arrives after the handshake
	_ = tr.Close()
	// the closed connection's counters, named as the quiche server names them
	closes := waitFor(t, logBuf, "conn_close", 1)
	st, ok := closes[0]["stats"].(map[string]any)
	if !ok || closes[0]["conn_id"] != conns[0]["conn_id"] {
		t.Fatalf("conn_close record: %v", closes[0])
	}
	if sent, _ := st["sent_bytes"].(float64); sent < 6000 || st["sent"].(float64) < 5 {
		t.Fatalf("conn_close stats: %v", st)
	}
	if lost, ok := st["lost"].(float64); !ok || lost != 0 { // loopback: nothing lost
		t.Fatalf("conn_close stats: %v", st)
	}

	// second connection: 0-RTT with the ticket from the first
	tr2 := &http3.Transport{TLSClientConfig: tlsConf, Dial: func(ctx context.Context, addr string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
		return quic.DialAddrEarly(ctx, addr, tc, qc)
	}}
	defer func() { _ = tr2.Close() }()
	req, _ := http.NewRequest(http3.MethodGet0RTT, url, nil)
	resp, err = (&http.Client{Transport: tr2}).Do(req)
	must(t, err)
	body, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if len(body) != 6000 {
		t.Fatalf("0-RTT GET: %d bytes", len(body))
	}
	conns = waitFor(t, logBuf, "conn", 2)
	if conns[1]["used_0rtt"] != true || conns[1]["did_resume"] != true {
		t.Fatalf("second connection did not use 0-RTT: %v", conns[1])
	}
	reqs := waitFor(t, logBuf, "request", 2)
	if reqs[1]["conn_id"] != conns[1]["conn_id"] || reqs[1]["bytes"] != float64(6000) {
		t.Fatalf("request record: %v", reqs[1])
	}
	if st := readLog(t, logBuf, "start"); len(st) != 1 || st[0]["quic_go_version"] == "" {
		t.Fatalf("start record: %v", st)
	}
}

func TestConfigErrorsNameTheFlag(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]Config{
		"-docroot is required":                                       {Cert: "c", Key: "k", CC: "reno"},
		"-cert and -key are required":                                {Docroot: dir, CC: "reno"},
		`congestion control "bbr" is not supported by quic-go`:       {Docroot: dir, Cert: "c", Key: "k", CC: "bbr"},
		`congestion control "" is not supported`:                     {Docroot: dir, Cert: "c", Key: "k"},
		"-max-incoming-streams must be >= 0":                         {Docroot: dir, Cert: "c", Key: "k", CC: "reno", LossDetection: "adaptive", MaxIncomingStreams: -1},
		`-docroot "/nonexistent" is not`:                             {Docroot: "/nonexistent", Cert: "c", Key: "k", CC: "reno", LossDetection: "rfc9002"},
		"-cubic-n must be >= 1 (got 0)":                              {Docroot: dir, Cert: "c", Key: "k", CC: "cubic", CubicBeta: 0.7},
		"-cubic-beta must be > 0 and < 1 (got 1)":                    {Docroot: dir, Cert: "c", Key: "k", CC: "cubic", CubicN: 2, CubicBeta: 1},
		"-cubic-beta must be > 0 and < 1 (got 0)":                    {Docroot: dir, Cert: "c", Key: "k", CC: "cubic", CubicN: 2},
		"-cubic-beta must be > 0 and < 1 (got 1e-50)":                {Docroot: dir, Cert: "c", Key: "k", CC: "cubic", CubicN: 2, CubicBeta: 1e-50},
		"-cubic-n 2: applies only to -cc cubic":                      {Docroot: dir, Cert: "c", Key: "k", CC: "reno", CubicN: 2},
		"-cubic-beta 0.5: applies only to -cc cubic":                 {Docroot: dir, Cert: "c", Key: "k", CC: "reno", CubicBeta: 0.5},
		`-loss-detection "quiche": quic-go has adaptive`:             {Docroot: dir, Cert: "c", Key: "k", CC: "reno", LossDetection: "quiche"},
		`-loss-detection "": quic-go has adaptive`:                   {Docroot: dir, Cert: "c", Key: "k", CC: "reno"},
		"-initial-conn-window 20 is larger than -max-conn-window 10": {Docroot: dir, Cert: "c", Key: "k", CC: "reno", LossDetection: "adaptive", InitialConnWindow: 20, MaxConnWindow: 10},
		"-flow-control-autotune=false sets the maximum windows":      {Docroot: dir, Cert: "c", Key: "k", CC: "reno", LossDetection: "adaptive", NoAutotune: true, MaxStreamWindow: 10},
	}
	for want, cfg := range cases {
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want %q", err, want)
		}
	}
}

// The buffers asked for are the socket's after quic-go's own 7 MiB attempt (the
// kernel doubles them), and each connection logs the cipher it negotiated.
func TestBuffersAndCipherAreLogged(t *testing.T) {
	certPath, keyPath, pool := certFiles(t)
	logBuf := &safeBuffer{mu: make(chanMutex, 1)}
	srv, err := Start(Config{Addr: "127.0.0.1:0", Docroot: tree(t), Cert: certPath, Key: keyPath, CC: "reno", LossDetection: DefaultLossDetection, UDPRcvBuf: 106496, UDPSndBuf: 212992}, NewLogger(logBuf))
	must(t, err)
	defer srv.Stop(time.Second)
	start := waitFor(t, logBuf, "start", 1)[0]
	if start["udp_rcvbuf"] != float64(212992) || start["udp_sndbuf"] != float64(425984) {
		t.Fatalf("start record's buffers: %v, %v", start["udp_rcvbuf"], start["udp_sndbuf"])
	}
	url := "https://localhost:" + strings.Split(srv.Addr().String(), ":")[1] + "/5kb/img-000.jpg"
	tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}
	defer func() { _ = tr.Close() }()
	resp, err := (&http.Client{Transport: tr}).Get(url)
	must(t, err)
	_ = resp.Body.Close()
	conn := waitFor(t, logBuf, "conn", 1)[0]
	if c := conn["tls_cipher"]; c != "TLS_AES_128_GCM_SHA256" && c != "TLS_CHACHA20_POLY1305_SHA256" {
		t.Fatalf("tls_cipher %v", c)
	}
}
