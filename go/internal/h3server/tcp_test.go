package h3server

import (
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The TCP listener serves the tree over HTTP/2 only, its connections run the
// congestion control it was given (read back from the kernel into the start
// record), and its requests are logged as the QUIC side's are.
func TestTCPSideServesHTTP2WithItsOwnCC(t *testing.T) {
	certPath, keyPath, pool := certFiles(t)
	logBuf := &safeBuffer{mu: make(chanMutex, 1)}
	cfg := Config{Addr: "127.0.0.1:0", Docroot: tree(t), Cert: certPath, Key: keyPath, CC: DefaultCC,
		LossDetection: DefaultLossDetection, TCPAddr: "127.0.0.1:0", TCPCC: "reno"}
	srv, err := Start(cfg, NewLogger(logBuf))
	must(t, err)
	defer srv.Stop(time.Second)
	st := readLog(t, logBuf, "start")[0]["tcp"].(map[string]any)
	if st["cc"] != "reno" {
		t.Fatalf("the listener holds %v, not reno: %v", st["cc"], st)
	}
	url := "https://localhost:" + strings.Split(st["addr"].(string), ":")[1] + "/5kb/img-000.jpg"
	h2 := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	defer h2.CloseIdleConnections()
	resp, err := (&http.Client{Transport: h2}).Get(url)
	must(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.Proto != "HTTP/2.0" || resp.StatusCode != 200 || len(body) != 6000 {
		t.Fatalf("GET over TCP: %s %d, %d bytes", resp.Proto, resp.StatusCode, len(body))
	}
	reqs := waitFor(t, logBuf, "request", 1)
	if reqs[0]["proto"] != "HTTP/2.0" || reqs[0]["conn_id"].(float64) < 1 {
		t.Fatalf("request record: %v", reqs[0])
	}
	// HTTP/1.1 (crypto/tls lets an http/1.1-only client in): answered 505, no body
	h1 := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}}}
	defer h1.CloseIdleConnections()
	resp, err = (&http.Client{Transport: h1}).Get(url)
	must(t, err)
	body, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.Proto != "HTTP/1.1" || resp.StatusCode != http.StatusHTTPVersionNotSupported || len(body) > 100 {
		t.Fatalf("an HTTP/1.1 request: %s %d, %d bytes", resp.Proto, resp.StatusCode, len(body))
	}
}

func TestTCPSideRefusals(t *testing.T) {
	certPath, keyPath, _ := certFiles(t)
	base := Config{Addr: "127.0.0.1:0", Docroot: tree(t), Cert: certPath, Key: keyPath, CC: DefaultCC,
		LossDetection: DefaultLossDetection}
	for want, mod := range map[string]func(*Config){
		"-tcp-cc reno: applies only to -tcp-addr":               func(c *Config) { c.TCPCC = "reno" },
		`-tcp-cc "bbr;x": not a kernel congestion control name`: func(c *Config) { c.TCPAddr, c.TCPCC = "127.0.0.1:0", "bbr;x" },
		"-tcp-cc nosuchcc: the kernel refused it":               func(c *Config) { c.TCPAddr, c.TCPCC = "127.0.0.1:0", "nosuchcc" },
	} {
		c := base
		mod(&c)
		_, err := Start(c, NewLogger(io.Discard))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: got %v, want %q", c, err, want)
		}
	}
}

// The sink counts what POSTs send it, on both sides, and logs the count every
// interval; anything but POST /sink is the tree's as before.
func TestSinkCountsUploadsOnBothSides(t *testing.T) {
	certPath, keyPath, pool := certFiles(t)
	logBuf := &safeBuffer{mu: make(chanMutex, 1)}
	cfg := Config{Addr: "127.0.0.1:0", Docroot: tree(t), Cert: certPath, Key: keyPath, CC: DefaultCC,
		LossDetection: DefaultLossDetection, TCPAddr: "127.0.0.1:0", SinkInterval: 20 * time.Millisecond}
	srv, err := Start(cfg, NewLogger(logBuf))
	must(t, err)
	defer srv.Stop(time.Second)
	port := strings.Split(readLog(t, logBuf, "start")[0]["tcp"].(map[string]any)["addr"].(string), ":")[1]
	h2 := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	defer h2.CloseIdleConnections()
	body := strings.NewReader(strings.Repeat("x", 300_000))
	resp, err := (&http.Client{Transport: h2}).Post("https://localhost:"+port+SinkPath, "application/octet-stream", body)
	must(t, err)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || resp.Proto != "HTTP/2.0" {
		t.Fatalf("POST /sink: %s %d", resp.Proto, resp.StatusCode)
	}
	reqs := waitFor(t, logBuf, "request", 1)
	if reqs[0]["method"] != "POST" || reqs[0]["bytes"].(float64) != 300_000 {
		t.Fatalf("request record: %v", reqs[0])
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		s := readLog(t, logBuf, "sink_sample")
		if len(s) > 0 && s[len(s)-1]["bytes"].(float64) == 300_000 {
			if s[len(s)-1]["unix_ns"].(float64) < float64(time.Now().Add(-time.Minute).UnixNano()) {
				t.Fatalf("a sample's time is not this machine's: %v", s[len(s)-1])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sample of 300000 bytes: %v", s)
		}
		time.Sleep(20 * time.Millisecond)
	}
	get, err := (&http.Client{Transport: h2}).Get("https://localhost:" + port + SinkPath)
	must(t, err)
	_ = get.Body.Close()
	if get.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET /sink: %d", get.StatusCode)
	}
}
