package forward

import (
	"encoding/binary"
	"testing"
)

// ipv4Frame is an Ethernet frame with an IPv4 header (TOS tos) and a valid checksum.
func ipv4Frame(tos byte) []byte {
	f := make([]byte, ethHeader+28)
	binary.BigEndian.PutUint16(f[12:14], etherIPv4)
	h := f[ethHeader:]
	h[0], h[1] = 0x45, tos
	binary.BigEndian.PutUint16(h[2:4], 28)
	h[8], h[9] = 64, 17
	copy(h[12:16], []byte{10, 10, 1, 1})
	copy(h[16:20], []byte{10, 10, 1, 2})
	binary.BigEndian.PutUint16(h[10:12], checksum(h[:20]))
	return f
}

// checksum is the full Internet checksum, to check the incremental update against.
func checksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		if i == 10 {
			continue // the checksum field itself
		}
		sum += uint32(binary.BigEndian.Uint16(h[i : i+2]))
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

func TestMarkCEOnIPv4KeepsTheChecksumValid(t *testing.T) {
	for _, tos := range []byte{0x01, 0x02, 0xb9, 0xba, 0xfe} { // ECT(1), ECT(0), with DSCP bits
		f := ipv4Frame(tos)
		if !ecnCapable(f) {
			t.Fatalf("tos %#x: not ECN-capable", tos)
		}
		if !markCE(f) {
			t.Fatalf("tos %#x: not marked", tos)
		}
		h := f[ethHeader:]
		if h[1] != tos|3 {
			t.Errorf("tos %#x: after marking %#x, want %#x", tos, h[1], tos|3)
		}
		if got, want := binary.BigEndian.Uint16(h[10:12]), checksum(h[:20]); got != want {
			t.Errorf("tos %#x: checksum %#x after marking, a full computation gives %#x", tos, got, want)
		}
		if markCE(f) {
			t.Errorf("tos %#x: a CE packet marked again", tos)
		}
	}
	notECT := ipv4Frame(0xb8)
	if ecnCapable(notECT) || markCE(notECT) {
		t.Error("a Not-ECT packet was taken as ECN-capable")
	}
}

func TestMarkCEOnIPv6AndOtherFrames(t *testing.T) {
	f := make([]byte, ethHeader+40)
	binary.BigEndian.PutUint16(f[12:14], etherIPv6)
	f[ethHeader], f[ethHeader+1] = 0x60|0x0b, 0x80|0x20 // traffic class 0xb8 | ECT(0)
	if !ecnCapable(f) || !markCE(f) {
		t.Fatal("an ECT(0) IPv6 packet was not marked")
	}
	if v, _ := ecnField(f); v != ecnCE || f[ethHeader] != 0x6b {
		t.Errorf("IPv6 ECN %d after marking (byte 0 %#x): want CE, version and class kept", v, f[ethHeader])
	}
	arp := make([]byte, 60)
	binary.BigEndian.PutUint16(arp[12:14], 0x0806)
	if ecnCapable(arp) || markCE(arp) || ecnCapable(arp[:20]) {
		t.Error("a frame without an IP header was taken as ECN-capable")
	}
}
