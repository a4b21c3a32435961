// Package forward moves Ethernet frames between two interfaces over AF_PACKET,
// releasing each one at the time a linkmodel.Pipe gives it, with timerfd
// precision on OS-locked threads.
package forward

import (
	"encoding/binary"
	"fmt"
	"net"
	"unsafe"

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

// realtime is CLOCK_REALTIME in ns: the clock of the kernel's receive stamps.
func realtime() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_REALTIME, &ts)
	return ts.Nano()
}

// recvStamped reads one frame into buf and returns its length and the kernel's
// receive stamp (SCM_TIMESTAMPNS, CLOCK_REALTIME ns; 0 when the socket gives none).
// It calls recvmsg without a source address, so a frame costs no allocation
// (unix.Recvmsg builds a Sockaddr for every call).
func recvStamped(fd int, buf, oob []byte) (int, int64, error) {
	iov := unix.Iovec{Base: &buf[0]}
	iov.SetLen(len(buf))
	msg := unix.Msghdr{Iov: &iov, Iovlen: 1, Control: &oob[0]}
	msg.SetControllen(len(oob))
	n, _, errno := unix.Syscall(unix.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), 0)
	if errno != 0 {
		return 0, 0, errno
	}
	return int(n), timestampOf(oob[:msg.Controllen]), nil
}

// timestampOf finds SCM_TIMESTAMPNS among the control messages and returns it in
// ns, or 0.
func timestampOf(oob []byte) int64 {
	hdr := unix.CmsgLen(0)
	for len(oob) >= hdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < hdr || l > len(oob) {
			return 0
		}
		if h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_TIMESTAMPNS && l >= hdr+16 {
			sec := int64(binary.NativeEndian.Uint64(oob[hdr : hdr+8]))
			nsec := int64(binary.NativeEndian.Uint64(oob[hdr+8 : hdr+16]))
			return sec*1_000_000_000 + nsec
		}
		step := unix.CmsgSpace(l - hdr)
		if step > len(oob) {
			return 0
		}
		oob = oob[step:]
	}
	return 0
}
