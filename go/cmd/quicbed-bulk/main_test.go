package main

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
	neturl "net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"
)

const objectSize = 3 << 20

// testCA makes a CA and a leaf for 127.0.0.1 signed by it; returns the leaf and the
// CA's PEM file.
func testCA(t *testing.T) (tls.Certificate, string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	must(t, err)
	ca, err := x509.ParseCertificate(caDER)
	must(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"bulk.test"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &key.PublicKey, caKey)
	must(t, err)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	must(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644))
	return tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key}, caFile
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// handler serves /obj: objectSize bytes, slowly enough that a 100 ms sampler sees
// several samples (1 MiB every 100 ms).
func handler(protos chan<- string) http.Handler {
	chunk := bytes.Repeat([]byte{0x5a}, 1<<20)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/obj" {
			http.NotFound(w, r)
			return
		}
		select {
		case protos <- r.Proto:
		default:
		}
		w.Header().Set("Content-Length", strconv.Itoa(objectSize))
		for sent := 0; sent < objectSize; sent += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

func records(t *testing.T, out []byte) []map[string]any {
	t.Helper()
	var recs []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var r map[string]any
		must(t, json.Unmarshal(sc.Bytes(), &r))
		recs = append(recs, r)
	}
	return recs
}

func servers(t *testing.T) (h2URL, h3URL, ca string, protos chan string) {
	t.Helper()
	cert, ca := testCA(t)
	protos = make(chan string, 16)
	h := handler(protos)
	ts := httptest.NewUnstartedServer(h)
	ts.EnableHTTP2 = true
	ts.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
	ts.StartTLS()
	t.Cleanup(ts.Close)

	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP("127.0.0.1")})
	must(t, err)
	h3 := &http3.Server{Handler: h, TLSConfig: http3.ConfigureTLSConfig(&tls.Config{
		Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})}
	go func() { _ = h3.Serve(udp) }()
	t.Cleanup(func() { _ = h3.Close(); _ = udp.Close() })
	return ts.URL + "/obj", "https://" + udp.LocalAddr().String() + "/obj", ca, protos
}

func TestObjectBothProtocols(t *testing.T) {
	h2URL, h3URL, ca, protos := servers(t)
	for proto, url := range map[string]string{"h2": h2URL, "h3": h3URL} {
		t.Run(proto, func(t *testing.T) {
			var out bytes.Buffer
			keys := filepath.Join(t.TempDir(), "keys.log")
			c := config{Proto: proto, URL: url, CA: ca, Interval: 100 * time.Millisecond, Flow: "f1", KeyLog: keys}
			if proto == "h3" { // by name, dialling the address: as the testbed does
				u, err := neturl.Parse(url)
				must(t, err)
				c.URL, c.Addr = "https://bulk.test:"+u.Port()+"/obj", u.Host
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			must(t, run(ctx, c, &out))
			recs := records(t, out.Bytes())
			if recs[0]["event"] != "start" {
				t.Fatalf("first record %v", recs[0])
			}
			final := recs[len(recs)-1]
			if final["event"] != "done" || final["ok"] != true || final["bytes"].(float64) != objectSize || final["status"].(float64) != 200 {
				t.Fatalf("final record %v", final)
			}
			wantProto := map[string]string{"h2": "HTTP/2.0", "h3": "HTTP/3.0"}[proto]
			if final["http_proto"] != wantProto {
				t.Fatalf("protocol %v, want %s", final["http_proto"], wantProto)
			}
			if got := <-protos; got != wantProto {
				t.Fatalf("the server saw %s", got)
			}
			samples := 0
			prevT, prevB := 0.0, 0.0
			for _, r := range recs[1 : len(recs)-1] {
				if r["event"] != "sample" || r["flow"] != "f1" {
					t.Fatalf("unexpected record %v", r)
				}
				tt, b := r["t"].(float64), r["bytes"].(float64)
				if tt < prevT || b < prevB {
					t.Fatalf("samples go backwards: %v", r)
				}
				prevT, prevB = tt, b
				samples++
			}
			// 3 MiB at 1 MiB per 100 ms: at least two samples before the end
			if samples < 2 {
				t.Fatalf("only %d samples: %v", samples, recs)
			}
			cs, gp := final["completion_s"].(float64), final["goodput_bps"].(float64)
			if cs <= 0.2 || gp <= 0 || gp > objectSize*8/0.2 {
				t.Fatalf("completion %v s, goodput %v bit/s", cs, gp)
			}
			if proto == "h3" && final["quic_client"] == nil {
				t.Fatalf("no QUIC client stats: %v", final)
			}
			if final["local_addr"] == "" {
				t.Fatalf("no local address: %v", final)
			}
			// the connection's TLS 1.3 secrets, for a capture of the flow to decrypt
			logged, err := os.ReadFile(keys)
			must(t, err)
			for _, label := range []string{"SERVER_HANDSHAKE_TRAFFIC_SECRET", "SERVER_TRAFFIC_SECRET_0"} {
				if !strings.Contains(string(logged), label+" ") {
					t.Fatalf("-keylog wrote no %s: %q", label, logged)
				}
			}
		})
	}
}

func TestDurationAndStartAt(t *testing.T) {
	h2URL, _, ca, _ := servers(t)
	var out bytes.Buffer
	startAt := time.Now().Add(300 * time.Millisecond)
	c := config{Proto: "h2", URL: h2URL, CA: ca, Interval: 100 * time.Millisecond, Duration: 500 * time.Millisecond, StartAt: startAt}
	t0 := time.Now()
	must(t, run(context.Background(), c, &out))
	if took := time.Since(t0); took < 750*time.Millisecond || took > 5*time.Second {
		t.Fatalf("took %v", took)
	}
	recs := records(t, out.Bytes())
	if lag := recs[0]["lag_s"].(float64); lag < 0 || lag > 0.1 {
		t.Fatalf("started %v s late", lag)
	}
	final := recs[len(recs)-1]
	if final["mode"] != "duration" || final["ok"] != true || final["completion_s"].(float64) != 0.5 {
		t.Fatalf("final %v", final)
	}
	// 1 MiB per 100 ms for 0.5 s: about 5 MiB, at most one whole object (3 MiB) plus a part
	if b := final["bytes"].(float64); b < 2<<20 || b > 6<<20 {
		t.Fatalf("%v bytes in 0.5 s", b)
	}
}

// With -every, the k-th request starts k intervals after the start, not when the
// one before it ends: over 1 s at 400 ms, requests at 0, 0.4 and 0.8 s. Each
// object takes about 300 ms here (1 MiB per 100 ms), so back to back would be 4.
func TestEveryStartsARequestPerInterval(t *testing.T) {
	h2URL, _, ca, protos := servers(t)
	var out bytes.Buffer
	c := config{Proto: "h2", URL: h2URL, CA: ca, Interval: 100 * time.Millisecond, Duration: time.Second, Every: 400 * time.Millisecond}
	must(t, run(context.Background(), c, &out))
	recs := records(t, out.Bytes())
	final := recs[len(recs)-1]
	if final["mode"] != "chunks" || final["ok"] != true || final["every_s"].(float64) != 0.4 {
		t.Fatalf("final %v", final)
	}
	if n := final["requests"].(float64); n != 3 || len(protos) != 3 {
		t.Fatalf("%v requests (%d seen by the server), want 3 at 0, 0.4 and 0.8 s", n, len(protos))
	}
	// the samples show the gaps: bytes stand still between a chunk's end and the next start
	still := 0
	for i := 2; i < len(recs)-1; i++ {
		if recs[i]["bytes"] == recs[i-1]["bytes"] {
			still++
		}
	}
	if still == 0 {
		t.Fatalf("no idle sample between chunks: %v", recs)
	}
	var bad bytes.Buffer
	if err := run(context.Background(), config{Proto: "h2", URL: h2URL, CA: ca, Interval: time.Second, Every: time.Second}, &bad); err == nil || !strings.Contains(err.Error(), "-every 1s: applies only with -duration") {
		t.Fatalf("-every without -duration: %v", err)
	}
}

// -upload POSTs -size bytes per request, counted as the transport reads them; the
// server sees every byte; the flags that do not go together are refused.
func TestUploadPostsTheBodies(t *testing.T) {
	cert, ca := testCA(t)
	var got atomic.Int64
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		if r.Method != http.MethodPost || r.ProtoMajor != 2 {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		got.Add(n)
	}))
	ts.EnableHTTP2 = true
	ts.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
	ts.StartTLS()
	defer ts.Close()
	var out bytes.Buffer
	c := config{Proto: "h2", URL: ts.URL + "/sink", CA: ca, Interval: 50 * time.Millisecond,
		Duration: 600 * time.Millisecond, Every: 200 * time.Millisecond, Upload: true, Size: 100_000, TCPCC: "reno"}
	must(t, run(context.Background(), c, &out))
	recs := records(t, out.Bytes())
	final := recs[len(recs)-1]
	if final["ok"] != true || final["direction"] != "up" || final["requests"].(float64) != 3 {
		t.Fatalf("final %v", final)
	}
	if final["bytes"].(float64) != 300_000 || got.Load() != 300_000 {
		t.Fatalf("sent %v, the server got %d", final["bytes"], got.Load())
	}
	for cfg, want := range map[*config]string{
		{Proto: "h2", URL: "x", CA: ca, Interval: time.Second, Upload: true}:         "-upload needs -size > 0",
		{Proto: "h2", URL: "x", CA: ca, Interval: time.Second, Size: 5}:              "-size 5: applies only to -upload",
		{Proto: "h3", URL: "x", CA: ca, Interval: time.Second, TCPCC: "bbr"}:         "-tcp-cc bbr: applies only to -proto h2",
		{Proto: "h2", URL: "x", CA: ca, Interval: time.Second, QuicCC: "cubic"}:      "-cc cubic: applies only to -proto h3",
		{Proto: "h2", URL: ts.URL, CA: ca, Interval: time.Second, TCPCC: "nosuchcc"}: "-tcp-cc nosuchcc: the kernel refused it",
	} {
		if err := run(context.Background(), *cfg, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: got %v, want %q", *cfg, err, want)
		}
	}
}

func TestRefusesHTTP1AndBadFlags(t *testing.T) {
	cert, ca := testCA(t)
	ts := httptest.NewUnstartedServer(handler(make(chan string, 1)))
	ts.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}
	ts.StartTLS()
	defer ts.Close()
	var out bytes.Buffer
	err := run(context.Background(), config{Proto: "h2", URL: ts.URL + "/obj", CA: ca, Interval: time.Second}, &out)
	if err == nil {
		t.Fatalf("an HTTP/1.1-only server was accepted: %s", out.String())
	}
	if err := run(context.Background(), config{Proto: "h1", URL: "x", CA: ca, Interval: time.Second}, &out); err == nil {
		t.Fatal("-proto h1 accepted")
	}
}

// The h3 flags are the transport parameters the client advertises, and its
// final record says both sides' as quic-go's qlog recorded them.
func TestTransportParametersAdvertisedAndRecorded(t *testing.T) {
	_, h3URL, ca, _ := servers(t)
	u, err := neturl.Parse(h3URL)
	must(t, err)
	var out bytes.Buffer
	c := config{Proto: "h3", URL: "https://bulk.test:" + u.Port() + "/obj", Addr: u.Host, CA: ca,
		Interval: 100 * time.Millisecond, TP: transportParams{InitialMaxData: 65536,
			InitialMaxStreamData: 1 << 20, MaxStreamsBidi: -1, MaxStreamsUni: 3,
			MaxIdleTimeout: 9 * time.Second, NoAutotune: true}, tpGiven: true}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	must(t, run(ctx, c, &out))
	recs := records(t, out.Bytes())
	final := recs[len(recs)-1]
	local, _ := final["tp_local"].(map[string]any)
	remote, _ := final["tp_remote"].(map[string]any)
	for k, want := range map[string]float64{"initial_max_data": 65536,
		"initial_max_stream_data_bidi_local": 1 << 20, "initial_max_streams_uni": 3, "max_idle_timeout": 9000} {
		if local[k] != want {
			t.Errorf("tp_local.%s = %v, want %v (%v)", k, local[k], want, local)
		}
	}
	if _, ok := local["initial_max_streams_bidi"]; ok { // 0: quic-go's qlog leaves it out
		t.Errorf("tp_local advertises bidi streams: %v", local)
	}
	if remote["initial_max_data"] != float64(768<<10) { // the test server's quic-go default
		t.Errorf("tp_remote: %v", remote)
	}
	if final["flow_control_autotune"] != false || final["ok"] != true {
		t.Errorf("final record: %v", final)
	}
	if w, _ := final["windows"].(map[string]any); w["max_conn"] != float64(65536) {
		t.Errorf("windows: %v", final["windows"])
	}
	// h2 takes none of them; HTTP/3 needs 3 unidirectional streams
	for _, bad := range []config{
		{Proto: "h2", URL: "x", CA: ca, Interval: time.Second, tpGiven: true},
		{Proto: "h3", URL: "x", CA: ca, Interval: time.Second, TP: transportParams{MaxStreamsUni: 2}},
	} {
		if err := run(context.Background(), bad, &out); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
