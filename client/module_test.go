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
// the placeholder version and a replace by the checkout's folder. It reads
// nothing from the network (GOPROXY=off, GOSUMDB=off): what it needs is in
// the module cache, as it is for this module's own build (issue 22, item 7).
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
