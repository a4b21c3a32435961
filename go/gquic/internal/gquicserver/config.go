// Package gquicserver is quicbed's Google QUIC (gQUIC) HTTP server: the document
// tree of the other arms, served with the same handler (package docroot) over
// HTTP/2-over-gQUIC by quic-go v0.10.2's h2quic, for Chromium's gQUIC versions
// Q039, Q043 and Q044. It logs the same JSON-lines schema as quicbed's HTTP/3
// servers. See go/gquic/README.md.
package gquicserver

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"

	quic "github.com/lucas-clemente/quic-go"
)

// Versions are the gQUIC versions quic-go v0.10.2 speaks, by their wire names.
var Versions = map[string]quic.VersionNumber{
	"Q039": quic.VersionGQUIC39,
	"Q043": quic.VersionGQUIC43,
	"Q044": quic.VersionGQUIC44,
}

// DefaultVersions is what the server offers without -versions.
const DefaultVersions = "Q039"

// WireName is a gQUIC version as it is on the wire: four ASCII bytes ("Q039").
// Anything else is shown in hex.
func WireName(v quic.VersionNumber) string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(v))
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			return fmt.Sprintf("%#08x", uint32(v))
		}
	}
	return string(b[:])
}

// ParseVersions reads a -versions value: a comma list of Q039, Q043 and Q044,
// each at most once, in the order given (the order of the server's version list).
func ParseVersions(s string) ([]quic.VersionNumber, error) {
	var out []quic.VersionNumber
	seen := map[string]bool{}
	for _, name := range strings.Split(s, ",") {
		v, ok := Versions[name]
		switch {
		case !ok:
			return nil, fmt.Errorf("-versions: %q is not a gQUIC version of quic-go v0.10.2 (Q039, Q043, Q044)", name)
		case seen[name]:
			return nil, fmt.Errorf("-versions: %q is given twice", name)
		}
		seen[name] = true
		out = append(out, v)
	}
	return out, nil
}

// Config is everything the server is started with; it is logged at start.
type Config struct {
	// Addr is the UDP address to listen on (default ":443").
	Addr string `json:"addr"`
	// Docroot is the document tree to serve (required).
	Docroot string `json:"docroot"`
	// Cert (the leaf first, then its CA chain) and Key are PEM files (required;
	// there is no fallback certificate).
	Cert string `json:"cert"`
	Key  string `json:"key"`
	// Versions are the gQUIC versions offered, as -versions gives them
	// ("Q039,Q043"; default DefaultVersions).
	Versions string `json:"versions"`
}

// Validate names the first bad setting the way the command line spells it.
func (c Config) Validate() error {
	switch {
	case c.Docroot == "":
		return errors.New("-docroot is required")
	case c.Cert == "" || c.Key == "":
		return errors.New("-cert and -key are required (there is no fallback certificate)")
	}
	if _, err := ParseVersions(c.Versions); err != nil {
		return err
	}
	if st, err := os.Stat(c.Docroot); err != nil || !st.IsDir() {
		return fmt.Errorf("-docroot %q is not a readable directory", c.Docroot)
	}
	return nil
}
