package replay

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"quicbed/internal/replay/replaytest"
)

// selfSigned writes a self-signed certificate for host into dir as
// host.pem and host.key.
func selfSigned(t *testing.T, dir, host string) CertFiles {
	t.Helper()
	cert, key, _ := replaytest.SelfSigned(t, dir, host)
	return CertFiles{Cert: cert, Key: key}
}

func writeCerts(t *testing.T, dir string, m map[string]CertFiles) string {
	t.Helper()
	data, err := json.Marshal(m)
	must(t, err)
	p := filepath.Join(dir, "certs.json")
	must(t, os.WriteFile(p, data, 0o644))
	return p
}

func TestLoadCerts(t *testing.T) {
	a := loadPage(t)
	dir := t.TempDir()
	www, cdn := selfSigned(t, dir, "www.a.example"), selfSigned(t, dir, "cdn.b.example")
	// relative paths are taken from the map's folder
	rel := CertFiles{Cert: "cdn.b.example.pem", Key: "cdn.b.example.key"}
	c, err := LoadCerts(writeCerts(t, dir, map[string]CertFiles{"www.a.example": www, "cdn.b.example": rel}), a)
	must(t, err)
	for host, f := range map[string]CertFiles{"www.a.example": www, "cdn.b.example": cdn} {
		got := c.For(strings.ToUpper(host))
		if got == nil || got.Leaf.Subject.CommonName != host || c.Files[host] != f {
			t.Errorf("%s: %v, files %v", host, got, c.Files[host])
		}
	}
	if c.For("") != nil || c.For("other.example") != nil {
		t.Error("a certificate for a host the archive does not have")
	}

	cases := map[string]struct {
		m    map[string]CertFiles
		want string
	}{
		"missing host": {map[string]CertFiles{"www.a.example": www},
			"no certificate for cdn.b.example, an origin host of archive test-page"},
		"foreign host": {map[string]CertFiles{"www.a.example": www, "cdn.b.example": cdn, "x.example": cdn},
			"x.example is no origin host of archive test-page"},
		"wrong name": {map[string]CertFiles{"www.a.example": cdn, "cdn.b.example": cdn},
			"www.a.example: " + cdn.Cert + ": x509: certificate is valid for cdn.b.example, not www.a.example"},
		"no key": {map[string]CertFiles{"www.a.example": {Cert: www.Cert}, "cdn.b.example": cdn},
			`www.a.example: both "cert" and "key" are required`},
		"key of another": {map[string]CertFiles{"www.a.example": {Cert: www.Cert, Key: cdn.Key}, "cdn.b.example": cdn},
			"www.a.example: tls: private key does not match public key"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			p := writeCerts(t, t.TempDir(), c.m)
			_, err := LoadCerts(p, a)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "replay certificates "+p) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
	p := filepath.Join(t.TempDir(), "certs.json")
	must(t, os.WriteFile(p, []byte(`{"www.a.example": {"cert": "a", "key": "b", "chain": "c"}}`), 0o644))
	if _, err := LoadCerts(p, a); err == nil || !strings.Contains(err.Error(), `unknown field "chain"`) {
		t.Fatalf("unknown field: %v", err)
	}
}
