// Package forward moves Ethernet frames between two interfaces over AF_PACKET,
// releasing each one at the time a linkmodel.Pipe gives it, with timerfd
// precision on OS-locked threads.
package forward

import (
	"encoding/binary"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// sockBuf is the kernel buffer forced on every packet socket: large enough that a
// burst at 1 Gbit/s is never dropped before the emulator sees it.
const sockBuf = 32 << 20

func htons(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}

// openPacketSocket binds a raw AF_PACKET socket to one interface, in promiscuous
// mode (frames are addressed to the far end), ignoring the frames it sends itself.
func openPacketSocket(ifname string) (int, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return -1, fmt.Errorf("interface %q: %v", ifname, err)
	}
	proto := htons(unix.ETH_P_ALL)
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(proto))
	if err != nil {
		return -1, fmt.Errorf("AF_PACKET socket: %v (needs CAP_NET_RAW)", err)
	}
	fail := func(what string, err error) (int, error) {
		_ = unix.Close(fd)
		return -1, fmt.Errorf("%s on %q: %v", what, ifname, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifi.Index}); err != nil {
		return fail("bind", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
		return fail("PACKET_IGNORE_OUTGOING", err)
	}
	mreq := unix.PacketMreq{Ifindex: int32(ifi.Index), Type: unix.PACKET_MR_PROMISC}
	if err := unix.SetsockoptPacketMreq(fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, &mreq); err != nil {
		return fail("promiscuous mode", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, sockBuf); err != nil {
		return fail("SO_RCVBUFFORCE", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, sockBuf); err != nil {
		return fail("SO_SNDBUFFORCE", err)
	}
	// Drain what queued before the bind took effect: those frames predate the link.
	buf := make([]byte, 65536)
	for {
		n, _, err := unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT)
		if err != nil || n <= 0 {
			break
		}
	}
	return fd, nil
}

// socketDrops reads and resets the kernel's drop counter of a packet socket.
func socketDrops(fd int) uint64 {
	st, err := unix.GetsockoptTpacketStats(fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	if err != nil {
		return 0
	}
	return uint64(st.Drops)
}

// monotonic is CLOCK_MONOTONIC as a duration: the clock of timerfd and of the model.
func monotonic() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}
