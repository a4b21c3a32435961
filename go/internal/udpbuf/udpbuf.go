// Package udpbuf sets a UDP socket's receive and send buffers (SO_RCVBUF,
// SO_SNDBUF) to what quicbed asks and reads back what the kernel made of it.
//
// quic-go raises both buffers of every socket it wraps to 7 MiB (its
// sys_conn_buffers*.go: SetReadBuffer, then SO_RCVBUFFORCE when that falls
// short, as root it never does), unless they are at least that already. So a
// smaller size set before quic-go sees the socket would be overridden: Apply
// is called after quic-go has wrapped the socket (quic.Transport's init), and
// its plain SO_RCVBUF/SO_SNDBUF are capped by net.core.rmem_max/wmem_max like
// any application's. Linux doubles the value asked for (bookkeeping overhead,
// socket(7)): a request of B bytes reads back as 2*B.
package udpbuf

import (
	"fmt"
	"net"
	"syscall"
)

// Sizes is what the kernel holds for one socket, in bytes, as getsockopt
// returns it (the doubled value).
type Sizes struct {
	Rcv int `json:"udp_rcvbuf"`
	Snd int `json:"udp_sndbuf"`
}

// Read returns the socket's buffers as the kernel holds them.
func Read(c *net.UDPConn) (Sizes, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return Sizes{}, err
	}
	var s Sizes
	var rerr, serr error
	if err := raw.Control(func(fd uintptr) {
		s.Rcv, rerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF)
		s.Snd, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF)
	}); err != nil {
		return Sizes{}, err
	}
	if rerr != nil {
		return Sizes{}, rerr
	}
	return s, serr
}

// Apply sets the receive and send buffers asked for (0: leave that one as it
// is) and returns what the kernel then holds. A value the kernel capped (at
// net.core.rmem_max or wmem_max) is an error naming both numbers.
func Apply(c *net.UDPConn, rcv, snd int) (Sizes, error) {
	if rcv > 0 {
		if err := c.SetReadBuffer(rcv); err != nil {
			return Sizes{}, fmt.Errorf("SO_RCVBUF %d: %v", rcv, err)
		}
	}
	if snd > 0 {
		if err := c.SetWriteBuffer(snd); err != nil {
			return Sizes{}, fmt.Errorf("SO_SNDBUF %d: %v", snd, err)
		}
	}
	got, err := Read(c)
	if err != nil {
		return got, err
	}
	if rcv > 0 && got.Rcv != 2*rcv {
		return got, fmt.Errorf("SO_RCVBUF %d reads back as %d, not %d (net.core.rmem_max too small?)", rcv, got.Rcv, 2*rcv)
	}
	if snd > 0 && got.Snd != 2*snd {
		return got, fmt.Errorf("SO_SNDBUF %d reads back as %d, not %d (net.core.wmem_max too small?)", snd, got.Snd, 2*snd)
	}
	return got, nil
}
