package udpbuf

import (
	"context"
	"net"
	"testing"

	"github.com/quic-go/quic-go"
)

// quic-go raises a wrapped socket's buffers to 7 MiB; Apply after its init
// leaves what was asked, doubled by the kernel.
func TestApplyWinsOverQuicGo(t *testing.T) {
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = udp.Close() }()
	tr := &quic.Transport{Conn: udp}
	defer func() { _ = tr.Close() }()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, _ = tr.ReadNonQUICPacket(ctx, nil) // quic-go's init: its 7 MiB attempt
	got, err := Apply(udp, 106496, 212992)
	if err != nil {
		t.Fatal(err)
	}
	if got.Rcv != 212992 || got.Snd != 425984 {
		t.Fatalf("buffers %+v, want rcv 212992, snd 425984", got)
	}
	if _, err := Apply(udp, 1<<30-1, 0); err == nil {
		t.Fatal("a request beyond net.core.rmem_max read back as asked")
	}
}
