package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"go/format"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// quicGo returns quic-go's module zip path and go.sum, as run() finds them.
func quicGo(t *testing.T) (zipPath string, goSum []byte) {
	t.Helper()
	b, err := goOutput("go", "mod", "download", "-json", modulePath)
	if err != nil {
		t.Fatal(err)
	}
	var m struct{ Zip string }
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	goSum, err = os.ReadFile("../go.sum")
	if err != nil {
		t.Fatal(err)
	}
	return m.Zip, goSum
}

// treeSum is one digest over every file's path and content under dir.
func treeSum(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		h.Write([]byte(p[len(dir):] + "\x00"))
		h.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(h.Sum(nil))
}

func TestGeneratesThePatchedModule(t *testing.T) {
	out := t.TempDir()
	if err := run("go", out); err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(out, modFile))
	if err != nil {
		t.Fatal(err)
	}
	goMod, _ := os.ReadFile("../go.mod")
	rel, _ := filepath.Rel(filepath.Dir(mustAbs(t, "../go.mod")), filepath.Join(out, copyDir))
	if want := "replace github.com/quic-go/quic-go v0.65.0 => " + rel + "\n"; !bytes.HasPrefix(mod, goMod) || !strings.HasSuffix(string(mod), want) {
		t.Errorf("%s does not end in %q:\n%s", modFile, want, mod)
	}
	// The patched files are gofmt-clean (the added ones: gofmt -l in make lint).
	for name := range pinned {
		b, err := os.ReadFile(filepath.Join(out, copyDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if f, err := format.Source(b); err != nil || !bytes.Equal(f, b) {
			t.Errorf("patched %s is not gofmt-clean (%v)", name, err)
		}
	}
	for name, want := range map[string]string{
		"internal/congestion/cubic.go":               "quicbedCubicParams()",
		"internal/ackhandler/sent_packet_handler.go": "congestion.UseReno(),",
		"internal/congestion/quicbed_params.go":      "func SetCubicParams(",
		"quicbed_congestion.go":                      "func SetCongestionControl(",
		"quicbed_patch.go":                           `const QuicbedPatch = "quic-go-v0.65.0-cubic-params sha256:`,
	} {
		b, err := os.ReadFile(filepath.Join(out, copyDir, name))
		if err != nil || !bytes.Contains(b, []byte(want)) {
			t.Errorf("%s: %v, lacks %q", name, err, want)
		}
	}
	// A rerun writes nothing; after a change, the same bytes as the first.
	zipPath, _ := quicGo(t)
	first := treeSum(t, out)
	if written, err := generate(mustAbs(t, ".."), zipPath, out); err != nil || written {
		t.Errorf("second run: written %v, %v", written, err)
	}
	if err := os.WriteFile(filepath.Join(out, copyDir, "internal/congestion/cubic.go"), []byte("package congestion\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if written, err := generate(mustAbs(t, ".."), zipPath, out); err != nil || !written {
		t.Errorf("run after a change: written %v, %v", written, err)
	}
	if treeSum(t, out) != first {
		t.Error("a rerun wrote other files")
	}
}

func mustAbs(t *testing.T, p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestRefusesAChangedUpstreamFile(t *testing.T) {
	zipPath, goSum := quicGo(t)
	files, err := readModuleZip(zipPath, goSum)
	if err != nil {
		t.Fatal(err)
	}
	files["internal/congestion/cubic.go"] = append(files["internal/congestion/cubic.go"], "// changed\n"...)
	err = patch(files)
	if err == nil || !strings.Contains(err.Error(), "internal/congestion/cubic.go: SHA-256") {
		t.Errorf("got %v, want the file named with its SHA-256", err)
	}
}

func TestRefusesAZipThatGoSumDoesNotName(t *testing.T) {
	zipPath, goSum := quicGo(t)
	bad := bytes.Replace(goSum, []byte("quic-go v0.65.0 h1:B"), []byte("quic-go v0.65.0 h1:C"), 1)
	if _, err := readModuleZip(zipPath, bad); err == nil || !strings.Contains(err.Error(), "go.sum has h1:C") {
		t.Errorf("got %v", err)
	}
}

func TestApplyIsExact(t *testing.T) {
	diffs, err := parsePatch("comment\n--- a/f.go\n+++ b/f.go\n@@ -2,2 +2,2 @@\n b\n-c\n+C\n")
	if err != nil {
		t.Fatal(err)
	}
	got, err := diffs[0].apply([]byte("a\nb\nc\nd\n"))
	if err != nil || string(got) != "a\nb\nC\nd\n" {
		t.Errorf("got %q, %v", got, err)
	}
	// the same lines one further down: no offsets, no fuzz
	if _, err := diffs[0].apply([]byte("x\na\nb\nc\n")); err == nil || !strings.Contains(err.Error(), `line 2 is "a"`) {
		t.Errorf("got %v", err)
	}
	for _, bad := range []string{"", "--- a/f.go\n+++ b/g.go\n@@ -1 +1 @@\n-a\n+b\n", "--- a/f.go\n+++ b/f.go\n@@ -1,2 +1,2 @@\n-a\n+b\n"} {
		if _, err := parsePatch(bad); err == nil {
			t.Errorf("parsed %q", bad)
		}
	}
}

func TestRefusesAForeignOutDir(t *testing.T) {
	out := t.TempDir()
	if err := os.WriteFile(filepath.Join(out, "notes.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run("go", out); err == nil || !strings.Contains(err.Error(), "not writing there") {
		t.Errorf("got %v", err)
	}
}
