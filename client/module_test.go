package client_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestUsableFromAnotherModule builds a program in a module of its own that
// depends on this one with the go.mod lines docs/clients.md shows (the module path is not
// published, so a require alone asks the proxy and fails): a require of
// the placeholder version and a replace by the checkout's folder. The module
// of its own reads nothing from the network (GOPROXY=off, GOSUMDB=off): what
// it needs is in the module cache (issue 22, item 7). A build of this module
// does not put all of that there, and an empty module cache has none of the
// rest (issue 31): `go mod tidy` reads the go.mod of every module in the
// graph (oklog/ulid/v2's go.mod is of go 1.15, so the graph holds its
// requirement pborman/getopt, unpruned) and the packages that dependencies'
// tests import (connect's tests import go-cmp). So prefetch first fetches
// those, then the test goes offline.
func TestUsableFromAnotherModule(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "clients.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, lines, ok := strings.Cut(string(doc), "<!-- gomod:begin -->\n```\n")
	lines, _, ok2 := strings.Cut(lines, "```\n<!-- gomod:end -->")
	if !ok || !ok2 || !strings.Contains(lines, "=> ../pointledger\n") {
		t.Fatalf("docs/clients.md has no go.mod lines between gomod:begin and gomod:end that replace by ../pointledger")
	}
	dir := t.TempDir()
	goMod := "module example.com/shop\n\ngo 1.26\n\n" + strings.Replace(lines, "=> ../pointledger", "=> "+root, 1)
	mainGo := `package main

import (
	"fmt"

	"github.com/pointledger/pointledger/client"
	pointledgerv1 "github.com/pointledger/pointledger/gen/pointledger/v1"
)

func main() {
	c := client.New("http://127.0.0.1:1", client.WithToken("t"))
	_ = c.Ledger
	fmt.Println(client.ReasonInsufficientBalance, (&pointledgerv1.PurchaseRequest{UserId: "alice"}).GetUserId())
}
`
	// This module's go.sum vouches for the modules both need, so that no
	// checksum database is asked (GOSUMDB=off: this machine reaches none).
	goSum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"go.mod": goMod, "main.go": mainGo, "go.sum": string(goSum)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	prefetch(t, root, "github.com/pointledger/pointledger/client", "github.com/pointledger/pointledger/gen/pointledger/v1")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOPROXY=off", "GOSUMDB=off", "GOFLAGS=-mod=mod", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s in a module of its own: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("mod", "tidy")
	if out := run("run", "."); !strings.Contains(out, "INSUFFICIENT_BALANCE alice") {
		t.Errorf("the program printed %q", out)
	}
}

// prefetch puts in the module cache what `go mod tidy` of a module that
// imports pkgs (of this module, in root) reads, with the go command's own
// settings (GOPROXY as the build's: it fetches what the cache lacks, and
// nothing when it has it all): the go.mod files of this module's whole
// graph (`go mod graph`, not `go list -m`, which
// also wants each module's .info), and the modules of the packages that pkgs import and that their
// tests import, one level down, as tidy loads them.
func prefetch(t *testing.T, root string, pkgs ...string) {
	t.Helper()
	goCmd := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go %s in %s, to fill the module cache before going offline: %v\n%s", strings.Join(args, " "), root, err, stderr.String())
		}
		return string(out)
	}
	goCmd("mod", "graph")
	deps := strings.Fields(goCmd(append([]string{"list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}"}, pkgs...)...))
	goCmd(append([]string{"list", "-test", "-deps", "-f", "{{.ImportPath}}"}, deps...)...)
}
