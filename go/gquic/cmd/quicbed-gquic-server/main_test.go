package main

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
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	quic "github.com/lucas-clemente/quic-go"
	"github.com/lucas-clemente/quic-go/h2quic"

	"quicbed/gquic/internal/quicgotest"
)

// bin is the command, built as the quicbed_binaries role builds it: with the
// patched quic-go this test was built with.
var bin string

func TestMain(m *testing.M) {
	modFile, err := quicgotest.ModFile()
	if err != nil {
		fmt.Fprintf(os.Stderr, "the patched quic-go: %v\n", err)
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "quicbed-gquic-test")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "quicbed-gquic-server")
	cmd := exec.Command(quicgotest.GoCmd(), "build", "-trimpath", "-modfile", modFile, "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestBadFlagsExit2 : one line on stderr that names the value, exit status 2.
func TestBadFlagsExit2(t *testing.T) {
	dir := t.TempDir()
	ok := []string{"-docroot", dir, "-cert", "c.pem", "-key", "k.pem"}
	cases := []struct {
		args []string
		want string
	}{
		{append(ok, "-versions", "Q046"), `-versions: "Q046" is not a gQUIC version of quic-go v0.10.2 (Q039, Q043, Q044)`},
		{append(ok, "-versions", "Q039,h3-29"), `"h3-29" is not a gQUIC version`},
		{append(ok, "-versions", "Q043,Q043"), `"Q043" is given twice`},
		{append(ok, "-versions", ""), `-versions: "" is not`},
		{append(ok, "-cc", "bbr"), "flag provided but not defined: -cc"},
		{append(ok, "-versions"), "flag needs an argument: -versions"},
		{append(ok, "extra"), `unexpected argument "extra"`},
		{[]string{"-cert", "c.pem", "-key", "k.pem"}, "-docroot is required"},
		{[]string{"-docroot", "/nonexistent", "-cert", "c.pem", "-key", "k.pem"}, `-docroot "/nonexistent" is not a readable directory`},
		{[]string{"-docroot", dir}, "-cert and -key are required"},
		{append(ok, "-log", "/nonexistent/dir/x.jsonl"), "-log /nonexistent/dir/x.jsonl:"},
	}
	for _, c := range cases {
		var stderr bytes.Buffer
		cmd := exec.Command(bin, c.args...)
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || len(lines) != 1 ||
			!strings.HasPrefix(lines[0], "quicbed-gquic-server: ") || !strings.Contains(lines[0], c.want) {
			t.Errorf("%v: %v, stderr %q, want exit 2 and %q", c.args, err, stderr.String(), c.want)
		}
	}
}

// TestCommand runs the built server: a Q044 fetch, SIGTERM, and the log, whose
// start record names the quic-go module compiled in.
func TestCommand(t *testing.T) {
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "index.html"), []byte("<html>gquic</html>"), 0o644))
	certPath, keyPath, roots := pki(t)
	logPath := filepath.Join(t.TempDir(), "gquic.jsonl")
	must(t, os.WriteFile(logPath, []byte(`{"event":"earlier run"}`+"\n"), 0o644)) // appended to
	port := freeUDPPort(t)
	cmd := exec.Command(bin, "-addr", "127.0.0.1:"+port, "-docroot", dir, "-cert", certPath, "-key", keyPath,
		"-log", logPath, "-versions", "Q039,Q043,Q044")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	must(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill() }()
	waitLog(t, logPath, "start", 1)

	rt := &h2quic.RoundTripper{
		TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "localhost"},
		QuicConfig:      &quic.Config{Versions: []quic.VersionNumber{quic.VersionGQUIC44}},
	}
	resp, err := rt.RoundTrip(mustGet(t, "https://127.0.0.1:"+port+"/"))
	must(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "<html>gquic</html>" || resp.Header.Get("Cache-Control") != "no-store, no-cache" {
		t.Fatalf("GET /: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	must(t, rt.Close())
	waitLog(t, logPath, "conn_close", 1)
	must(t, cmd.Process.Signal(syscall.SIGTERM))
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v, stderr %q", err, stderr.String())
	}
	lines := readLog(t, logPath)
	var evs []string
	for _, l := range lines {
		evs = append(evs, l["event"].(string))
	}
	if strings.Join(evs, " ") != "earlier run start conn request conn_close stop" {
		t.Fatalf("events: %v", evs)
	}
	start, conn, req := lines[1], lines[2], lines[3]
	// The build information says quic-go was replaced by the patched copy, and
	// the patch compiled in is the one this test was built with.
	if start["quic_go_version"] != "v0.10.2" || start["quic_go_module"] != "github.com/lucas-clemente/quic-go" ||
		start["quic_go_replace"] != "../../build/quic-go-v0.10.2-patched/quic-go-v0.10.2 (devel)" ||
		start["quic_go_patch"] != quic.QuicbedPatch || start["addr"] != "127.0.0.1:"+port {
		t.Errorf("start: %v", start)
	}
	if !strings.HasPrefix(quic.QuicbedPatch, "quic-go-v0.10.2-keep-ciphertext sha256:") {
		t.Errorf("quic.QuicbedPatch %q", quic.QuicbedPatch)
	}
	if conn["quic_version"] != "Q044" || conn["used_0rtt"] != false || req["conn_id"] != conn["conn_id"] || req["path"] != "/" {
		t.Errorf("conn %v, request %v", conn, req)
	}
	raw, _ := os.ReadFile(logPath)
	t.Logf("log:\n%s", raw)
}

func freeUDPPort(t *testing.T) string {
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	must(t, err)
	defer func() { _ = c.Close() }()
	_, port, _ := net.SplitHostPort(c.LocalAddr().String())
	return port
}

func mustGet(t *testing.T, url string) *http.Request {
	req, err := http.NewRequest("GET", url, nil)
	must(t, err)
	return req
}

func readLog(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	must(t, err)
	defer func() { _ = f.Close() }()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		must(t, json.Unmarshal(sc.Bytes(), &m))
		out = append(out, m)
	}
	return out
}

func waitLog(t *testing.T, path, event string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		got := 0
		if _, err := os.Stat(path); err == nil {
			for _, l := range readLog(t, path) {
				if l["event"] == event {
					got++
				}
			}
		}
		if got >= n {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no %d %q lines in %s", n, event, path)
}

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
