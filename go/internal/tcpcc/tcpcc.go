// Package tcpcc sets a socket's kernel congestion control (TCP_CONGESTION) before
// it listens or connects: quicbed-h3server's TCP listener (a background download
// runs its own CC beside Apache's connections, which take the namespace's) and
// quicbed-bulk's h2 socket (a background upload's sends). Linux gives a listener's
// choice to every connection it accepts.
package tcpcc

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// Refused is the kernel's refusal of a name (both programs take it as -tcp-cc).
type Refused struct {
	Name string
	Err  error
}

func (r *Refused) Error() string {
	return fmt.Sprintf("-tcp-cc %s: the kernel refused it (%v); see net.ipv4.tcp_available_congestion_control", r.Name, r.Err)
}

// Control is a net.ListenConfig or net.Dialer Control that sets name on the
// socket; "" changes nothing. A name the kernel lacks fails the listen or dial
// with a *Refused inside its error.
func Control(name string) func(string, string, syscall.RawConn) error {
	return func(_, _ string, raw syscall.RawConn) error {
		if name == "" {
			return nil
		}
		var setErr error
		if err := raw.Control(func(fd uintptr) {
			setErr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, name)
		}); err != nil {
			return err
		}
		if setErr != nil {
			return &Refused{name, setErr}
		}
		return nil
	}
}

// Of is the congestion control the kernel holds for a TCP listener or connection.
func Of(conn syscall.Conn) (string, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return "", err
	}
	var name string
	var getErr error
	if err := raw.Control(func(fd uintptr) {
		name, getErr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	}); err != nil {
		return "", err
	}
	return name, getErr
}
