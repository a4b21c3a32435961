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

// quicGo returns the module zip path of the quic-go s patches, and the go.sum
// of the module s is for, as run() finds them.
func quicGo(t *testing.T, s *patchSet) (zipPath string, goSum []byte) {
	t.Helper()
	b, err := goOutput("go", modRoot(t, s), "mod", "download", "-json", s.modulePath)
	if err != nil {
		t.Fatal(err)
	}
	var m struct{ Zip string }
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	goSum, err = os.ReadFile(filepath.Join(modRoot(t, s), "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	return m.Zip, goSum
}

// modRoot is the directory of the module s is for.
func modRoot(t *testing.T, s *patchSet) string {
	return mustAbs(t, filepath.Join("..", filepath.FromSlash(s.module)))
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

func mustSet(t *testing.T, name string) *patchSet {
	t.Helper()
	s, err := set(name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// patchedFiles: what each patch must have put where (module path: text).
var patchedFiles = map[string]map[string]string{
	"quic-go-v0.65.0-cubic-params": {
		"internal/congestion/cubic.go":               "quicbedCubicParams()",
		"internal/ackhandler/sent_packet_handler.go": "congestion.UseReno(),",
		"internal/congestion/quicbed_params.go":      "func SetCubicParams(",
		"quicbed_congestion.go":                      "func SetCongestionControl(",
		"quicbed_patch.go":                           `const QuicbedPatch = "quic-go-v0.65.0-cubic-params sha256:`,
	},
	"quic-go-v0.10.2-keep-ciphertext": {
		"internal/handshake/crypto_setup_server.go": "orig = append([]byte(nil), src...)",
		"quicbed_initial_key_test.go":               "func TestQuicbedInitialKeyRequestWithCHLO(",
		"quicbed_patch.go":                          `const QuicbedPatch = "quic-go-v0.10.2-keep-ciphertext sha256:`,
	},
}

func TestGeneratesThePatchedModule(t *testing.T) {
	for _, s := range sets {
		t.Run(s.name, func(t *testing.T) {
			out := t.TempDir()
			if err := run("go", out, s); err != nil {
				t.Fatal(err)
			}
			mod, err := os.ReadFile(filepath.Join(out, modFile))
			if err != nil {
				t.Fatal(err)
			}
			goMod, _ := os.ReadFile(filepath.Join(modRoot(t, s), "go.mod"))
			rel, _ := filepath.Rel(modRoot(t, s), filepath.Join(out, s.copyDir))
			flagText := " -patch " + s.name
			if s.name == defaultSet {
				flagText = "" // as before there were two patches: the same bytes
			}
			want := string(goMod) + "\n// Added by go/patches (go run ./patches" + flagText + " -out ...): quic-go with quicbed's patch.\n" +
				"replace " + s.modulePath + " " + s.moduleVersion + " => " + rel + "\n"
			if string(mod) != want {
				t.Errorf("%s:\n%s\nwant\n%s", modFile, mod, want)
			}
			// The patched files are gofmt-clean (the added ones: gofmt -l in make lint).
			for name := range s.pinned {
				b, err := os.ReadFile(filepath.Join(out, s.copyDir, name))
				if err != nil {
					t.Fatal(err)
				}
				if f, err := format.Source(b); err != nil || !bytes.Equal(f, b) {
					t.Errorf("patched %s is not gofmt-clean (%v)", name, err)
				}
			}
			if len(patchedFiles[s.name]) == 0 {
				t.Fatalf("no expectations for %s", s.name)
			}
			for name, want := range patchedFiles[s.name] {
				b, err := os.ReadFile(filepath.Join(out, s.copyDir, name))
				if err != nil || !bytes.Contains(b, []byte(want)) {
					t.Errorf("%s: %v, lacks %q", name, err, want)
				}
			}
			// A rerun writes nothing; after a change, the same bytes as the first.
			zipPath, _ := quicGo(t, s)
			first := treeSum(t, out)
			if written, err := s.generate(modRoot(t, s), zipPath, out); err != nil || written {
				t.Errorf("second run: written %v, %v", written, err)
			}
			var changed string
			for name := range s.pinned {
				changed = name
			}
			if err := os.WriteFile(filepath.Join(out, s.copyDir, changed), []byte("package x\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if written, err := s.generate(modRoot(t, s), zipPath, out); err != nil || !written {
				t.Errorf("run after a change: written %v, %v", written, err)
			}
			if treeSum(t, out) != first {
				t.Error("a rerun wrote other files")
			}
		})
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
	for _, s := range sets {
		zipPath, goSum := quicGo(t, s)
		files, err := s.readModuleZip(zipPath, goSum)
		if err != nil {
			t.Fatal(err)
		}
		for name := range s.pinned {
			files[name] = append(files[name], "// changed\n"...)
			err = s.patch(files)
			if err == nil || !strings.Contains(err.Error(), name+": SHA-256") {
				t.Errorf("%s: got %v, want %s named with its SHA-256", s.name, err, name)
			}
			break
		}
	}
}

func TestRefusesAZipThatGoSumDoesNotName(t *testing.T) {
	for _, s := range sets {
		zipPath, goSum := quicGo(t, s)
		line := s.modulePath + " " + s.moduleVersion + " h1:"
		i := bytes.Index(goSum, []byte(line))
		if i < 0 {
			t.Fatalf("go.sum has no %q", line)
		}
		bad := append([]byte(nil), goSum...)
		bad[i+len(line)] ^= 1 // another hash
		if _, err := s.readModuleZip(zipPath, bad); err == nil || !strings.Contains(err.Error(), "go.sum has h1:") {
			t.Errorf("%s: got %v", s.name, err)
		}
	}
}

func TestPatchByName(t *testing.T) {
	if s := mustSet(t, defaultSet); s.modulePath != "github.com/quic-go/quic-go" || s.module != "." {
		t.Errorf("default: %+v", s)
	}
	if s := mustSet(t, "quic-go-v0.10.2-keep-ciphertext"); s.modulePath != "github.com/lucas-clemente/quic-go" || s.module != "gquic" {
		t.Errorf("gquic: %+v", s)
	}
	if _, err := set("quic-go-v0.10.2"); err == nil || !strings.Contains(err.Error(), "not one of quic-go-v0.65.0-cubic-params, quic-go-v0.10.2-keep-ciphertext") {
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
	if err := run("go", out, mustSet(t, defaultSet)); err == nil || !strings.Contains(err.Error(), "not writing there") {
		t.Errorf("got %v", err)
	}
}
