// Package maketest runs the Makefile's setup targets (make chromium, the tools
// and their shared cache) in scratch clones. The package managers and the Go
// builder they call are fakes first on the PATH: the Makefile is what is
// under test, and the fakes let a test be a mirror that no longer has a
// build, or count what was downloaded and built, without installing anything.
package maketest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// clone is a scratch checkout: an empty directory with the repository's
// Makefile, which is all the setup targets read.
func clone(t *testing.T) string {
	t.Helper()
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Makefile"), makefile, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// makefileVar is the value of a `NAME := value` line of the Makefile.
func makefileVar(t *testing.T, name string) string {
	t.Helper()
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` := (\S+)$`).FindSubmatch(makefile)
	if m == nil {
		t.Fatalf("the Makefile sets no %s", name)
	}
	return string(m[1])
}

// fakeBin writes executable scripts into a fresh directory, for the front
// of the PATH.
func fakeBin(t *testing.T, scripts map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, script := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// runMake runs make in dir with PATH starting at pathFirst and env added,
// and returns what it printed. The environment of an outer make (make test)
// and of the developer's setup is left out, so that only env decides.
func runMake(t *testing.T, dir, pathFirst string, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("make", append([]string{"-s", "--no-print-directory"}, args...)...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "CHROMIUM", "GO", "POINTLEDGER_TOOL_CACHE", "XDG_CACHE_HOME", "HOME", "PATH":
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, "HOME="+t.TempDir(), "PATH="+pathFirst+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}
