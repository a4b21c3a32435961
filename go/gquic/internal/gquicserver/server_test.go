package gquicserver

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	quic "github.com/lucas-clemente/quic-go"
	"github.com/lucas-clemente/quic-go/h2quic"

	"quicbed/gquic/internal/docroot"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// tree is a small page: an index, an image, and a 300 kB image (many packets,
// several flow-control updates).
func tree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, "p"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "p", "index.html"), []byte("<html><img src=a.jpg><img src=b.jpg></html>"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "p", "a.jpg"), bytes.Repeat([]byte{0xff, 0xd8, 0x17}, 2000), 0o644))
	big := make([]byte, 300_000)
	_, _ = rand.Read(big)
	must(t, os.WriteFile(filepath.Join(dir, "p", "b.jpg"), big, 0o644))
	return dir
}

// pki writes a CA and a leaf for localhost and 127.0.0.1 signed by it; the cert file
// holds the leaf, then the CA, as quicbed's (and the flag's doc) has it.
func pki(t *testing.T) (certPath, keyPath string, roots *x509.CertPool) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "quicbed test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	must(t, err)
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &key.PublicKey, caKey)
	must(t, err)
	dir := t.TempDir()
	certPath, keyPath = filepath.Join(dir, "chain.pem"), filepath.Join(dir, "leaf.key")
	chain := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})...)
	must(t, os.WriteFile(certPath, chain, 0o644))
	kb, _ := x509.MarshalECPrivateKey(key)
	must(t, os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600))
	roots = x509.NewCertPool()
	roots.AddCert(ca)
	return
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func events(t *testing.T, log string, event string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		var m map[string]any
		must(t, json.Unmarshal(sc.Bytes(), &m))
		if m["event"] == event {
			out = append(out, m)
		}
	}
	return out
}

func waitFor(t *testing.T, buf *syncBuffer, event string, n int) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if ev := events(t, buf.String(), event); len(ev) >= n {
			return ev
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("fewer than %d %q events in the log:\n%s", n, event, buf.String())
	return nil
}

type fixture struct {
	dir   string
	roots *x509.CertPool
	log   *syncBuffer
	srv   *Server
	port  string
}

func start(t *testing.T, versions string) *fixture {
	t.Helper()
	certPath, keyPath, roots := pki(t)
	f := &fixture{dir: tree(t), roots: roots, log: &syncBuffer{}}
	var err error
	f.srv, err = Start(Config{Addr: "127.0.0.1:0", Docroot: f.dir, Cert: certPath, Key: keyPath, Versions: versions}, NewLogger(f.log))
	must(t, err)
	t.Cleanup(f.srv.Stop)
	_, f.port, _ = net.SplitHostPort(f.srv.Addr().String())
	return f
}

// client is quic-go v0.10.2's own gQUIC HTTP client, offering versions.
func (f *fixture) client(versions ...quic.VersionNumber) *h2quic.RoundTripper {
	return &h2quic.RoundTripper{
		TLSClientConfig:    &tls.Config{RootCAs: f.roots, ServerName: "localhost"},
		QuicConfig:         &quic.Config{Versions: versions, HandshakeTimeout: 3 * time.Second},
		DisableCompression: true,
	}
}

func (f *fixture) url(path string) string { return "https://127.0.0.1:" + f.port + path }

// headers lower-cased, each key once.
func headers(h http.Header) map[string]string {
	out := map[string]string{}
	for k := range h {
		out[strings.ToLower(k)] = strings.Join(h.Values(k), ", ")
	}
	return out
}

func keys(m map[string]string) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, " ")
}

// TestServesEachVersion fetches the page with each gQUIC version through
// quic-go's client and compares with what the shared handler serves directly:
// the same status, bytes and headers (plus Date, which servers add), and a log
// that names the version negotiated and every request.
func TestServesEachVersion(t *testing.T) {
	f := start(t, "Q039,Q043,Q044")
	direct, err := docroot.NewHandler(f.dir, nil)
	must(t, err)
	reqs := []struct{ method, path string }{
		{"GET", "/p/"}, {"GET", "/p/a.jpg"}, {"GET", "/p/b.jpg"}, {"HEAD", "/p/a.jpg"}, {"GET", "/p/missing.jpg"},
	}
	for i, name := range []string{"Q039", "Q043", "Q044"} {
		rt := f.client(Versions[name])
		for _, r := range reqs {
			req, _ := http.NewRequest(r.method, f.url(r.path), nil)
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatalf("%s %s %s: %v", name, r.method, r.path, err)
			}
			body, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			must(t, err)
			rec := httptest.NewRecorder()
			direct.ServeHTTP(rec, httptest.NewRequest(r.method, r.path, nil))
			got, want := headers(resp.Header), headers(rec.Header())
			if _, err := http.ParseTime(got["date"]); err != nil {
				t.Errorf("%s %s: Date %q: %v", name, r.path, got["date"], err)
			}
			delete(got, "date")
			if resp.StatusCode != rec.Code || !bytes.Equal(body, rec.Body.Bytes()) || keys(got) != keys(want) {
				t.Errorf("%s %s %s: %d, %d bytes, %v; handler: %d, %d bytes, %v", name, r.method, r.path,
					resp.StatusCode, len(body), got, rec.Code, rec.Body.Len(), want)
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s %s: %s: %q, handler %q", name, r.path, k, got[k], v)
				}
			}
		}
		must(t, rt.Close())

		conns := waitFor(t, f.log, "conn", i+1)
		c := conns[i]
		// quic-go's client caches no server config, so every handshake starts with
		// an inchoate hello the server rejects: never 0-RTT.
		if c["quic_version"] != name || c["used_0rtt"] != false || c["rejects"].(float64) < 1 ||
			c["did_resume"] != nil || c["sni"] != "localhost" || c["cc"] != "cubic" ||
			c["cubic_n"] != float64(2) || c["cubic_beta"] != 0.7 || c["handshake_ms"].(float64) <= 0 ||
			c["handshake_rtts"] != c["rejects"] {
			t.Errorf("conn record: %v", c)
		}
		// quic-go's client offers its initial receive windows, 32 kB per stream and
		// 48 kB per connection (its protocol.ReceiveStream/ConnectionFlowControlWindow),
		// read back from the server's session: the stream window is the limit.
		if c["client_sfcw"] != float64(32<<10) || c["client_cfcw"] != float64(48<<10) ||
			c["window_limit"] != "stream_flow_control" || c["window_limit_bytes"] != float64(32<<10) ||
			c["max_cwnd_bytes"] != float64(1000*1460) || c["initial_cwnd_bytes"] != float64(32*1460) ||
			c["pacing_min_delay_us"] != float64(1000) {
			t.Errorf("conn record's windows: %v", c)
		}
		all := waitFor(t, f.log, "request", (i+1)*len(reqs))
		// A request's line is written when its handler returns, after the response
		// has gone out: the client's next request may be logged first. Match by
		// method and path within this connection's lines, not by position.
		mine := map[string]map[string]any{}
		for _, rec := range all[i*len(reqs) : (i+1)*len(reqs)] {
			mine[fmt.Sprint(rec["method"], " ", rec["path"])] = rec
		}
		for j, r := range reqs {
			got := mine[r.method+" "+r.path]
			wantBytes, wantStatus := 0.0, 404.0
			if st, err := os.Stat(filepath.Join(f.dir, r.path)); err == nil {
				wantStatus = 200
				if r.method == "GET" && st.IsDir() {
					st, _ = os.Stat(filepath.Join(f.dir, r.path, "index.html"))
				}
				if r.method == "GET" {
					wantBytes = float64(st.Size())
				}
			}
			if got["conn_id"] != c["conn_id"] || got["method"] != r.method || got["path"] != r.path ||
				got["status"] != wantStatus || got["bytes"] != wantBytes || got["proto"] != "HTTP/2.0" {
				t.Errorf("request record %d: %v", j, got)
			}
			checkFlight(t, got)
		}
		closes := waitFor(t, f.log, "conn_close", i+1)
		st, _ := closes[i]["stats"].(map[string]any)
		if closes[i]["conn_id"] != c["conn_id"] || st == nil || st["sent_bytes"].(float64) < 300_000 || st["recv"].(float64) < 1 {
			t.Errorf("conn_close record: %v", closes[i])
		}
	}
	// (A test binary has no module versions in its build information, so
	// quic_go_version is "unknown" here; the command's test checks "v0.10.2".)
	st := events(t, f.log.String(), "start")
	if len(st) != 1 || st[0]["quic_go_version"] != "unknown" || st[0]["quic_go_module"] != "github.com/lucas-clemente/quic-go" ||
		!strings.HasPrefix(st[0]["quic_go_patch"].(string), "quic-go-v0.10.2-keep-ciphertext sha256:") ||
		st[0]["server"] != "quicbed-gquic-server" || st[0]["cc"] != "cubic" ||
		strings.Join(toStrings(st[0]["versions"]), ",") != "Q039,Q043,Q044" {
		t.Errorf("start record: %v", st)
	}
}

func toStrings(v any) []string {
	var out []string
	l, _ := v.([]any)
	for _, s := range l {
		out = append(out, s.(string))
	}
	return out
}

// TestVersionNegotiated: the logged version is the one the session speaks, not
// the first of the flag's: a client that offers Q039 first gets Q043, the only
// one both have, through a version negotiation.
func TestVersionNegotiated(t *testing.T) {
	f := start(t, "Q043,Q044")
	rt := f.client(quic.VersionGQUIC39, quic.VersionGQUIC43)
	defer func() { _ = rt.Close() }()
	resp, err := rt.RoundTrip(mustRequest(t, f.url("/p/a.jpg")))
	must(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if c := waitFor(t, f.log, "conn", 1)[0]; c["quic_version"] != "Q043" {
		t.Errorf("conn record: %v", c)
	}
}

// TestNoCommonVersion: a client that offers only a version the server does not
// fails, and no connection is logged.
func TestNoCommonVersion(t *testing.T) {
	f := start(t, "Q039")
	rt := f.client(quic.VersionGQUIC44)
	defer func() { _ = rt.Close() }()
	if resp, err := rt.RoundTrip(mustRequest(t, f.url("/p/a.jpg"))); err == nil {
		_ = resp.Body.Close()
		t.Fatalf("a Q044-only client got a response from a Q039 server")
	}
	time.Sleep(200 * time.Millisecond)
	if c := events(t, f.log.String(), "conn"); len(c) != 0 {
		t.Errorf("conn records: %v", c)
	}
}

func mustRequest(t *testing.T, url string) *http.Request {
	req, err := http.NewRequest("GET", url, nil)
	must(t, err)
	return req
}

func TestConfigErrorsNameTheValue(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]Config{
		"-docroot is required":                                            {Cert: "c", Key: "k", Versions: "Q039"},
		"-cert and -key are required":                                     {Docroot: dir, Versions: "Q039"},
		`-docroot "/nonexistent" is not`:                                  {Docroot: "/nonexistent", Cert: "c", Key: "k", Versions: "Q039"},
		`-versions: "Q046" is not a gQUIC version of quic-go v0.10.2`:     {Docroot: dir, Cert: "c", Key: "k", Versions: "Q039,Q046"},
		`-versions: "q039" is not`:                                        {Docroot: dir, Cert: "c", Key: "k", Versions: "q039"},
		`-versions: "" is not`:                                            {Docroot: dir, Cert: "c", Key: "k"},
		`-versions: "Q043" is given twice`:                                {Docroot: dir, Cert: "c", Key: "k", Versions: "Q043,Q043"},
		`-versions: "h3" is not a gQUIC version of quic-go v0.10.2 (Q039`: {Docroot: dir, Cert: "c", Key: "k", Versions: "h3"},
	}
	for want, cfg := range cases {
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want %q", err, want)
		}
	}
	if err := (Config{Docroot: dir, Cert: "c", Key: "k", Versions: "Q044,Q039"}).Validate(); err != nil {
		t.Errorf("Q044,Q039: %v", err)
	}
}

func TestWireName(t *testing.T) {
	for v, want := range map[quic.VersionNumber]string{
		quic.VersionGQUIC39: "Q039", quic.VersionGQUIC43: "Q043", quic.VersionGQUIC44: "Q044", 0xff00001d: "0xff00001d",
	} {
		if got := WireName(v); got != want {
			t.Errorf("%#x: %q, want %q", uint32(v), got, want)
		}
	}
}

// checkFlight: a request line's flight record has the windows of FlightWindowsMS,
// each peak at most the bytes sent so far and no less than a shorter window's.
func checkFlight(t *testing.T, rec map[string]any) {
	t.Helper()
	fl, _ := rec["flight"].(map[string]any)
	peaks, _ := fl["peak_bytes"].(map[string]any)
	sent, _ := fl["sent_bytes"].(float64)
	if fl == nil || fl["bin_ms"] != float64(BinMS) || sent <= 0 || len(peaks) != len(FlightWindowsMS) {
		t.Errorf("request record's flight: %v", rec)
		return
	}
	prev := 0.0
	for _, w := range FlightWindowsMS {
		p, _ := peaks[strconv.Itoa(w)].(float64)
		if p <= 0 || p < prev || p > sent {
			t.Errorf("flight peak over %d ms: %v (sent %v, shorter window %v)", w, p, sent, prev)
		}
		prev = p
	}
}
