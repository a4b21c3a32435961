package replay

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// CertFiles is one origin host's certificate chain and key, PEM files. A
// relative path is taken from the folder of the file that names it.
type CertFiles struct {
	Cert string `json:"cert"`
	Key  string `json:"key"`
}

// Certs are the certificates of an archive's hosts, by host name (lower case),
// the one the TLS handshake picks by SNI.
type Certs struct {
	byHost map[string]*tls.Certificate
	// Files are the files each host's certificate was loaded from, a relative
	// path joined to the map's folder.
	Files map[string]CertFiles
}

// LoadCerts reads a certificate map (a JSON object: each origin host of the
// archive -> {"cert": PEM, "key": PEM}) and loads every pair. It refuses a map
// that lacks a host of the archive or names a host the archive does not have,
// and a certificate whose leaf is not valid for its host name.
func LoadCerts(file string, a *Archive) (*Certs, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("replay certificates %s: %v", file, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var m map[string]CertFiles
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("replay certificates %s: not a JSON object of host -> {\"cert\": PEM file, \"key\": PEM file}: %v", file, err)
	}
	hosts := map[string]bool{}
	for _, h := range a.Hosts() {
		hosts[h] = true
		if _, ok := m[h]; !ok {
			return nil, fmt.Errorf("replay certificates %s: no certificate for %s, an origin host of archive %s", file, h, a.Name)
		}
	}
	c := &Certs{byHost: map[string]*tls.Certificate{}, Files: map[string]CertFiles{}}
	base := filepath.Dir(file)
	for host, f := range m {
		if !hosts[host] {
			return nil, fmt.Errorf("replay certificates %s: %s is no origin host of archive %s", file, host, a.Name)
		}
		if f.Cert == "" || f.Key == "" {
			return nil, fmt.Errorf("replay certificates %s: %s: both \"cert\" and \"key\" are required", file, host)
		}
		abs := func(p string) string {
			if filepath.IsAbs(p) {
				return p
			}
			return filepath.Join(base, p)
		}
		f = CertFiles{Cert: abs(f.Cert), Key: abs(f.Key)}
		pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("replay certificates %s: %s: %v", file, host, err)
		}
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			return nil, fmt.Errorf("replay certificates %s: %s: %v", file, host, err)
		}
		if err := leaf.VerifyHostname(host); err != nil {
			return nil, fmt.Errorf("replay certificates %s: %s: %s: %v", file, host, f.Cert, err)
		}
		pair.Leaf = leaf
		c.byHost[host] = &pair
		c.Files[host] = f
	}
	return c, nil
}

// For is the certificate for a server name as the client sent it (SNI), nil
// when the archive has no such host (or no name was sent).
func (c *Certs) For(serverName string) *tls.Certificate {
	return c.byHost[strings.ToLower(serverName)]
}
