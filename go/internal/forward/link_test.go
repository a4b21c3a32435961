package forward

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"quicbed/internal/linkmodel"
)

func TestHtonsIsNetworkByteOrder(t *testing.T) {
	for _, v := range []uint16{0, 0x0003, 0x0800, 0x88cc, 0xffff} {
		var native, network [2]byte
		binary.NativeEndian.PutUint16(native[:], htons(v))
		binary.BigEndian.PutUint16(network[:], v)
		if native != network {
			t.Errorf("htons(%#04x) is stored as % x, want % x", v, native, network)
		}
	}
}

// needPacketSockets skips a test that opens AF_PACKET sockets without CAP_NET_RAW.
func needPacketSockets(t *testing.T) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if errors.Is(err, unix.EPERM) {
		t.Skip("AF_PACKET sockets need CAP_NET_RAW")
	}
	if err != nil {
		t.Fatal(err)
	}
	_ = unix.Close(fd)
}

func config(server, client string) *linkmodel.Config {
	return &linkmodel.Config{
		Format: linkmodel.ConfigFormat, ServerIf: server, ClientIf: client, Seed: 1,
		Directions: map[string]linkmodel.DirectionConfig{
			"down": {RateBps: 10_000_000, DelayUs: 5000, QueuePackets: 50},
			"up":   {DelayUs: 7000},
		},
	}
}

// openFDs counts this process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	var n int
	buf := make([]byte, 4096)
	fd, err := unix.Open("/proc/self/fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Close(fd) }()
	for {
		m, err := unix.ReadDirent(fd, buf)
		if err != nil {
			t.Fatal(err)
		}
		if m == 0 {
			return n
		}
		_, c, _ := unix.ParseDirent(buf[:m], -1, nil)
		n += c
	}
}

func TestOpenFailsNamingTheProblem(t *testing.T) {
	badDown := config("lo", "lo")
	badDown.Directions["down"] = linkmodel.DirectionConfig{JitterKind: "wobbly"}
	badUp := config("lo", "lo")
	badUp.Directions["up"] = linkmodel.DirectionConfig{Loss: 1}
	for _, tc := range []struct {
		name    string
		cfg     *linkmodel.Config
		sockets bool // the error comes after the first packet socket opened
		want    string
	}{
		{"no server interface", config("quicbed-nosuch0", "lo"), false, `interface "quicbed-nosuch0"`},
		{"no client interface", config("lo", "quicbed-nosuch1"), true, `interface "quicbed-nosuch1"`},
		{"bad down direction", badDown, true, `directions.down.jitter_kind: unknown "wobbly"`},
		{"bad up direction", badUp, true, "directions.up.loss: must be in [0, 1) (got 1)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.sockets {
				needPacketSockets(t)
			}
			before := openFDs(t)
			l, err := Open(tc.cfg)
			if err == nil {
				l.close()
				t.Fatal("Open succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
			if after := openFDs(t); after != before {
				t.Fatalf("Open left %d file descriptors open after failing", after-before)
			}
		})
	}
}

func TestOpenWiresDownFromServerToClient(t *testing.T) {
	needPacketSockets(t)
	// both ends on lo: the link is only opened, never started (it would loop)
	l, err := Open(config("lo", "lo"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	if l.Down.in != l.fdServer || l.Down.out != l.fdClient || l.Up.in != l.fdClient || l.Up.out != l.fdServer {
		t.Fatalf("down reads %d writes %d, up reads %d writes %d; server socket %d, client socket %d",
			l.Down.in, l.Down.out, l.Up.in, l.Up.out, l.fdServer, l.fdClient)
	}
	for _, fd := range []int{l.fdServer, l.fdClient} {
		if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF); err != nil || v < sockBuf {
			t.Errorf("socket %d: SO_RCVBUF %d (%v), want at least %d", fd, v, err, sockBuf)
		}
	}
	st := l.Stats()
	if len(st) != 2 {
		t.Fatalf("stats of %d directions, want down and up", len(st))
	}
	for name, delay := range map[string]string{"down": "delay 5ms", "up": "delay 7ms"} {
		if s, ok := st[name]; !ok || !strings.Contains(s.Pipe, delay) || s.RxPackets != 0 {
			t.Errorf("%s: %+v, want an idle pipe with %s", name, s, delay)
		}
	}
	if !strings.Contains(st["down"].Pipe, "rate 10000000 bit/s") || !strings.Contains(st["up"].Pipe, "rate unlimited") {
		t.Errorf("pipes: down %q, up %q", st["down"].Pipe, st["up"].Pipe)
	}
}
