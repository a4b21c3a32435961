package linkmodel

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// AddressDelays is a stage after the pipe: an extra one-way propagation delay for the
// frames of some server-side IPv4 addresses. A replayed page's origins each have an
// address of their own on the server, and a real page's origins are at different
// distances from the browser; this adds each origin's distance on top of the link's,
// after the shared bottleneck, as a path beyond it would.
//
// A direction matches the server's side of the frame: "down" frames (from the server)
// by their IPv4 source, "up" frames (to the server) by their destination. Frames of
// other addresses, and frames that are not IPv4, get no extra delay (class 0).
type AddressDelays struct {
	matchSource bool
	class       map[[4]byte]int
	delays      []time.Duration // by class; class 0 is none
	names       []string        // by class; class 0 is ""
}

// NewAddressDelays validates a direction's address_delay_us (IPv4 address -> extra
// one-way delay in microseconds, >= 0); every error names the key and value. nil or
// empty: a stage that delays nothing.
func NewAddressDelays(us map[string]int64, matchSource bool) (*AddressDelays, error) {
	a := &AddressDelays{matchSource: matchSource, class: map[[4]byte]int{},
		delays: []time.Duration{0}, names: []string{""}}
	keys := make([]string, 0, len(us))
	for k := range us {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ip, ok := parseIPv4(k)
		if !ok {
			return nil, fmt.Errorf("address_delay_us: %q is not an IPv4 address", k)
		}
		if us[k] < 0 {
			return nil, fmt.Errorf("address_delay_us.%s: must be >= 0 (got %d)", k, us[k])
		}
		a.class[ip] = len(a.delays)
		a.delays = append(a.delays, time.Duration(us[k])*time.Microsecond)
		a.names = append(a.names, k)
	}
	return a, nil
}

// parseIPv4 reads a dotted-quad IPv4 address (four decimal octets, no leading zeros
// beyond a single 0), as Python's ipaddress writes them; the model imports no net.
func parseIPv4(s string) ([4]byte, bool) {
	var ip [4]byte
	parts := strings.Split(s, ".")
	if len(parts) != 4 {
		return ip, false
	}
	for i, p := range parts {
		if p == "" || len(p) > 3 || (len(p) > 1 && p[0] == '0') {
			return ip, false
		}
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 || v > 255 || strings.ContainsAny(p, "+-") {
			return ip, false
		}
		ip[i] = byte(v)
	}
	return ip, true
}

// Classes is the number of classes, none included (1 when no address is delayed).
func (a *AddressDelays) Classes() int { return len(a.delays) }

// Name is a class's address ("" for class 0).
func (a *AddressDelays) Name(class int) string { return a.names[class] }

// Classify returns the class of an Ethernet frame and its extra delay.
func (a *AddressDelays) Classify(frame []byte) (int, time.Duration) {
	if len(a.delays) == 1 || len(frame) < EthernetHeader+20 {
		return 0, 0
	}
	if frame[12] != 0x08 || frame[13] != 0x00 || frame[EthernetHeader]>>4 != 4 {
		return 0, 0
	}
	off := EthernetHeader + 16 // destination
	if a.matchSource {
		off = EthernetHeader + 12
	}
	var key [4]byte
	copy(key[:], frame[off:off+4])
	c, ok := a.class[key]
	if !ok {
		return 0, 0
	}
	return c, a.delays[c]
}

// String describes the stage ("" when it delays nothing).
func (a *AddressDelays) String() string {
	if len(a.delays) == 1 {
		return ""
	}
	parts := make([]string, 0, len(a.delays)-1)
	for c := 1; c < len(a.delays); c++ {
		parts = append(parts, fmt.Sprintf("%s+%v", a.names[c], a.delays[c]))
	}
	side := "dst"
	if a.matchSource {
		side = "src"
	}
	return fmt.Sprintf("address delays by %s: %s", side, strings.Join(parts, " "))
}
