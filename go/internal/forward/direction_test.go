package forward

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"quicbed/internal/linkmodel"
)

// A Direction reads from and writes to any file descriptors, so these tests run it
// between UDP sockets on 127.0.0.1 (the emulator uses AF_PACKET sockets, which
// need root and two interfaces: link_test.go). Each datagram stands for a frame.
//
// A Direction has no Stop (quicbed-linkem runs until its process exits), so the
// two goroutines of a started Direction, and the sockets it reads and writes,
// live until the test binary exits: they are never closed, so that a descriptor
// number cannot be reused under a loop that still reads it.

// mustSocket is a UDP socket bound to 127.0.0.1 on a free port, with a large
// receive buffer (a burst must not be dropped before the Direction reads it).
func mustSocket(t *testing.T) (int, *unix.SockaddrInet4) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	// SO_RCVBUFFORCE needs CAP_NET_ADMIN; without it the buffer is capped at rmem_max.
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fd, sa.(*unix.SockaddrInet4)
}

// testLink is one started Direction: datagrams sent with send enter its input
// socket; the ones it forwards arrive on rx, which records the kernel's receive
// timestamp (taken on loopback while the Direction's write runs).
type testLink struct {
	t     *testing.T
	d     *Direction
	tx    int // sends to the Direction's input
	rx    int // receives what it forwards
	inAdr *unix.SockaddrInet4
}

func startLink(t *testing.T, p linkmodel.Params, seed int64) *testLink {
	t.Helper()
	l := newTestLink(t, p, seed)
	l.d.Start()
	return l
}

// newTestLink is startLink's link before its Direction starts: what is sent to it
// waits in the input socket until l.d.Start().
func newTestLink(t *testing.T, p linkmodel.Params, seed int64) *testLink {
	t.Helper()
	return newTestLinkWith(t, p, seed, nil)
}

// newTestLinkWith is newTestLink with an address-delay stage after the pipe.
func newTestLinkWith(t *testing.T, p linkmodel.Params, seed int64, addr *linkmodel.AddressDelays) *testLink {
	t.Helper()
	pipe, err := linkmodel.NewPipe(p, seed, "down")
	if err != nil {
		t.Fatal(err)
	}
	in, inAdr := mustSocket(t)
	rx, rxAdr := mustSocket(t)
	out, _ := mustSocket(t)
	if err := unix.Connect(out, rxAdr); err != nil {
		t.Fatal(err)
	}
	tx, _ := mustSocket(t)
	t.Cleanup(func() { _ = unix.Close(tx); _ = unix.Close(rx) })
	if err := unix.SetsockoptInt(rx, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		t.Fatal(err)
	}
	tv := unix.NsecToTimeval(int64(5 * time.Second))
	if err := unix.SetsockoptTimeval(rx, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	d, err := NewDirection("down", in, out, pipe, addr)
	if err != nil {
		t.Fatal(err)
	}
	return &testLink{t: t, d: d, tx: tx, rx: rx, inAdr: inAdr}
}

// payload is datagram id of n bytes: the id, then a pattern that depends on it, so
// that a frame mixed up with another one (a reused buffer) is seen.
func payload(id uint32, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(uint32(i)*7 + id*13)
	}
	if n >= 4 {
		binary.BigEndian.PutUint32(b, id)
	}
	return b
}

func (l *testLink) send(id uint32, n int) {
	l.t.Helper()
	if err := unix.Sendto(l.tx, payload(id, n), 0, l.inAdr); err != nil {
		l.t.Fatalf("send %d: %v", id, err)
	}
}

type received struct {
	data []byte
	at   time.Time // kernel receive timestamp (CLOCK_REALTIME)
}

// recv reads one forwarded datagram; it fails the test after 5 s without one.
func (l *testLink) recv() received {
	l.t.Helper()
	buf := make([]byte, maxFrame)
	oob := make([]byte, 128)
	// The Go runtime's preemption signal interrupts a blocking recvmsg (EINTR): read
	// again, as the forwarder's own loop does.
	n, oobn, _, _, err := unix.Recvmsg(l.rx, buf, oob, 0)
	for err == unix.EINTR {
		n, oobn, _, _, err = unix.Recvmsg(l.rx, buf, oob, 0)
	}
	if err != nil {
		l.t.Fatalf("no forwarded datagram within 5 s: %v", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		l.t.Fatal(err)
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS {
			sec := int64(binary.NativeEndian.Uint64(m.Data[0:8]))
			nsec := int64(binary.NativeEndian.Uint64(m.Data[8:16]))
			return received{data: buf[:n], at: time.Unix(sec, nsec)}
		}
	}
	l.t.Fatal("no SCM_TIMESTAMPNS on the received datagram")
	return received{}
}

// nothingMore checks that no further datagram arrives within wait.
func (l *testLink) nothingMore(wait time.Duration) {
	l.t.Helper()
	buf := make([]byte, maxFrame)
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		n, _, err := unix.Recvfrom(l.rx, buf, unix.MSG_DONTWAIT)
		if err == nil {
			l.t.Fatalf("unexpected datagram of %d bytes (id %d)", n, binary.BigEndian.Uint32(buf))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stats waits until the counters account for every datagram received (a frame's
// Tx counter is added after the write that delivered it) and returns them.
func (l *testLink) stats(rx uint64) Stats {
	l.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s := l.d.Snapshot(0)
		done := s.LossDrops+s.QueueDrops+s.TxPackets+s.SendErrors == s.RxPackets
		if done && s.RxPackets == rx {
			return s
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("counters never settled at %d received frames: %+v", rx, s)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestForwardsFramesIntactAndInOrder(t *testing.T) {
	mixed := make([]int, 300)
	for i := range mixed {
		mixed[i] = []int{64, 1514, 3000}[i%3]
	}
	for _, tc := range []struct {
		name  string
		sizes []int
	}{
		{"one byte", []int{1}},
		{"full-size frames", []int{1514, 1514, 1514}},
		// up to 2048 bytes a frame is copied into a pooled buffer, above into its own
		{"around the pooled buffer size", []int{2047, 2048, 2049, 2048, 2047}},
		{"jumbo and maximal datagrams", []int{9000, 65000, 60}},
		{"many mixed, buffers reused", mixed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := startLink(t, linkmodel.Params{}, 1)
			var bytesSent uint64
			for i, n := range tc.sizes {
				l.send(uint32(i), n)
				bytesSent += uint64(n)
			}
			for i, n := range tc.sizes {
				got := l.recv().data
				if want := payload(uint32(i), n); !bytes.Equal(got, want) {
					t.Fatalf("datagram %d: got %d bytes %x..., want %d bytes %x...",
						i, len(got), got[:min(8, len(got))], n, want[:min(8, n)])
				}
			}
			l.nothingMore(20 * time.Millisecond)
			s := l.stats(uint64(len(tc.sizes)))
			want := Stats{RxPackets: uint64(len(tc.sizes)), RxBytes: bytesSent,
				TxPackets: uint64(len(tc.sizes)), TxBytes: bytesSent}
			got := Stats{RxPackets: s.RxPackets, RxBytes: s.RxBytes, TxPackets: s.TxPackets, TxBytes: s.TxBytes,
				LossDrops: s.LossDrops, QueueDrops: s.QueueDrops, SendErrors: s.SendErrors, Reordered: s.Reordered}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("counters: got %+v, want %+v", got, want)
			}
		})
	}
}

func TestReleasesNoFrameBeforeItsTime(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    linkmodel.Params
		n    int // frames of size bytes sent back to back
		size int
	}{
		{"delay only", linkmodel.Params{Delay: 30 * time.Millisecond}, 5, 1000},
		// 1250 bytes at 1 Mbit/s serialize in 10 ms: frame i leaves (i+1)*10 ms late
		{"rate only", linkmodel.Params{RateBps: 1_000_000, QueuePackets: 100}, 6, 1250},
		{"rate and delay", linkmodel.Params{RateBps: 1_000_000, QueuePackets: 100, Delay: 20 * time.Millisecond}, 4, 1250},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := startLink(t, tc.p, 1)
			serialization := time.Duration(0)
			if tc.p.RateBps > 0 {
				serialization = time.Duration(int64(tc.size) * 8 * int64(time.Second) / int64(tc.p.RateBps))
			}
			sent := time.Now()
			for i := range tc.n {
				l.send(uint32(i), tc.size)
			}
			for i := range tc.n {
				r := l.recv()
				if id := binary.BigEndian.Uint32(r.data); id != uint32(i) {
					t.Fatalf("datagram %d arrived as number %d", id, i)
				}
				// the Direction reads frame i after it was sent, and the model
				// releases it no earlier than its serialization and the delay
				earliest := sent.Add(time.Duration(i+1)*serialization + tc.p.Delay)
				if r.at.Before(earliest) {
					t.Errorf("datagram %d arrived %v early", i, earliest.Sub(r.at))
				}
				// a frame left waiting for a later wake-up would be seconds late
				if late := r.at.Sub(earliest); late > time.Second {
					t.Errorf("datagram %d arrived %v after its earliest time", i, late)
				}
			}
			s := l.stats(uint64(tc.n))
			if s.TxPackets != uint64(tc.n) {
				t.Fatalf("tx_packets %d, want %d", s.TxPackets, tc.n)
			}
			if s.LateUsP50 > s.LateUsP99 || s.LateUsP99 > s.LateUsMax || s.LateUsP50 < 0 {
				t.Fatalf("lateness percentiles out of order: p50 %d p99 %d max %d us",
					s.LateUsP50, s.LateUsP99, s.LateUsMax)
			}
		})
	}
}

func TestLossDropsExactlyTheModelsFrames(t *testing.T) {
	for _, tc := range []struct {
		loss float64
		seed int64
	}{
		{0.1, 1},
		{0.5, 7},
		{0.9, 3},
	} {
		t.Run(fmt.Sprintf("loss %g seed %d", tc.loss, tc.seed), func(t *testing.T) {
			const frames = 200
			p := linkmodel.Params{Loss: tc.loss}
			// without a rate, the loss draws do not depend on time: the same pipe
			// on any clock drops the same frames
			model, err := linkmodel.NewPipe(p, tc.seed, "down")
			if err != nil {
				t.Fatal(err)
			}
			var want []uint32
			for i := range frames {
				if _, v := model.Offer(0, 100, false); v == linkmodel.Forward {
					want = append(want, uint32(i))
				}
			}
			l := startLink(t, p, tc.seed)
			for i := range frames {
				l.send(uint32(i), 100)
			}
			var got []uint32
			for range want {
				got = append(got, binary.BigEndian.Uint32(l.recv().data))
			}
			l.nothingMore(20 * time.Millisecond)
			if !slices.Equal(got, want) {
				t.Fatalf("loss %g seed %d: forwarded %v, want %v", tc.loss, tc.seed, got, want)
			}
			s := l.stats(frames)
			if s.LossDrops != uint64(frames-len(want)) || s.QueueDrops != 0 {
				t.Fatalf("loss_drops %d queue_drops %d, want %d and 0", s.LossDrops, s.QueueDrops, frames-len(want))
			}
		})
	}
}

func TestFullQueueDropsTheTail(t *testing.T) {
	// 1000-byte frames at 50 kbit/s serialize in 160 ms, so a burst of ten reaches
	// the pipe while the first is still in the queue: the queue keeps what fits.
	const rate = 50_000
	for _, tc := range []struct {
		name      string
		p         linkmodel.Params
		kept      int
		maxQBytes int64
	}{
		{"two packets", linkmodel.Params{RateBps: rate, QueuePackets: 2}, 2, 2000},
		{"2500 bytes", linkmodel.Params{RateBps: rate, QueueBytes: 2500}, 2, 2000},
		// 1972 bytes hold two frames counted without their Ethernet header, one with
		{"1972 ip bytes", linkmodel.Params{RateBps: rate, QueueBytes: 1972, CountIP: true}, 2, 1972},
		{"1972 ethernet bytes", linkmodel.Params{RateBps: rate, QueueBytes: 1972}, 1, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const burst = 10
			l := startLink(t, tc.p, 1)
			for i := range burst {
				l.send(uint32(i), 1000)
			}
			for i := range tc.kept {
				if id := binary.BigEndian.Uint32(l.recv().data); id != uint32(i) {
					t.Fatalf("got datagram %d, want %d (the queue keeps the head of the burst)", id, i)
				}
			}
			l.nothingMore(50 * time.Millisecond)
			s := l.stats(burst)
			if s.TxPackets != uint64(tc.kept) || s.QueueDrops != uint64(burst-tc.kept) {
				t.Fatalf("tx_packets %d queue_drops %d, want %d and %d", s.TxPackets, s.QueueDrops, tc.kept, burst-tc.kept)
			}
			if s.QueuePackets != 0 || s.QueueBytes != 0 {
				t.Fatalf("the queue still holds %d packets %d bytes after the burst left", s.QueuePackets, s.QueueBytes)
			}
			if s.MaxQueuePackets != int64(tc.kept) || s.MaxQueueBytes != tc.maxQBytes {
				t.Fatalf("max queue %d packets %d bytes, want %d and %d",
					s.MaxQueuePackets, s.MaxQueueBytes, tc.kept, tc.maxQBytes)
			}
		})
	}
}

func TestReorderedCountsFramesThatOvertook(t *testing.T) {
	for _, tc := range []struct {
		name      string
		p         linkmodel.Params
		reordered bool
	}{
		{"reorder jitter overtakes", linkmodel.Params{Delay: 20 * time.Millisecond, Jitter: 15 * time.Millisecond,
			Kind: linkmodel.JitterReorder}, true},
		{"smooth jitter keeps the order", linkmodel.Params{Delay: 20 * time.Millisecond, Jitter: 15 * time.Millisecond,
			Kind: linkmodel.JitterSmooth, JitterInterval: time.Millisecond}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const frames = 100
			l := startLink(t, tc.p, 5)
			for i := range frames {
				l.send(uint32(i), 200)
			}
			// loopback delivers in the order the Direction writes
			var overtaken uint64
			seen := make(map[uint32]bool)
			maxID := int64(-1)
			for range frames {
				id := binary.BigEndian.Uint32(l.recv().data)
				if seen[id] {
					t.Fatalf("datagram %d forwarded twice", id)
				}
				seen[id] = true
				if int64(id) < maxID {
					overtaken++
				}
				maxID = max(maxID, int64(id))
			}
			s := l.stats(frames)
			if s.Reordered != overtaken {
				t.Fatalf("reordered %d, but %d datagrams arrived after a later one", s.Reordered, overtaken)
			}
			if (overtaken > 0) != tc.reordered {
				t.Fatalf("%d datagrams arrived after a later one", overtaken)
			}
		})
	}
}

// unconnectedSocket has no destination: every write to it fails (EDESTADDRREQ).
func unconnectedSocket(t *testing.T) int {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

func TestFailedWritesAreCountedNotSent(t *testing.T) {
	pipe, err := linkmodel.NewPipe(linkmodel.Params{}, 1, "up")
	if err != nil {
		t.Fatal(err)
	}
	in, inAdr := mustSocket(t)
	tx, _ := mustSocket(t)
	t.Cleanup(func() { _ = unix.Close(tx) })
	d, err := NewDirection("up", in, unconnectedSocket(t), pipe, nil)
	if err != nil {
		t.Fatal(err)
	}
	d.Start()
	l := &testLink{t: t, d: d, tx: tx, inAdr: inAdr}
	for i := range 5 {
		l.send(uint32(i), 300)
	}
	s := l.stats(5)
	if s.SendErrors != 5 || s.TxPackets != 0 || s.TxBytes != 0 || s.RxBytes != 1500 {
		t.Fatalf("got %+v, want 5 send errors, nothing sent, 1500 bytes received", s)
	}
}

// idleDirection is a Direction that is never started, for its bookkeeping; its
// writes fail, which the bookkeeping below does not depend on.
func idleDirection(t *testing.T) *Direction {
	t.Helper()
	pipe, err := linkmodel.NewPipe(linkmodel.Params{}, 1, "down")
	if err != nil {
		t.Fatal(err)
	}
	out := unconnectedSocket(t)
	d, err := NewDirection("down", -1, out, pipe, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(out); d.close() })
	return d
}

func TestLatenessPercentiles(t *testing.T) {
	us := func(n int64) int64 { return n * 1000 }
	oneToHundred := make([]int64, 100)
	for i := range oneToHundred {
		oneToHundred[i] = us(int64(i + 1))
	}
	for _, tc := range []struct {
		name          string
		lateNs        []int64 // transmit time minus release time of each frame
		p50, p99, max int64   // microseconds
	}{
		{"no frames", nil, 0, 0, 0},
		{"on time", []int64{0, 0, 0}, 0, 0, 0},
		{"early counts as on time", []int64{-5000}, 0, 0, 0},
		{"sub-microsecond rounds down", []int64{999, 1999}, 0, 1, 1},
		{"1 to 100 us", oneToHundred, 50, 99, 100},
		{"one outlier", append(make([]int64, 99), us(7000)), 0, 0, 7000},
		{"two outliers of 100", append(make([]int64, 98), us(7000), us(9000)), 0, 7000, 9000},
		// the histogram ends at 100 ms; the maximum is exact beyond it
		{"beyond the histogram", []int64{us(250_000)}, lateBuckets - 1, lateBuckets - 1, 250_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := idleDirection(t)
			for i, late := range tc.lateNs {
				d.transmit(frame{release: 1_000_000_000, seq: uint64(i + 1), data: []byte{1}}, 1_000_000_000+late)
			}
			s := d.Snapshot(0)
			if s.LateUsP50 != tc.p50 || s.LateUsP99 != tc.p99 || s.LateUsMax != tc.max {
				t.Fatalf("p50 %d p99 %d max %d us, want %d %d %d",
					s.LateUsP50, s.LateUsP99, s.LateUsMax, tc.p50, tc.p99, tc.max)
			}
		})
	}
}

// A frame that waited in the input socket while the emulator did not read (here:
// not started yet; in a run: a stopped process or a descheduled thread) is late by
// its wait, from its kernel arrival stamp: a stall is seen even by frames that
// arrived during it, and the coarse histogram holds every frame.
func TestAFrameThatWaitedToBeReadIsLateByItsWait(t *testing.T) {
	l := newTestLink(t, linkmodel.Params{Delay: 5 * time.Millisecond}, 1)
	for i := range 4 {
		l.send(uint32(i), 100)
	}
	const stall = 150 * time.Millisecond
	time.Sleep(stall)
	l.d.Start()
	for range 4 {
		l.recv()
	}
	s := l.stats(4)
	if !s.RxTimestamps {
		t.Fatal("rx_timestamps false: the input socket gave no kernel stamps")
	}
	// waited 150 ms, of which the 5 ms delay was due anyway
	if min := (stall - 10*time.Millisecond).Microseconds(); s.LateUsMax < min {
		t.Fatalf("late_us_max %d us after a %v stall, want at least %d", s.LateUsMax, stall, min)
	}
	var frames, lowest uint64
	lowest = 1 << 62
	for _, b := range s.LateHist {
		frames += b[1]
		lowest = min(lowest, b[0])
	}
	if frames != 4 || lowest < 130_000 {
		t.Fatalf("late_hist %v: want 4 frames, each at least 130 ms late", s.LateHist)
	}
}

// Read at once, the same frames are on time: lateness is the emulator's, not the
// delay's.
func TestAFrameReadAtOnceIsOnTime(t *testing.T) {
	l := startLink(t, linkmodel.Params{Delay: 5 * time.Millisecond}, 1)
	for i := range 4 {
		l.send(uint32(i), 100)
	}
	for range 4 {
		l.recv()
	}
	if s := l.stats(4); s.LateUsMax > 50_000 {
		t.Fatalf("late_us_max %d us on an idle machine, want well under 50 ms", s.LateUsMax)
	}
}

func TestTimestampOfFindsTheStampAmongControlMessages(t *testing.T) {
	if got := timestampOf(nil); got != 0 {
		t.Fatalf("no control message: %d, want 0", got)
	}
	hdr := unix.CmsgLen(0)
	msg := func(level, typ int32, data []byte) []byte {
		b := make([]byte, unix.CmsgSpace(len(data)))
		h := unix.Cmsghdr{Level: level, Type: typ}
		h.SetLen(unix.CmsgLen(len(data)))
		binary.NativeEndian.PutUint64(b[0:8], h.Len)
		binary.NativeEndian.PutUint32(b[8:12], uint32(level))
		binary.NativeEndian.PutUint32(b[12:16], uint32(typ))
		copy(b[hdr:], data)
		return b
	}
	ts := make([]byte, 16)
	binary.NativeEndian.PutUint64(ts[0:8], 7)
	binary.NativeEndian.PutUint64(ts[8:16], 42)
	other := msg(unix.SOL_IP, unix.IP_TOS, []byte{1, 0, 0, 0})
	oob := append(other, msg(unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, ts)...)
	if got := timestampOf(oob); got != 7_000_000_042 {
		t.Fatalf("timestampOf = %d, want 7000000042", got)
	}
	if got := timestampOf(other); got != 0 {
		t.Fatalf("without a stamp: %d, want 0", got)
	}
	if got := timestampOf(oob[:5]); got != 0 {
		t.Fatalf("a truncated header: %d, want 0", got)
	}
}

func TestReorderedCountsEachFrameBehindALaterOne(t *testing.T) {
	for _, tc := range []struct {
		seqs []uint64 // transmit order
		want uint64
	}{
		{[]uint64{1, 2, 3}, 0},
		{[]uint64{2, 1, 3}, 1},
		{[]uint64{3, 1, 2}, 2},
		{[]uint64{2, 1, 4, 3}, 2},
		{[]uint64{5, 4, 3, 2, 1}, 4},
	} {
		d := idleDirection(t)
		for _, seq := range tc.seqs {
			d.transmit(frame{seq: seq, data: []byte{1}}, 0)
		}
		if got := d.Snapshot(0).Reordered; got != tc.want {
			t.Errorf("order %v: reordered %d, want %d", tc.seqs, got, tc.want)
		}
	}
}

func TestSnapshotReportsPipeAndSocketDrops(t *testing.T) {
	d := idleDirection(t)
	s := d.Snapshot(42)
	if s.SocketDrops != 42 || s.Pipe != d.pipe.String() {
		t.Fatalf("socket_drops %d pipe %q, want 42 and %q", s.SocketDrops, s.Pipe, d.pipe.String())
	}
}

func TestReleaseHeapPopsByReleaseThenArrival(t *testing.T) {
	type rs struct {
		release int64
		seq     uint64
	}
	for _, tc := range []struct {
		name string
		push []rs
		want []uint64 // seqs in pop order
	}{
		{"one", []rs{{5, 1}}, []uint64{1}},
		{"ascending", []rs{{1, 1}, {2, 2}, {3, 3}}, []uint64{1, 2, 3}},
		{"descending", []rs{{3, 1}, {2, 2}, {1, 3}}, []uint64{3, 2, 1}},
		{"ties in arrival order", []rs{{7, 3}, {7, 1}, {7, 2}}, []uint64{1, 2, 3}},
		{"mixed", []rs{{4, 1}, {1, 2}, {4, 3}, {0, 4}, {9, 5}, {1, 6}}, []uint64{4, 2, 6, 1, 3, 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h releaseHeap
			for _, f := range tc.push {
				h.push(frame{release: f.release, seq: f.seq})
			}
			var got []uint64
			for len(h) > 0 {
				got = append(got, h.pop().seq)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("popped %v, want %v", got, tc.want)
			}
		})
	}
}

func TestReleaseHeapMatchesASort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h releaseHeap
	var all []frame
	pop := func() {
		f := h.pop()
		i := slices.IndexFunc(all, func(g frame) bool { return g.seq == f.seq })
		if first := all[0]; first.seq != f.seq {
			t.Fatalf("popped (%d, %d), want (%d, %d)", f.release, f.seq, first.release, first.seq)
		}
		all = slices.Delete(all, i, i+1)
	}
	// pushes and pops interleaved, as the two loops of a Direction do
	for seq := uint64(1); seq <= 5000; seq++ {
		f := frame{release: rng.Int64N(100), seq: seq}
		h.push(f)
		all = append(all, f)
		slices.SortStableFunc(all, func(a, b frame) int { return int(a.release - b.release) })
		if rng.IntN(3) == 0 {
			pop()
		}
	}
	for len(h) > 0 {
		pop()
	}
}

// originFrame is datagram id as an Ethernet frame of IPv4 from src (the pattern of
// payload after the headers).
func originFrame(id uint32, src [4]byte) []byte {
	b := payload(id, 200)
	b[12], b[13] = 0x08, 0x00
	b[linkmodel.EthernetHeader] = 0x45
	copy(b[linkmodel.EthernetHeader+12:], src[:])
	binary.BigEndian.PutUint32(b[linkmodel.EthernetHeader+20:], id)
	return b
}

func TestAnAddressDelayHoldsThatOriginsFramesOnly(t *testing.T) {
	addr, err := linkmodel.NewAddressDelays(map[string]int64{"10.10.1.100": 30000}, true)
	if err != nil {
		t.Fatal(err)
	}
	l := newTestLinkWith(t, linkmodel.Params{Delay: 5 * time.Millisecond}, 1, addr)
	l.d.Start()
	far, near := [4]byte{10, 10, 1, 100}, [4]byte{10, 10, 1, 1}
	start := time.Now()
	for i, src := range [][4]byte{far, near, far, near} {
		if err := unix.Sendto(l.tx, originFrame(uint32(i), src), 0, l.inAdr); err != nil {
			t.Fatal(err)
		}
	}
	var order []uint32
	var took []time.Duration
	for range 4 {
		r := l.recv()
		order = append(order, binary.BigEndian.Uint32(r.data[linkmodel.EthernetHeader+20:]))
		took = append(took, r.at.Sub(start))
	}
	// the near origin's frames overtake the far one's, each address in its own order
	if order[0] != 1 || order[1] != 3 || order[2] != 0 || order[3] != 2 {
		t.Fatalf("order %v, want [1 3 0 2]", order)
	}
	if took[0] < 5*time.Millisecond || took[0] > 30*time.Millisecond {
		t.Fatalf("the near frame took %v (5 ms delay)", took[0])
	}
	if took[2] < 35*time.Millisecond {
		t.Fatalf("the far frame took %v (5 ms + 30 ms)", took[2])
	}
	s := l.d.Snapshot(0)
	if s.Reordered != 0 {
		t.Fatalf("reordered %d: frames of two addresses are not a reordering", s.Reordered)
	}
	if s.AddressFrames["10.10.1.100"] != 2 || len(s.AddressFrames) != 1 {
		t.Fatalf("address frames %v", s.AddressFrames)
	}
	if s.Addresses == "" {
		t.Fatal("the stage is not described")
	}
}
