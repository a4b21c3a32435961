package h3server

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"quicbed/internal/replay/replaytest"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"quicbed/internal/replay"
)

// hostCert writes a self-signed certificate for host into dir and adds it to pool.
func hostCert(t *testing.T, dir, host string, pool *x509.CertPool) replay.CertFiles {
	t.Helper()
	cert, key, parsed := replaytest.SelfSigned(t, dir, host)
	pool.AddCert(parsed)
	return replay.CertFiles{Cert: cert, Key: key}
}

type response struct {
	url, ctype string
	body       []byte
}

// writeReplay writes a format-1 archive of the responses (GET, 200), origins in
// the order of their first response, and returns its folder.
func writeReplay(t *testing.T, resps []response) string {
	t.Helper()
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, replay.Bodies), 0o755))
	var origins []map[string]any
	byOrigin := map[string]map[string]any{}
	for _, r := range resps {
		origin, _, _, err := replay.SplitURL(r.url)
		must(t, err)
		o := byOrigin[origin]
		if o == nil {
			host, port, found := strings.Cut(strings.TrimPrefix(origin, "https://"), ":")
			p := 443
			if found {
				p, _ = strconv.Atoi(port)
			}
			o = map[string]any{"origin": origin, "host": host, "port": p, "rtt_ms": nil, "entries": []any{}}
			byOrigin[origin] = o
			origins = append(origins, o)
		}
		sum := sha256.Sum256(r.body)
		sha := hex.EncodeToString(sum[:])
		o["entries"] = append(o["entries"].([]any), map[string]any{"method": "GET", "url": r.url, "status": 200,
			"headers": [][]string{{"content-type", r.ctype}, {"cache-control", "max-age=60"}}, "body": sha, "size": len(r.body), "wait_ms": 5.0})
		must(t, os.WriteFile(filepath.Join(dir, replay.Bodies, sha), r.body, 0o644))
	}
	m := map[string]any{"format": 1, "name": "two-origins", "main": resps[0].url, "source": map[string]string{"kind": "model"}, "origins": origins}
	data, err := json.Marshal(m)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, replay.Manifest), data, 0o644))
	return dir
}

// fromConn is a client's UDP socket that notes the source address of every
// datagram it receives. It hides the socket's other methods, so quic-go reads
// through ReadFrom.
type fromConn struct {
	net.PacketConn
	mu   sync.Mutex
	from map[string]int
}

func (c *fromConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, addr, err := c.PacketConn.ReadFrom(b)
	if err == nil {
		c.mu.Lock()
		c.from[addr.String()]++
		c.mu.Unlock()
	}
	return n, addr, err
}

func (c *fromConn) sources() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.from {
		out[k] = v
	}
	return out
}

// h3Client is an HTTP/3 client that sends every request to server (the browser's
// host resolver rule), from its own socket on 127.0.0.1.
func h3Client(t *testing.T, server *net.UDPAddr, tlsConf *tls.Config) (*http.Client, *fromConn) {
	t.Helper()
	// quic-go cannot size a socket it does not see as a *net.UDPConn; that is meant
	t.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
	udp, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	must(t, err)
	conn := &fromConn{PacketConn: udp, from: map[string]int{}}
	tr := &quic.Transport{Conn: conn}
	h3 := &http3.Transport{TLSClientConfig: tlsConf, Dial: func(ctx context.Context, _ string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
		return tr.DialEarly(ctx, server, tc, qc)
	}}
	t.Cleanup(func() {
		_ = h3.Close()
		_ = tr.Close()
		_ = udp.Close()
	})
	return &http.Client{Transport: h3, Timeout: 10 * time.Second}, conn
}

func freeUDPPort(t *testing.T) int {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4zero})
	must(t, err)
	defer func() { _ = c.Close() }()
	return c.LocalAddr().(*net.UDPAddr).Port
}

// Two origins, each with its own certificate and its own address (127.0.0.2 and
// 127.0.0.3), served by one server listening on the unspecified address: quic-go
// answers each from the address its client sent to (IP_PKTINFO), picks the
// certificate by SNI, and serves the archive's bytes; an unknown name is refused
// in the handshake and logged. -addr 0.0.0.0:PORT and [::]:PORT both open one
// dual-stack socket ([::], as net.ListenUDP("udp", ...) does for either), so the
// two runs take the same path, IPv4 packets on an IPv6 socket.
func TestReplayTwoOriginsOverQUIC(t *testing.T) {
	for _, listen := range []string{"0.0.0.0", "[::]"} {
		t.Run(listen, func(t *testing.T) { replayTwoOrigins(t, listen) })
	}
}

// The check above can fail: a socket on the unspecified address that sends
// without IP_PKTINFO answers a datagram sent to 127.0.0.3 from 127.0.0.1 (the
// kernel's route to the client), not from the address the client used.
func TestUnspecifiedSocketWithoutPktinfo(t *testing.T) {
	srv, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4zero})
	must(t, err)
	defer func() { _ = srv.Close() }()
	cli, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	must(t, err)
	defer func() { _ = cli.Close() }()
	to := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 3), Port: srv.LocalAddr().(*net.UDPAddr).Port}
	_, err = cli.WriteTo([]byte("x"), to)
	must(t, err)
	b := make([]byte, 8)
	_, from, err := srv.ReadFrom(b)
	must(t, err)
	_, err = srv.WriteTo([]byte("y"), from)
	must(t, err)
	must(t, cli.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, src, err := cli.ReadFrom(b)
	must(t, err)
	if src.String() == to.String() {
		t.Fatalf("a plain socket answered from %s, the address sent to: the source check proves nothing here", src)
	}
}

func replayTwoOrigins(t *testing.T, listen string) {
	if listen == "[::]" {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv6unspecified})
		if err != nil {
			t.Skipf("no dual-stack UDP socket here: %v", err)
		}
		_ = c.Close()
	}
	port := freeUDPPort(t)
	www := fmt.Sprintf("https://www.a.test:%d", port)
	cdn := fmt.Sprintf("https://cdn.b.test:%d", port)
	big := make([]byte, 300_000)
	_, _ = rand.Read(big)
	resps := []response{
		{www + "/", "text/html; charset=utf-8", []byte(`<html><link rel=stylesheet href="/style.css?v=1"><script src="` + cdn + `/app.js"></script></html>`)},
		{www + "/style.css?v=1", "text/css", bytes.Repeat([]byte("p{}\n"), 2000)},
		{cdn + "/app.js", "text/javascript", big},
		{cdn + "/img.png?w=10", "image/png", []byte{0x89, 'P', 'N', 'G', 13, 10, 26, 10}},
	}
	dir := writeReplay(t, resps)
	certDir := t.TempDir()
	pool := x509.NewCertPool()
	certs := map[string]replay.CertFiles{
		"www.a.test": hostCert(t, certDir, "www.a.test", pool),
		"cdn.b.test": hostCert(t, certDir, "cdn.b.test", pool),
	}
	data, _ := json.Marshal(certs)
	certsFile := filepath.Join(certDir, "certs.json")
	must(t, os.WriteFile(certsFile, data, 0o644))

	logBuf := &safeBuffer{mu: make(chanMutex, 1)}
	srv, err := Start(Config{Addr: listen + ":" + strconv.Itoa(port), Replay: dir, ReplayCerts: certsFile,
		CC: "reno", LossDetection: DefaultLossDetection}, NewLogger(logBuf))
	must(t, err)
	defer srv.Stop(time.Second)
	archive, err := replay.Load(dir)
	must(t, err)

	addrs := map[string]*net.UDPAddr{
		www: {IP: net.IPv4(127, 0, 0, 2), Port: port},
		cdn: {IP: net.IPv4(127, 0, 0, 3), Port: port},
	}
	conns := map[string]*fromConn{}
	for _, origin := range []string{www, cdn} {
		client, conn := h3Client(t, addrs[origin], &tls.Config{RootCAs: pool})
		conns[origin] = conn
		for _, e := range archive.Entries() {
			if !strings.HasPrefix(e.URL, origin+"/") {
				continue
			}
			resp, err := client.Get(e.URL)
			must(t, err)
			got, err := io.ReadAll(resp.Body)
			must(t, err)
			_ = resp.Body.Close()
			want := archive.BodyOf(e)
			if resp.StatusCode != 200 || resp.Proto != "HTTP/3.0" || !bytes.Equal(got, want) {
				t.Fatalf("%s: %d %s, %d bytes, want %d", e.URL, resp.StatusCode, resp.Proto, len(got), len(want))
			}
			if resp.ContentLength != int64(len(want)) || resp.Header.Get("Content-Type") != e.Headers[0][1] ||
				resp.Header.Get("Cache-Control") != "max-age=60" || resp.Header.Get("Alt-Svc") != "" {
				t.Fatalf("%s: headers %v", e.URL, resp.Header)
			}
			if resp.TLS == nil || resp.TLS.PeerCertificates[0].Subject.CommonName != strings.Split(strings.TrimPrefix(origin, "https://"), ":")[0] {
				t.Fatalf("%s: served with another certificate", e.URL)
			}
		}
		// a URL the archive does not have: 404, empty
		resp, err := client.Get(origin + "/missing.js")
		must(t, err)
		got, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 404 || len(got) != 0 {
			t.Fatalf("%s/missing.js: %d, %d bytes", origin, resp.StatusCode, len(got))
		}
	}
	// every datagram each client received came from the address it sent to
	for origin, conn := range conns {
		src := conn.sources()
		if len(src) != 1 || src[addrs[origin].String()] == 0 {
			t.Errorf("%s: the client sent to %s and received from %v", origin, addrs[origin], src)
		}
	}

	recs := waitFor(t, logBuf, "replay", 6)
	for _, r := range recs {
		origin, _ := r["origin"].(string)
		if r["local"] != addrs[origin].String() || r["conn_id"] == float64(0) || r["proto"] != "HTTP/3.0" {
			t.Errorf("replay record %v: not from %s", r, addrs[origin])
		}
		if r["url"] == "/missing.js" {
			if r["match"] != "none" || r["status"] != float64(404) || r["bytes"] != float64(0) {
				t.Errorf("unmatched record %v", r)
			}
			continue
		}
		e, how, err := archive.Match("GET", origin+r["url"].(string))
		if err != nil || how != replay.ByURL || r["match"] != "url" || r["entry"] != e.URL ||
			r["sha256"] != e.Body[:replay.SHA256Prefix] || r["bytes"] != float64(e.Size) || r["status"] != float64(200) {
			t.Errorf("replay record %v for %v", r, e)
		}
	}
	// each connection names its origin: the SNI and the address sent to
	for _, c := range readLog(t, logBuf, "conn") {
		host := map[string]string{addrs[www].String(): "www.a.test", addrs[cdn].String(): "cdn.b.test"}[c["local"].(string)]
		if host == "" || c["sni"] != host {
			t.Errorf("conn record %v", c)
		}
	}
	start := readLog(t, logBuf, "start")[0]
	rp, _ := start["replay"].(map[string]any)
	if rp == nil || rp["name"] != "two-origins" || rp["entries"] != float64(4) || rp["wait"] != false || start["docroot"] != nil {
		t.Fatalf("start record: %v", start)
	}

	// a name the archive does not have: refused in the handshake, and logged
	client, _ := h3Client(t, addrs[www], &tls.Config{RootCAs: pool, ServerName: "other.test"})
	if _, err := client.Get(www + "/"); err == nil || !strings.Contains(err.Error(), "unrecognized name") {
		t.Fatalf("unknown SNI: %v", err)
	}
	refused := waitFor(t, logBuf, "tls_refused", 1)[0]
	if refused["sni"] != "other.test" || refused["local"] != addrs[www].String() {
		t.Fatalf("tls_refused record: %v", refused)
	}
}

// Served time: with -replay-wait each response waits its entry's wait_ms.
func TestReplayWait(t *testing.T) {
	port := freeUDPPort(t)
	www := fmt.Sprintf("https://www.a.test:%d", port)
	dir := writeReplay(t, []response{{www + "/", "text/html", []byte("<html></html>")}})
	data, err := os.ReadFile(filepath.Join(dir, replay.Manifest))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, replay.Manifest), bytes.Replace(data, []byte(`"wait_ms":5`), []byte(`"wait_ms":150`), 1), 0o644))
	certDir := t.TempDir()
	pool := x509.NewCertPool()
	data, _ = json.Marshal(map[string]replay.CertFiles{"www.a.test": hostCert(t, certDir, "www.a.test", pool)})
	certsFile := filepath.Join(certDir, "certs.json")
	must(t, os.WriteFile(certsFile, data, 0o644))
	for _, wait := range []bool{false, true} {
		logBuf := &safeBuffer{mu: make(chanMutex, 1)}
		srv, err := Start(Config{Addr: "127.0.0.1:" + strconv.Itoa(port), Replay: dir, ReplayCerts: certsFile, ReplayWait: wait,
			CC: "reno", LossDetection: DefaultLossDetection}, NewLogger(logBuf))
		must(t, err)
		client, _ := h3Client(t, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}, &tls.Config{RootCAs: pool})
		resp, err := client.Get(www + "/")
		must(t, err)
		_ = resp.Body.Close()
		rec := waitFor(t, logBuf, "replay", 1)[0]
		slept := rec["wait_ms"].(float64)
		if (wait && slept < 150) || (!wait && slept != 0) {
			t.Errorf("-replay-wait %v: slept %v ms", wait, slept)
		}
		if cfg := readLog(t, logBuf, "start")[0]["config"].(map[string]any); (cfg["replay_wait"] == true) != wait {
			t.Errorf("-replay-wait %v: config %v", wait, cfg)
		}
		srv.Stop(time.Second)
	}
}

func TestReplayConfigErrors(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]Config{
		"-docroot is required (or -replay DIR)":                      {CC: "reno", LossDetection: "adaptive"},
		"-docroot and -replay: give one of them":                     {Docroot: dir, Replay: dir, ReplayCerts: "c", CC: "reno", LossDetection: "adaptive"},
		"-replay needs -replay-certs":                                {Replay: dir, CC: "reno", LossDetection: "adaptive"},
		"-cert and -key: with -replay":                               {Replay: dir, ReplayCerts: "c", Cert: "c", Key: "k", CC: "reno", LossDetection: "adaptive"},
		"-replay-certs applies only to -replay":                      {Docroot: dir, Cert: "c", Key: "k", ReplayCerts: "c", CC: "reno", LossDetection: "adaptive"},
		"-replay-wait applies only to -replay":                       {Docroot: dir, Cert: "c", Key: "k", ReplayWait: true, CC: "reno", LossDetection: "adaptive"},
		`-replay "/nonexistent" is not a readable directory`:         {Replay: "/nonexistent", ReplayCerts: "c", CC: "reno", LossDetection: "adaptive"},
		`congestion control "bbr" is not supported by quic-go (it h`: {Replay: dir, ReplayCerts: "c", CC: "bbr"},
	}
	for want, cfg := range cases {
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want %q", err, want)
		}
	}
	// the archive and the certificates are read at start, and refused by name
	if _, err := Start(Config{Addr: "127.0.0.1:0", Replay: dir, ReplayCerts: "c", CC: "reno", LossDetection: "adaptive"}, NewLogger(io.Discard)); err == nil ||
		!strings.Contains(err.Error(), "replay archive "+dir+": no archive.json there") {
		t.Fatalf("start without an archive: %v", err)
	}
	arch := writeReplay(t, []response{{"https://www.a.test/", "text/html", []byte("x")}})
	if _, err := Start(Config{Addr: "127.0.0.1:0", Replay: arch, ReplayCerts: filepath.Join(dir, "none.json"), CC: "reno", LossDetection: "adaptive"}, NewLogger(io.Discard)); err == nil ||
		!strings.Contains(err.Error(), "replay certificates "+filepath.Join(dir, "none.json")) {
		t.Fatalf("start without certificates: %v", err)
	}
}
