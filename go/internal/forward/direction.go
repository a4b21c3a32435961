package forward

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"quicbed/internal/linkmodel"
)

// maxFrame bounds a frame read from a packet socket (offloads are off, but be safe).
const maxFrame = 65536

// lateBuckets is the resolution of the lateness histogram: 1 us up to 100 ms.
const lateBuckets = 100000

type frame struct {
	release int64 // CLOCK_MONOTONIC ns
	seq     uint64
	class   int // its address class (linkmodel.AddressDelays; 0: no extra delay)
	data    []byte
}

// releaseHeap orders frames by release time, then arrival order.
type releaseHeap []frame

func (h releaseHeap) less(i, j int) bool {
	if h[i].release != h[j].release {
		return h[i].release < h[j].release
	}
	return h[i].seq < h[j].seq
}

func (h *releaseHeap) push(f frame) {
	*h = append(*h, f)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *releaseHeap) pop() frame {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s[last] = frame{}
	s = s[:last]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && s.less(l, m) {
			m = l
		}
		if r < len(s) && s.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// Counters are one direction's statistics; all fields are read atomically.
type Counters struct {
	RxPackets, RxBytes, LossDrops, QueueDrops atomic.Uint64
	TxPackets, TxBytes, SendErrors, Reordered atomic.Uint64
	// ECNCapable counts the ECN-capable packets received, CEMarked those this
	// direction marked CE (linkmodel.ForwardCE)
	ECNCapable, CEMarked atomic.Uint64
}

// Direction forwards frames from one socket to another through one pipe.
type Direction struct {
	Name string
	in   int
	out  int
	pipe *linkmodel.Pipe
	// addr adds an extra delay after the pipe for some server-side addresses; each
	// class's frames leave in their own order (the pipe's), so reordering is counted
	// within a class: frames of two addresses at different distances overtake each
	// other as they would on two paths
	addr *linkmodel.AddressDelays

	mu      sync.Mutex
	heap    releaseHeap
	seq     uint64
	wake    int // eventfd: a new earliest frame
	timer   int // timerfd on CLOCK_MONOTONIC
	armedAt int64
	pool    sync.Pool

	C          Counters
	lateMu     sync.Mutex
	late       []uint64
	coarse     [coarseBuckets]uint64 // latehist.go: exported, differenced per load
	lateMax    int64
	maxSentSeq []uint64 // by address class
	sentAny    []bool
	// classFrames counts the frames sent per address class
	classFrames []atomic.Uint64

	// stamped: the kernel stamps each frame's arrival on the input socket
	// (SO_TIMESTAMPNS), so a frame's schedule starts when it arrived, not when this
	// process got round to reading it. A stall of the emulator (a stopped process, a
	// descheduled thread, a hypervisor's steal) then shows as lateness of the frames
	// that waited in the socket, not only of those already queued.
	stamped     bool
	lastArrival int64
}

// NewDirection prepares forwarding of frames read on inFd to outFd, through pipe and
// then addr's extra delays (nil: none).
func NewDirection(name string, inFd, outFd int, pipe *linkmodel.Pipe, addr *linkmodel.AddressDelays) (*Direction, error) {
	if addr == nil {
		var err error
		if addr, err = linkmodel.NewAddressDelays(nil, false); err != nil {
			return nil, err
		}
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, err
	}
	timer, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC|unix.TFD_NONBLOCK)
	if err != nil {
		_ = unix.Close(wake)
		return nil, err
	}
	n := addr.Classes()
	d := &Direction{Name: name, in: inFd, out: outFd, pipe: pipe, addr: addr, wake: wake, timer: timer,
		late: make([]uint64, lateBuckets), maxSentSeq: make([]uint64, n), sentAny: make([]bool, n),
		classFrames: make([]atomic.Uint64, n)}
	d.stamped = unix.SetsockoptInt(inFd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1) == nil
	d.pool.New = func() any { b := make([]byte, 2048); return &b }
	return d, nil
}

// close releases the Direction's own descriptors (not the sockets it reads and
// writes) if it was never started.
func (d *Direction) close() {
	_ = unix.Close(d.wake)
	_ = unix.Close(d.timer)
}

// Start runs the receive and send loops, each on its own locked OS thread.
func (d *Direction) Start() {
	go d.receive()
	go d.send()
}

func (d *Direction) receive() {
	runtime.LockOSThread()
	buf := make([]byte, maxFrame)
	oob := make([]byte, 128)
	for {
		n, stamp, err := recvStamped(d.in, buf, oob)
		if err != nil {
			if err == unix.EINTR || err == unix.EAGAIN {
				continue
			}
			return
		}
		now := d.arrival(stamp)
		d.C.RxPackets.Add(1)
		d.C.RxBytes.Add(uint64(n))
		ect := ecnCapable(buf[:n])
		if ect {
			d.C.ECNCapable.Add(1)
		}
		d.mu.Lock()
		release, verdict := d.pipe.Offer(time.Duration(now), n, ect)
		if verdict == linkmodel.ForwardCE {
			if markCE(buf[:n]) {
				d.C.CEMarked.Add(1)
			}
		} else if verdict != linkmodel.Forward {
			d.mu.Unlock()
			if verdict == linkmodel.DropLoss {
				d.C.LossDrops.Add(1)
			} else {
				d.C.QueueDrops.Add(1)
			}
			continue
		}
		var data []byte
		if n <= 2048 {
			bp := d.pool.Get().(*[]byte)
			data = (*bp)[:n]
		} else {
			data = make([]byte, n)
		}
		copy(data, buf[:n])
		d.seq++
		class, extra := d.addr.Classify(data)
		f := frame{release: int64(release + extra), seq: d.seq, class: class, data: data}
		d.heap.push(f)
		isHead := d.heap[0].seq == f.seq
		d.mu.Unlock()
		if isHead {
			var one = [8]byte{1}
			_, _ = unix.Write(d.wake, one[:])
		}
	}
}

func (d *Direction) send() {
	runtime.LockOSThread()
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return
	}
	for _, fd := range []int{d.wake, d.timer} {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
		if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			return
		}
	}
	events := make([]unix.EpollEvent, 2)
	var scratch [8]byte
	for {
		// release everything that is due
		for {
			d.mu.Lock()
			if len(d.heap) == 0 {
				d.mu.Unlock()
				break
			}
			now := monotonic()
			head := d.heap[0].release
			if head > now {
				d.arm(head)
				d.mu.Unlock()
				break
			}
			f := d.heap.pop()
			d.mu.Unlock()
			d.transmit(f, now)
		}
		if _, err := unix.EpollWait(ep, events, -1); err != nil && err != unix.EINTR {
			return
		}
		_, _ = unix.Read(d.wake, scratch[:])
		_, _ = unix.Read(d.timer, scratch[:])
	}
}

// arrival is a frame's arrival on CLOCK_MONOTONIC: the kernel's receive stamp
// (CLOCK_REALTIME, stamp ns; 0 where there is none) moved back from now by the time
// it waited in the socket. Arrivals never go backwards (the model takes frames in
// order) nor into the future.
func (d *Direction) arrival(stamp int64) int64 {
	now := monotonic()
	at := now
	if stamp > 0 {
		if waited := realtime() - stamp; waited > 0 {
			at = now - waited
		}
	}
	if at < d.lastArrival {
		at = d.lastArrival
	}
	d.lastArrival = at
	return at
}

// arm sets the timer to an absolute release time (called with mu held).
func (d *Direction) arm(at int64) {
	if at == d.armedAt {
		return
	}
	d.armedAt = at
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(at)}
	_ = unix.TimerfdSettime(d.timer, unix.TFD_TIMER_ABSTIME, &spec, nil)
}

func (d *Direction) transmit(f frame, now int64) {
	if _, err := unix.Write(d.out, f.data); err != nil {
		d.C.SendErrors.Add(1)
	} else {
		d.C.TxPackets.Add(1)
		d.C.TxBytes.Add(uint64(len(f.data)))
	}
	c := f.class
	d.classFrames[c].Add(1)
	if d.sentAny[c] && f.seq < d.maxSentSeq[c] {
		d.C.Reordered.Add(1)
	}
	if f.seq > d.maxSentSeq[c] {
		d.maxSentSeq[c] = f.seq
	}
	d.sentAny[c] = true
	lateNs := now - f.release
	if lateNs < 0 {
		lateNs = 0
	}
	us := lateNs / 1000
	d.lateMu.Lock()
	if us >= lateBuckets {
		d.late[lateBuckets-1]++
	} else {
		d.late[us]++
	}
	if us > d.lateMax {
		d.lateMax = us
	}
	d.coarse[coarseBucket(us)]++
	d.lateMu.Unlock()
	if cap(f.data) == 2048 {
		b := f.data[:cap(f.data)]
		d.pool.Put(&b)
	}
}

// Stats is one direction's statistics in the stats file (format 1).
type Stats struct {
	RxPackets       uint64 `json:"rx_packets"`
	RxBytes         uint64 `json:"rx_bytes"`
	LossDrops       uint64 `json:"loss_drops"`
	QueueDrops      uint64 `json:"queue_drops"`
	TxPackets       uint64 `json:"tx_packets"`
	TxBytes         uint64 `json:"tx_bytes"`
	SendErrors      uint64 `json:"send_errors"`
	SocketDrops     uint64 `json:"socket_drops"`
	MaxQueueBytes   int64  `json:"max_queue_bytes"`
	MaxQueuePackets int64  `json:"max_queue_packets"`
	// QueueBytes and QueuePackets are the FIFO's occupancy when the snapshot was taken.
	QueueBytes   int64  `json:"queue_bytes"`
	QueuePackets int64  `json:"queue_packets"`
	Reordered    uint64 `json:"reordered"`
	ECNCapable   uint64 `json:"ecn_capable"`
	CEMarked     uint64 `json:"ce_marked"`
	LateUsP50    int64  `json:"late_us_p50"`
	LateUsP99    int64  `json:"late_us_p99"`
	LateUsMax    int64  `json:"late_us_max"`
	// LateHist is the coarse lateness histogram since the start (latehist.go):
	// [lower edge us, frames] of its non-empty buckets. Two snapshots subtracted
	// give the lateness of the frames sent between them.
	LateHist [][2]uint64 `json:"late_hist"`
	// RxTimestamps: lateness counts from each frame's arrival in the kernel, so it
	// includes the time a frame waited to be read (false: from when it was read).
	RxTimestamps bool   `json:"rx_timestamps"`
	Pipe         string `json:"pipe"`
	// Capacity is a time-varying link's trace or schedule: where it is since its
	// last restart and the bytes that have left the bottleneck since (absent on a
	// constant link).
	Capacity *linkmodel.CapacityState `json:"capacity,omitempty"`
	// AddressFrames is the frames sent per delayed server-side address (absent when
	// no address has an extra delay): the evidence that each origin's frames took
	// its path
	AddressFrames map[string]uint64 `json:"address_frames,omitempty"`
	// Addresses describes the address-delay stage ("" when there is none)
	Addresses string `json:"addresses,omitempty"`
}

// Restart starts the pipe's trace or schedule again at now (CLOCK_MONOTONIC ns).
func (d *Direction) Restart(now int64) {
	d.mu.Lock()
	d.pipe.Restart(time.Duration(now))
	d.mu.Unlock()
}

// Snapshot reads the counters; socketDrops accumulates across calls.
func (d *Direction) Snapshot(socketDrops uint64) Stats {
	s := Stats{
		RxPackets: d.C.RxPackets.Load(), RxBytes: d.C.RxBytes.Load(),
		LossDrops: d.C.LossDrops.Load(), QueueDrops: d.C.QueueDrops.Load(),
		TxPackets: d.C.TxPackets.Load(), TxBytes: d.C.TxBytes.Load(),
		SendErrors: d.C.SendErrors.Load(), Reordered: d.C.Reordered.Load(),
		ECNCapable: d.C.ECNCapable.Load(), CEMarked: d.C.CEMarked.Load(),
		SocketDrops: socketDrops, Pipe: d.pipe.String(), RxTimestamps: d.stamped,
		Addresses: d.addr.String(),
	}
	for c := 1; c < d.addr.Classes(); c++ {
		if s.AddressFrames == nil {
			s.AddressFrames = map[string]uint64{}
		}
		s.AddressFrames[d.addr.Name(c)] = d.classFrames[c].Load()
	}
	d.mu.Lock()
	s.MaxQueueBytes, s.MaxQueuePackets = d.pipe.MaxQueueBytes, d.pipe.MaxQueuePackets
	now := time.Duration(monotonic())
	s.QueueBytes, s.QueuePackets = d.pipe.Occupancy(now)
	s.Capacity = d.pipe.Capacity(now)
	d.mu.Unlock()
	if s.Capacity != nil {
		s.Capacity.EpochUnixNs = realtime() - (int64(now) - s.Capacity.EpochNs)
	}
	d.lateMu.Lock()
	defer d.lateMu.Unlock()
	var total uint64
	for _, c := range d.late {
		total += c
	}
	s.LateUsMax = d.lateMax
	s.LateHist = sparse(&d.coarse)
	if total > 0 {
		var acc uint64
		p50, p99 := (total+1)/2, (total*99+99)/100
		got50 := false
		for us, c := range d.late {
			acc += c
			if !got50 && acc >= p50 {
				s.LateUsP50, got50 = int64(us), true
			}
			if acc >= p99 {
				s.LateUsP99 = int64(us)
				break
			}
		}
	}
	return s
}
