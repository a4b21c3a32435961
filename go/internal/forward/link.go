package forward

import (
	"fmt"

	"golang.org/x/sys/unix"

	"quicbed/internal/linkmodel"
)

// Link is the two directions between the server-side and client-side interfaces.
type Link struct {
	Down, Up    *Direction
	fdServer    int
	fdClient    int
	dropsServer uint64
	dropsClient uint64
}

// Open binds both interfaces and builds one pipe per direction from cfg. On an
// error it closes whatever it opened.
func Open(cfg *linkmodel.Config) (l *Link, err error) {
	fs, err := openPacketSocket(cfg.ServerIf)
	if err != nil {
		return nil, err
	}
	fc, err := openPacketSocket(cfg.ClientIf)
	if err != nil {
		_ = unix.Close(fs)
		return nil, err
	}
	l = &Link{fdServer: fs, fdClient: fc}
	defer func() {
		if err != nil {
			l.close()
			l = nil
		}
	}()
	for _, name := range []string{"down", "up"} {
		p, err := cfg.Directions[name].Params()
		if err != nil {
			return l, fmt.Errorf("directions.%s.%v", name, err)
		}
		pipe, err := linkmodel.NewPipe(p, cfg.Seed, name)
		if err != nil {
			return l, fmt.Errorf("directions.%s.%v", name, err)
		}
		addr, err := cfg.Directions[name].Addresses(name)
		if err != nil {
			return l, fmt.Errorf("directions.%s.%v", name, err)
		}
		in, out := fs, fc
		if name == "up" {
			in, out = fc, fs
		}
		d, err := NewDirection(name, in, out, pipe, addr)
		if err != nil {
			return l, err
		}
		if name == "down" {
			l.Down = d
		} else {
			l.Up = d
		}
	}
	return l, nil
}

// close releases the sockets and the directions' descriptors of a link that was
// never started (a started one runs until the process exits).
func (l *Link) close() {
	for _, d := range []*Direction{l.Down, l.Up} {
		if d != nil {
			d.close()
		}
	}
	_ = unix.Close(l.fdServer)
	_ = unix.Close(l.fdClient)
}

// Start begins forwarding in both directions.
func (l *Link) Start() {
	l.Down.Start()
	l.Up.Start()
}

// Stats snapshots both directions. Frames the kernel dropped on a socket are
// charged to the direction that reads that socket.
func (l *Link) Stats() map[string]Stats {
	l.dropsServer += socketDrops(l.fdServer)
	l.dropsClient += socketDrops(l.fdClient)
	return map[string]Stats{
		"down": l.Down.Snapshot(l.dropsServer),
		"up":   l.Up.Snapshot(l.dropsClient),
	}
}

// Restart starts both directions' traces or schedules again from their start (a
// constant link ignores it), at one instant of the monotonic clock.
func (l *Link) Restart() {
	now := monotonic()
	l.Down.Restart(now)
	l.Up.Restart(now)
}
