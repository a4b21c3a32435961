package gquicserver

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"quicbed/gquic/internal/quicgotest"
)

// quicGoDir is the quic-go module this package is built with, from the go command:
// the patched copy.
func quicGoDir(t *testing.T) string {
	t.Helper()
	modFile, err := quicgotest.ModFile()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(quicgotest.GoCmd(), "list", "-modfile", modFile, "-m", "-f", "{{.Version}} {{.Dir}}", QuicGoModule).Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v", QuicGoModule, err)
	}
	version, dir, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	if version != "v0.10.2" || filepath.Base(dir) != "quic-go-v0.10.2" {
		t.Fatalf("go list -m %s: %q, want the patched copy of v0.10.2", QuicGoModule, out)
	}
	return dir
}

func read(t *testing.T, dir, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(file)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestCongestionControlIsTheSources checks the logged cc, cubic_n and cubic_beta
// against the quic-go source this server is compiled from: the sent packet handler
// makes a CUBIC sender (reno = false), which emulates defaultNumConnections
// connections with backoff beta, and nothing but tests changes N.
func TestCongestionControlIsTheSources(t *testing.T) {
	dir := quicGoDir(t)
	sph := read(t, dir, "internal/ackhandler/sent_packet_handler.go")
	if !regexp.MustCompile(`congestion\.NewCubicSender\(\s*congestion\.DefaultClock\{\},\s*rttStats,\s*false,`).MatchString(sph) {
		t.Errorf("sent_packet_handler.go no longer makes NewCubicSender(..., reno = false, ...): cc is not %q", CC)
	}
	if CC != "cubic" {
		t.Errorf("CC %q", CC)
	}
	cubic := read(t, dir, "internal/congestion/cubic.go")
	m := regexp.MustCompile(`(?m)^const defaultNumConnections = (\d+)$`).FindStringSubmatch(cubic)
	if m == nil || m[1] != strconv.Itoa(CubicN) {
		t.Errorf("cubic.go's defaultNumConnections: %v, logged cubic_n %d", m, CubicN)
	}
	m = regexp.MustCompile(`(?m)^const beta float32 = ([0-9.]+)$`).FindStringSubmatch(cubic)
	if m == nil || m[1] != CubicBeta {
		t.Errorf("cubic.go's beta: %v, logged cubic_beta %s", m, CubicBeta)
	}
	sender := read(t, dir, "internal/congestion/cubic_sender.go")
	if !regexp.MustCompile(`numConnections:\s+defaultNumConnections,`).MatchString(sender) {
		t.Errorf("cubic_sender.go no longer starts with defaultNumConnections")
	}
	// Nothing outside tests and mocks sets the number of emulated connections.
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") ||
			strings.Contains(path, string(filepath.Separator)+"mocks"+string(filepath.Separator)) {
			return err
		}
		b, err := os.ReadFile(path)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "SetNumEmulatedConnections(") || strings.Contains(line, "SetNumConnections(") {
				if !strings.HasPrefix(strings.TrimSpace(line), "func ") && !strings.HasPrefix(strings.TrimSpace(line), "SetNumEmulatedConnections(n int)") &&
					!strings.Contains(line, "c.cubic.SetNumConnections(c.numConnections)") {
					t.Errorf("%s sets the emulated connections: %s", path, strings.TrimSpace(line))
				}
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
