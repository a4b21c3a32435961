// Command quicbed-linkem is quicbed's userspace link emulator: it forwards every
// Ethernet frame between the two veth ends of the bridge namespace over AF_PACKET
// and applies one Dummynet pipe per direction (loss, FIFO queue, rate, delay and
// jitter). For kernels without sch_netem.
//
//	quicbed-linkem --config FILE.json [--stats FILE.json] [--ready-file FILE]
//
// SIGUSR1 writes the statistics file; SIGUSR2 starts a time-varying link's trace or
// schedule again from its start, then writes it; SIGTERM or SIGINT writes it and
// exits 0.
// A bad config exits 2 with one line naming the key and value.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"quicbed/internal/forward"
	"quicbed/internal/linkmodel"
)

type statsFile struct {
	Format     int                      `json:"format"`
	UptimeS    float64                  `json:"uptime_s"`
	Config     *linkmodel.Config        `json:"config"`
	Directions map[string]forward.Stats `json:"directions"`
}

func writeAtomic(path string, data []byte) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func fail(code int, format string, a ...any) {
	fmt.Fprintf(os.Stderr, "quicbed-linkem: "+format+"\n", a...)
	os.Exit(code)
}

func main() {
	configPath := flag.String("config", "", "config file (JSON, format 1); required")
	statsPath := flag.String("stats", "", "statistics file written on SIGUSR1 and at exit")
	readyPath := flag.String("ready-file", "", "file created once forwarding runs")
	flag.Parse()
	if *configPath == "" {
		fail(2, "--config is required")
	}
	data, err := os.ReadFile(*configPath)
	if err != nil {
		fail(2, "--config %s: %v", *configPath, err)
	}
	cfg, err := linkmodel.ParseConfig(data, os.ReadFile)
	if err != nil {
		fail(2, "%v", err)
	}
	link, err := forward.Open(cfg)
	if err != nil {
		fail(1, "%v", err)
	}
	start := time.Now()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGTERM, syscall.SIGINT)
	link.Start()
	fmt.Fprintf(os.Stderr, "quicbed-linkem: %s <-> %s\n  down: %s\n  up:   %s\n",
		cfg.ServerIf, cfg.ClientIf, link.Down.Snapshot(0).Pipe, link.Up.Snapshot(0).Pipe)
	if *readyPath != "" {
		if err := writeAtomic(*readyPath, []byte(fmt.Sprintf("%d\n", os.Getpid()))); err != nil {
			fail(1, "--ready-file %s: %v", *readyPath, err)
		}
	}
	dump := func() {
		if *statsPath == "" {
			return
		}
		s := statsFile{Format: 1, UptimeS: time.Since(start).Seconds(), Config: cfg, Directions: link.Stats()}
		b, _ := json.MarshalIndent(s, "", "  ")
		if err := writeAtomic(*statsPath, b); err != nil {
			fmt.Fprintf(os.Stderr, "quicbed-linkem: --stats %s: %v\n", *statsPath, err)
		}
	}
	for sig := range sigs {
		if sig == syscall.SIGUSR2 {
			link.Restart()
		}
		dump()
		if sig != syscall.SIGUSR1 && sig != syscall.SIGUSR2 {
			os.Exit(0)
		}
	}
}
