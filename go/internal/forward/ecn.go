package forward

import "encoding/binary"

// Ethernet types of the frames whose IP header carries an ECN field.
const (
	etherIPv4 = 0x0800
	etherIPv6 = 0x86dd
	ethHeader = 14
)

// ECN field values (RFC 3168): the low two bits of IPv4's TOS byte and of IPv6's
// traffic class.
const (
	ecnNotECT = 0
	ecnCE     = 3
)

// ecnField returns the IP ECN field of an Ethernet frame and whether it has one (an
// IPv4 or IPv6 packet, untagged, long enough to hold its fixed header).
func ecnField(f []byte) (byte, bool) {
	if len(f) < ethHeader+20 {
		return 0, false
	}
	switch binary.BigEndian.Uint16(f[12:14]) {
	case etherIPv4:
		if f[ethHeader]>>4 != 4 {
			return 0, false
		}
		return f[ethHeader+1] & 3, true
	case etherIPv6:
		if len(f) < ethHeader+40 || f[ethHeader]>>4 != 6 {
			return 0, false
		}
		return (f[ethHeader+1] >> 4) & 3, true
	}
	return 0, false
}

// ecnCapable reports whether a frame's packet is ECN-capable: ECT(0), ECT(1) or CE.
func ecnCapable(f []byte) bool {
	v, ok := ecnField(f)
	return ok && v != ecnNotECT
}

// markCE sets a frame's ECN field to CE, updating the IPv4 header checksum
// incrementally (RFC 1624: HC' = ~(~HC + ~m + m')); IPv6 has no header checksum.
// It reports whether the frame was changed (false: not ECN-capable, or already CE).
func markCE(f []byte) bool {
	v, ok := ecnField(f)
	if !ok || v == ecnNotECT || v == ecnCE {
		return false
	}
	if binary.BigEndian.Uint16(f[12:14]) == etherIPv6 {
		f[ethHeader+1] |= ecnCE << 4
		return true
	}
	old := binary.BigEndian.Uint16(f[ethHeader : ethHeader+2])
	f[ethHeader+1] |= ecnCE
	updated := binary.BigEndian.Uint16(f[ethHeader : ethHeader+2])
	hc := binary.BigEndian.Uint16(f[ethHeader+10 : ethHeader+12])
	sum := uint32(^hc) + uint32(^old) + uint32(updated)
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(f[ethHeader+10:ethHeader+12], ^uint16(sum))
	return true
}
