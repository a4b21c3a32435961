package h3server

import (
	"crypto/tls"
	"fmt"
	"slices"
	"strings"
)

// Key-exchange groups (-groups). quicbed pins the same TLS 1.3 key-exchange
// group on every arm of a cell, so that HTTP/2 over TCP and HTTP/3 over QUIC
// run the same handshake. Left to itself, a server whose other side also
// supports the hybrid post-quantum X25519MLKEM768 (Go's crypto/tls does by
// default, on both sides) runs it, and its key shares (1216 bytes from the
// client, 1120 from the server, against X25519's 32) make the handshake
// flights larger: two arms that negotiated different groups would partly
// measure the groups. The conn record's tls_group says which group each
// connection ran.
//
// crypto/tls takes Config.CurvePreferences as a set, not an order (its own doc:
// "The order of the list is ignored"): the server picks among the groups
// allowed, preferring one the client sent a key share for, then a
// post-quantum one, then crypto/tls's internal order. Naming a single group
// is therefore the way to pin one; a longer list only narrows the choice.

// group is a name -groups accepts (lower case) and its CurveID.
type group struct {
	name string
	id   tls.CurveID
}

// groupNames are the groups -groups accepts, in the order the usage and error
// messages list them.
var groupNames = []group{
	{"x25519", tls.X25519},
	{"secp256r1", tls.CurveP256},
	{"x25519mlkem768", tls.X25519MLKEM768},
}

// GroupNames lists the names ParseGroups accepts, comma-separated, for
// usage and error messages.
func GroupNames() string {
	names := make([]string, len(groupNames))
	for i, g := range groupNames {
		names[i] = g.name
	}
	return strings.Join(names, ", ")
}

// ParseGroups parses -groups: a comma-separated list of TLS 1.3 key-exchange
// group names (case-insensitive; spaces around a name are ignored), x25519,
// secp256r1 or x25519mlkem768, into the CurveIDs for tls.Config's
// CurvePreferences, in the order given (which crypto/tls ignores: above).
// "" is nil: crypto/tls's own default groups. An unknown or empty name is an
// error that names it and the accepted names, so that a cell never runs a
// group it did not ask for.
func ParseGroups(s string) ([]tls.CurveID, error) {
	if s == "" {
		return nil, nil
	}
	var ids []tls.CurveID
	for i, elem := range strings.Split(s, ",") {
		name := strings.ToLower(strings.TrimSpace(elem))
		if name == "" {
			return nil, fmt.Errorf("-groups %q: group %d is empty (the groups: %s)", s, i+1, GroupNames())
		}
		j := slices.IndexFunc(groupNames, func(g group) bool { return g.name == name })
		if j < 0 {
			return nil, fmt.Errorf("-groups %q: unknown group %q (the groups: %s)", s, strings.TrimSpace(elem), GroupNames())
		}
		ids = append(ids, groupNames[j].id)
	}
	return ids, nil
}

// validGroups names the first group of ids that -groups could not have given
// (a Config built in code rather than by ParseGroups).
func validGroups(ids []tls.CurveID) error {
	for _, id := range ids {
		if !slices.ContainsFunc(groupNames, func(g group) bool { return g.id == id }) {
			return fmt.Errorf("-groups: group %d (%v) is not one of %s", uint16(id), id, GroupNames())
		}
	}
	return nil
}
