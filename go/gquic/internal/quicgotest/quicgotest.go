// Package quicgotest is for this module's tests that run the go command (to
// build the server, to find quic-go's source): it names the alternative go.mod
// that builds the module with quicbed's patched quic-go v0.10.2, as `go test
// -modfile` built the test itself. A test binary has no module information in
// its build information, so it cannot read the replace directive off itself.
package quicgotest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	quic "github.com/lucas-clemente/quic-go"
)

// ModFileRel is where go/patches writes the alternative go.mod (`make quic-go`,
// roles/quicbed_binaries: -out build/quic-go-v0.10.2-patched), relative to this
// module's directory.
const ModFileRel = "../../build/quic-go-v0.10.2-patched/quicbed.mod"

// GoCmd is the go command: the one on PATH, else the one of the running Go.
func GoCmd() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	// go test puts its GOROOT/bin first on PATH, so this is only for a test binary
	// run by hand without go on PATH: the GOROOT it was built with is the best guess.
	return filepath.Join(runtime.GOROOT(), "bin", "go") //nolint:staticcheck // SA1019: deliberate fallback, see above
}

// ModFile returns the absolute path of ModFileRel, after checking that the
// quic-go it replaces quic-go with carries the patch compiled into this binary
// (quic.QuicbedPatch, name and digest), so that the go commands a test runs
// build what the test was built with.
func ModFile() (string, error) {
	out, err := exec.Command(GoCmd(), "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	mod := filepath.Join(root, filepath.FromSlash(ModFileRel))
	b, err := os.ReadFile(mod)
	if err != nil {
		return "", fmt.Errorf("%v (make quic-go writes it)", err)
	}
	var dir string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 5 && f[0] == "replace" && f[1] == "github.com/lucas-clemente/quic-go" && f[3] == "=>" {
			dir = filepath.Join(root, filepath.FromSlash(f[4]))
		}
	}
	if dir == "" {
		return "", fmt.Errorf("%s does not replace github.com/lucas-clemente/quic-go", mod)
	}
	src, err := os.ReadFile(filepath.Join(dir, "quicbed_patch.go"))
	if err != nil {
		return "", err
	}
	if !bytes.Contains(src, []byte("const QuicbedPatch = "+strconv.Quote(quic.QuicbedPatch)+"\n")) {
		return "", fmt.Errorf("%s builds another patch than this test's %q (make quic-go)", mod, quic.QuicbedPatch)
	}
	return mod, nil
}
