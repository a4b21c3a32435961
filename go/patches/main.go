// Command patches makes the quic-go releases that quicbed builds with, each
// with one of quicbed's patches (-patch NAME, one per Go module):
//
//   - quic-go-v0.65.0-cubic-params (the default), for the main module go/:
//     quic-go-v0.65.0-cubic-params.patch and the files in _quic-go-v0.65.0/
//     make CUBIC's emulated connections N and backoff beta, and the choice
//     between NewReno and CUBIC, run-time settings
//     (../cmd/quicbed-h3server/README.md);
//   - quic-go-v0.10.2-keep-ciphertext, for the gQUIC server's module go/gquic:
//     github.com/lucas-clemente/quic-go v0.10.2's server keeps a copy of a
//     packet while it tries its keys, so that a request Chromium sends with
//     its client hello is decrypted when it arrives (../gquic/README.md).
//
// Each is written into a directory of its own and built with -modfile:
//
//	cd go && go run ./patches -out ../build/quic-go-patched
//	go build -modfile ../build/quic-go-patched/quicbed.mod ./cmd/...
//	cd go && go run ./patches -patch quic-go-v0.10.2-keep-ciphertext -out ../build/quic-go-v0.10.2-patched
//	cd go/gquic && go build -modfile ../../build/quic-go-v0.10.2-patched/quicbed.mod ./cmd/...
//
// It takes quic-go's module zip from the module cache (the go command
// downloads it if needed), refuses any other version than the one the patch
// is for, checks the zip against the module's go.sum hash (the check `go mod
// verify` makes) and each file it patches against its pinned SHA-256, unpacks
// it into -out, applies the patch exactly (no fuzz, no offsets), adds the
// files, and writes quicbed.mod and quicbed.sum: the module's go.mod and
// go.sum plus a replace directive that points quic-go at the patched copy.
// go.mod and the module cache are not changed. The output depends only on the
// patch and quic-go's release, so builds with it stay reproducible as long as
// -out stays where it is (the replace path is recorded in the binary,
// relative to the module's directory).
//
// Not `go build -overlay`: the go command refuses overlays of files in the
// module cache ("Files beneath GOMODCACHE must not be replaced").
package main

import (
	"archive/zip"
	"bufio"
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Under -out: the module's alternative go.mod (and .sum); the patched module
// is in the patch set's copyDir.
const modFile = "quicbed.mod"

// A patchSet is one of quicbed's patches of one quic-go release, for one of
// quicbed's Go modules.
type patchSet struct {
	name          string // <name>.patch in this directory
	module        string // the Go module it is for: its directory, relative to go/
	modulePath    string // quic-go's module path
	moduleVersion string // the release the patch is for
	// pinned is the SHA-256 of every upstream file the patch changes, as the
	// release ships it. A quic-go bump fails here, naming the file: redo the
	// patch for the new version and pin its files.
	pinned   map[string]string
	addedDir string // files added to the module (embedded below)
	copyDir  string // under -out: the patched module
}

// defaultSet is the patch that `go run ./patches -out DIR` applies.
const defaultSet = "quic-go-v0.65.0-cubic-params"

var sets = []*patchSet{{
	name:          defaultSet,
	module:        ".",
	modulePath:    "github.com/quic-go/quic-go",
	moduleVersion: "v0.65.0",
	pinned: map[string]string{
		"internal/ackhandler/sent_packet_handler.go": "62165c46021a1a4b3b8401aeb5382c1720165f5f71caa69b411dc12eae68baf7",
		"internal/congestion/cubic.go":               "5f3c3d16c7758163f09e12ddf1da3703cabf8327effb2bd7dbf4384267a5eed1",
		"internal/congestion/cubic_sender.go":        "f0851305dab69494e3d3b81c3f437d25247db1026972cd23d743a5195f90f153",
		"internal/utils/connstats.go":                "15c1d9d7f0724ce855d24a066b8dd5027bb0d35b840921ce2b14c52a4b3039d8",
		"connection.go":                              "8b81ef81d9ddd638fd61cb53c3d3693c5ed83e93f5826cb934673b7d1c1ed6bc",
	},
	addedDir: "_quic-go-v0.65.0",
	copyDir:  "quic-go-v0.65.0",
}, {
	name:          "quic-go-v0.10.2-keep-ciphertext",
	module:        "gquic",
	modulePath:    "github.com/lucas-clemente/quic-go",
	moduleVersion: "v0.10.2",
	pinned: map[string]string{
		"internal/handshake/crypto_setup_server.go": "5178ab8d726d4e4814208af7ea8e4ea56855046ee3364aef029e5e77f781e31b",
		"internal/protocol/server_parameters.go":    "b389d4bc5388aaf6cb2fa8f9977390177c52e2923d539239cea6409313158b18",
		"session.go":                                "5c001003cf59e0a1a4d03d1ded3950799b30f46fd33991dd6bd62df7b9fb8b9d",
	},
	addedDir: "_quic-go-v0.10.2",
	copyDir:  "quic-go-v0.10.2",
}}

//go:embed quic-go-v0.65.0-cubic-params.patch quic-go-v0.10.2-keep-ciphertext.patch
var patches embed.FS

//go:embed all:_quic-go-v0.65.0 all:_quic-go-v0.10.2
var added embed.FS

// set returns the patch set called name.
func set(name string) (*patchSet, error) {
	var names []string
	for _, s := range sets {
		if s.name == name {
			return s, nil
		}
		names = append(names, s.name)
	}
	return nil, fmt.Errorf("-patch %q: not one of %s", name, strings.Join(names, ", "))
}

// text is the patch file.
func (s *patchSet) text() (string, error) {
	b, err := patches.ReadFile(s.name + ".patch")
	return string(b), err
}

func main() {
	out := flag.String("out", "", "directory to write the patched quic-go and "+modFile+" into (required)")
	goCmd := flag.String("go", "go", "the go command (asked for go.mod and quic-go's module zip)")
	name := flag.String("patch", defaultSet, "the patch to apply (it names the module it is for)")
	flag.Parse()
	if *out == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: go run ./patches -out DIR [-patch NAME] [-go GO]")
		os.Exit(2)
	}
	s, err := set(*name)
	if err != nil {
		fmt.Fprintf(os.Stderr, "quic-go patch: %v\n", err)
		os.Exit(2)
	}
	err = run(*goCmd, *out, s)
	if err != nil {
		fmt.Fprintf(os.Stderr, "quic-go patch: %v\n", err)
		os.Exit(1)
	}
}

func run(goCmd, out string, s *patchSet) error {
	b, err := goOutput(goCmd, "", "env", "GOMOD")
	if err != nil {
		return err
	}
	gomod := strings.TrimSpace(string(b))
	if gomod == "" || gomod == os.DevNull {
		return errors.New("run it inside quicbed's Go module (go/)")
	}
	// The module the patch is for, and the go command's view of it.
	modRoot := filepath.Join(filepath.Dir(gomod), filepath.FromSlash(s.module))
	if s.module != "." {
		b, err := goOutput(goCmd, modRoot, "env", "GOMOD")
		if err != nil {
			return err
		}
		if got := strings.TrimSpace(string(b)); got != filepath.Join(modRoot, "go.mod") {
			return fmt.Errorf("the patch %s is for the module in %s, but the go command finds %q there", s.name, modRoot, got)
		}
	}
	b, err = goOutput(goCmd, modRoot, "mod", "download", "-json", s.modulePath)
	var m struct{ Version, Zip, Error string }
	if jerr := json.Unmarshal(b, &m); jerr != nil && err == nil {
		err = jerr
	}
	switch {
	case m.Error != "":
		return fmt.Errorf("go mod download %s: %s", s.modulePath, m.Error)
	case err != nil:
		return err
	case m.Version != s.moduleVersion:
		return fmt.Errorf("go.mod requires %s %s, but the patch %s is for %s: redo it for the new version",
			s.modulePath, m.Version, s.name, s.moduleVersion)
	}
	written, err := s.generate(modRoot, m.Zip, out)
	if err == nil {
		verb := "unchanged"
		if written {
			verb = "written"
		}
		fmt.Printf("quic-go %s with %s.patch: %s in %s\n", s.moduleVersion, s.name, verb, out)
	}
	return err
}

// goOutput runs the go command in dir ("": the current directory).
func goOutput(goCmd, dir string, args ...string) ([]byte, error) {
	cmd := exec.Command(goCmd, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		err = fmt.Errorf("%s %s: %v %s", goCmd, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return b, err
}

// generate writes, under out, the patched copy of quic-go from zipPath and
// the module in modRoot's go.mod and go.sum with quic-go replaced by it. It
// writes nothing if out already holds exactly that, and says which.
func (s *patchSet) generate(modRoot, zipPath, out string) (written bool, err error) {
	out, err = filepath.Abs(out)
	if err != nil {
		return false, err
	}
	if ents, err := os.ReadDir(out); err == nil && len(ents) > 0 {
		if _, err := os.Stat(filepath.Join(out, modFile)); err != nil {
			return false, fmt.Errorf("-out %s is not empty and holds no %s: not writing there", out, modFile)
		}
	}
	goMod, err := os.ReadFile(filepath.Join(modRoot, "go.mod"))
	if err != nil {
		return false, err
	}
	goSum, err := os.ReadFile(filepath.Join(modRoot, "go.sum"))
	if err != nil {
		return false, err
	}
	if bytes.Contains(goMod, []byte("\nreplace")) {
		return false, errors.New("go.mod has replace directives already; " + modFile + " would add one for quic-go")
	}
	files, err := s.readModuleZip(zipPath, goSum)
	if err != nil {
		return false, err
	}
	if err := s.patch(files); err != nil {
		return false, err
	}
	rel, err := filepath.Rel(modRoot, filepath.Join(out, s.copyDir))
	if err != nil {
		return false, err
	}
	rel = filepath.ToSlash(rel)
	if !strings.HasPrefix(rel, "../") {
		rel = "./" + rel
	}
	flagText := "" // how the comment says it was made
	if s.name != defaultSet {
		flagText = " -patch " + s.name
	}
	want := map[string][]byte{ // by path under out
		modFile: fmt.Appendf(nil, "%s\n// Added by go/patches (go run ./patches%s -out ...): quic-go with quicbed's patch.\nreplace %s %s => %s\n",
			goMod, flagText, s.modulePath, s.moduleVersion, rel),
		strings.TrimSuffix(modFile, ".mod") + ".sum": goSum,
	}
	for name, b := range files {
		want[s.copyDir+"/"+name] = b
	}
	if sameFiles(out, s.copyDir, want) {
		return false, nil
	}
	if err := os.RemoveAll(filepath.Join(out, s.copyDir)); err != nil {
		return false, err
	}
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		p := filepath.Join(out, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return false, err
		}
		if err := os.WriteFile(p, want[name], 0o644); err != nil {
			return false, err
		}
	}
	return true, nil
}

// sameFiles reports whether dir holds the files in want (by slash path under
// dir) with that content, and no others in the patched module copyDir.
func sameFiles(dir, copyDir string, want map[string][]byte) bool {
	n := 0
	for name, w := range want {
		if !strings.HasPrefix(name, copyDir+"/") {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil || !bytes.Equal(b, w) {
				return false
			}
			n++
		}
	}
	err := filepath.WalkDir(filepath.Join(dir, copyDir), func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if w, ok := want[filepath.ToSlash(rel)]; err != nil || !ok || !bytes.Equal(b, w) {
			return fs.ErrNotExist // differs
		}
		n++
		return nil
	})
	return err == nil && n == len(want)
}

// readModuleZip returns the files of quic-go's module zip by their path in
// the module, after checking the zip against the h1: hash that goSum holds
// for it (golang.org/x/mod/sumdb/dirhash.HashZip, as `go mod verify` checks).
func (s *patchSet) readModuleZip(zipPath string, goSum []byte) (map[string][]byte, error) {
	var want string
	sc := bufio.NewScanner(bytes.NewReader(goSum))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == s.modulePath && f[1] == s.moduleVersion {
			want = f[2]
		}
	}
	if want == "" {
		return nil, fmt.Errorf("go.sum has no hash for %s %s", s.modulePath, s.moduleVersion)
	}
	zr, err := zip.OpenReader(zipPath)
	if err != nil {
		return nil, err
	}
	defer func() { _ = zr.Close() }() // read-only
	prefix := s.modulePath + "@" + s.moduleVersion + "/"
	files := map[string][]byte{}
	lines := map[string]string{} // by name in the zip
	for _, f := range zr.File {
		name, ok := strings.CutPrefix(f.Name, prefix)
		if !ok || strings.Contains(f.Name, "\n") || path.Clean(name) != name || strings.HasPrefix(name, "../") {
			return nil, fmt.Errorf("%s: unexpected file %q", zipPath, f.Name)
		}
		r, err := f.Open()
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(r)
		_ = r.Close() // read-only; a bad entry fails ReadAll or the hash below
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %v", zipPath, f.Name, err)
		}
		files[name] = b
		lines[f.Name] = fmt.Sprintf("%x  %s\n", sha256.Sum256(b), f.Name)
	}
	names := make([]string, 0, len(lines))
	for name := range lines {
		names = append(names, name)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, name := range names {
		_, _ = io.WriteString(h, lines[name]) // a hash.Hash never returns an error
	}
	if got := "h1:" + base64.StdEncoding.EncodeToString(h.Sum(nil)); got != want {
		return nil, fmt.Errorf("%s: hash %s, go.sum has %s", zipPath, got, want)
	}
	return files, nil
}

// patch applies the patch to files (the module by path), adds the files of
// its addedDir and quicbed_patch.go, which names the patch by digest (in the
// root package, quic in both releases).
func (s *patchSet) patch(files map[string][]byte) error {
	patchText, err := s.text()
	if err != nil {
		return err
	}
	diffs, err := parsePatch(patchText)
	if err != nil {
		return fmt.Errorf("%s.patch: %v", s.name, err)
	}
	if len(diffs) != len(s.pinned) {
		return fmt.Errorf("%s.patch changes %d files, %d are pinned", s.name, len(diffs), len(s.pinned))
	}
	for _, d := range diffs {
		want, ok := s.pinned[d.path]
		if !ok {
			return fmt.Errorf("%s.patch changes %s, which has no pinned SHA-256", s.name, d.path)
		}
		orig, ok := files[d.path]
		if !ok {
			return fmt.Errorf("quic-go %s has no %s", s.moduleVersion, d.path)
		}
		if sum := sha256.Sum256(orig); hex.EncodeToString(sum[:]) != want {
			return fmt.Errorf("quic-go %s %s: SHA-256 %x, the patch is for %s (quic-go bumped?)",
				s.moduleVersion, d.path, sum, want)
		}
		patched, err := d.apply(orig)
		if err != nil {
			return fmt.Errorf("%s.patch, %s: %v", s.name, d.path, err)
		}
		files[d.path] = patched
	}
	digest := sha256.New()
	fmt.Fprintf(digest, "%s.patch\x00%s\x00", s.name, patchText)
	err = fs.WalkDir(added, s.addedDir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		name := strings.TrimPrefix(p, s.addedDir+"/")
		if _, ok := files[name]; ok {
			return fmt.Errorf("%s/%s would replace quic-go's own file", s.addedDir, name)
		}
		b, err := added.ReadFile(p)
		if err != nil {
			return err
		}
		files[name] = b
		fmt.Fprintf(digest, "%s\x00%s\x00", name, b) // WalkDir goes in lexical order
		return nil
	})
	if err != nil {
		return err
	}
	id := fmt.Sprintf("%s sha256:%x", s.name, digest.Sum(nil))
	files["quicbed_patch.go"] = []byte("// Code generated by quicbed's go/patches; DO NOT EDIT.\n\npackage quic\n\n" +
		"// QuicbedPatch names quicbed's build-time patch of quic-go and its digest.\n" +
		"const QuicbedPatch = " + strconv.Quote(id) + "\n")
	return nil
}

// fileDiff is one file's hunks of a unified diff.
type fileDiff struct {
	path  string
	hunks []hunk
}

type hunk struct {
	oldStart int      // 1-based line of the first old line
	old, new []string // lines without their newline
}

// parsePatch reads a unified diff (`--- a/PATH`, `+++ b/PATH`, `@@ -l,s +l,s @@`
// hunks); text before the first `--- ` is a comment.
func parsePatch(text string) ([]fileDiff, error) {
	lines := strings.SplitAfter(text, "\n")
	var diffs []fileDiff
	i := 0
	for i < len(lines) && !strings.HasPrefix(lines[i], "--- ") {
		i++
	}
	for i < len(lines) && lines[i] != "" {
		l := lines[i]
		if !strings.HasPrefix(l, "--- a/") || i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "+++ b/") {
			return nil, fmt.Errorf("line %d: want a `--- a/PATH` and `+++ b/PATH` pair, got %q", i+1, strings.TrimSpace(l))
		}
		p := strings.TrimSpace(strings.TrimPrefix(l, "--- a/"))
		if q := strings.TrimSpace(strings.TrimPrefix(lines[i+1], "+++ b/")); q != p || path.Clean(p) != p || strings.HasPrefix(p, "../") {
			return nil, fmt.Errorf("line %d: paths %q and %q", i+1, p, q)
		}
		d := fileDiff{path: p}
		i += 2
		for i < len(lines) && strings.HasPrefix(lines[i], "@@ ") {
			m := hunkHeader.FindStringSubmatch(lines[i])
			if m == nil {
				return nil, fmt.Errorf("line %d: hunk header %q", i+1, strings.TrimSpace(lines[i]))
			}
			h := hunk{oldStart: atoi(m[1], 1)}
			oldN, newN := atoi(m[2], 1), atoi(m[4], 1)
			i++
			for (len(h.old) < oldN || len(h.new) < newN) && i < len(lines) && lines[i] != "" {
				l := strings.TrimSuffix(lines[i], "\n")
				switch {
				case strings.HasPrefix(l, " ") || l == "":
					h.old, h.new = append(h.old, strings.TrimPrefix(l, " ")), append(h.new, strings.TrimPrefix(l, " "))
				case strings.HasPrefix(l, "-"):
					h.old = append(h.old, l[1:])
				case strings.HasPrefix(l, "+"):
					h.new = append(h.new, l[1:])
				default:
					return nil, fmt.Errorf("line %d: %q in a hunk", i+1, l)
				}
				i++
			}
			if len(h.old) != oldN || len(h.new) != newN {
				return nil, fmt.Errorf("hunk at old line %d of %s: %d/%d lines, header says %d/%d", h.oldStart, p, len(h.old), len(h.new), oldN, newN)
			}
			d.hunks = append(d.hunks, h)
		}
		if len(d.hunks) == 0 {
			return nil, fmt.Errorf("%s: no hunks", p)
		}
		diffs = append(diffs, d)
	}
	if len(diffs) == 0 {
		return nil, errors.New("no file diffs")
	}
	sort.Slice(diffs, func(a, b int) bool { return diffs[a].path < diffs[b].path })
	return diffs, nil
}

// hunkHeader is `@@ -OLD[,N] +NEW[,N] @@`; a missing count is 1.
var hunkHeader = regexp.MustCompile(`^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@`)

func atoi(s string, missing int) int {
	if s == "" {
		return missing
	}
	n, _ := strconv.Atoi(s) // the regexp matched digits
	return n
}

// apply returns src with the hunks applied; every old line must be exactly
// where its hunk says.
func (d fileDiff) apply(src []byte) ([]byte, error) {
	if !bytes.HasSuffix(src, []byte("\n")) {
		return nil, errors.New("file does not end in a newline")
	}
	lines := strings.Split(strings.TrimSuffix(string(src), "\n"), "\n")
	var out []string
	next := 0 // index of the first line not yet copied
	for _, h := range d.hunks {
		at := h.oldStart - 1
		if at < next || at+len(h.old) > len(lines) {
			return nil, fmt.Errorf("hunk at line %d is out of order or past the end", h.oldStart)
		}
		for k, want := range h.old {
			if lines[at+k] != want {
				return nil, fmt.Errorf("line %d is %q, the hunk expects %q", at+k+1, lines[at+k], want)
			}
		}
		out = append(out, lines[next:at]...)
		out = append(out, h.new...)
		next = at + len(h.old)
	}
	out = append(out, lines[next:]...)
	return []byte(strings.Join(out, "\n") + "\n"), nil
}
