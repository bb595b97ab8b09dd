package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The examples of examples/ run against `make run` as its README says: the
// Go checkout over each protocol, and the TypeScript one (its pinned npm
// packages, its code generated from proto/ with its own buf and
// protoc-gen-es, type-checked, run with tsx) likewise. Each exits non-zero
// on any answer it did not expect. Then the quick start through a client
// generated from the OpenAPI description (openapi-typescript and
// openapi-fetch, type-checked without casts, run with node), and the
// commands of docs/clients.md answer as it shows.
func TestExamplesBesideMakeRun(t *testing.T) {
	t.Parallel()
	// The TypeScript is made ready while the stack starts.
	tsDir, openapiDir := t.TempDir(), t.TempDir()
	var tsErr, openapiErr error
	tsDone, openapiDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(tsDone); tsErr = prepareTSExample(tsDir) }()
	go func() { defer close(openapiDone); openapiErr = prepareOpenAPIExample(openapiDir) }()
	t.Cleanup(func() { <-tsDone; <-openapiDone }) // before the folders are removed

	goCheckout := filepath.Join(t.TempDir(), "checkout")
	if out, err := exec.Command("go", "build", "-o", goCheckout, "../../examples/go/checkout").CombinedOutput(); err != nil {
		t.Fatalf("go build examples/go/checkout: %v\n%s", err, out)
	}
	d := newDevstack(t)
	d.start(t)
	for _, protocol := range []string{"connect", "grpc", "grpcweb"} {
		if out, err := d.shell(". .local/dev.env && " + goCheckout + " -protocol " + protocol); err != nil || !strings.HasSuffix(out, "checkout ok\n") {
			t.Errorf("go checkout over %s: %v\n%s", protocol, err, out)
		}
	}
	<-tsDone
	if tsErr != nil {
		t.Fatalf("examples/ts: %v", tsErr)
	}
	out, err := d.shell(". .local/dev.env && cd " + tsDir + " && node_modules/.bin/tsx src/checkout.ts connect grpc grpcweb")
	if err != nil || strings.Count(out, "checkout ok\n") != 3 {
		t.Errorf("ts checkout over connect, grpc and grpcweb: %v\n%s", err, out)
	}
	<-openapiDone
	if openapiErr != nil {
		t.Fatalf("examples/openapi-ts: %v", openapiErr)
	}
	out, err = d.shell(". .local/dev.env && cd " + openapiDir + " && node build/quickstart.js")
	if err != nil || !strings.HasSuffix(out, "quickstart ok\n") {
		t.Errorf("quick start through the OpenAPI client: %v\n%s", err, out)
	}

	// docs/clients.md's commands, at the repository's root as it says: its
	// proto/ and .cache/bin/buf beside make run's .local/dev.env.
	for _, name := range []string{"proto", ".cache"} {
		target, err := filepath.Abs(filepath.Join("../..", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(d.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	steps := readSteps(t, "../../docs/clients.md", "clients")
	if len(steps) < 2 {
		t.Fatalf("docs/clients.md has %d commands, want curl's and buf curl's", len(steps))
	}
	for _, step := range steps {
		cmd := exec.Command("bash", "-c", step.command)
		cmd.Dir, cmd.Env = d.dir, d.env
		out, _ := cmd.CombinedOutput() // buf curl exits non-zero on a refusal, as it should
		if got, want := normalize(t, string(out)), normalize(t, step.answer); !reflect.DeepEqual(got, want) {
			t.Errorf("docs/clients.md command:\n%s\nanswered:\n%s\nthe docs show:\n%s", step.command, out, step.answer)
		}
	}
	d.interrupt(t)
}

// prepareTSExample copies examples/ts into dir with the node_modules that
// npm ci installs from its package-lock.json (npmCI), generates its
// TypeScript from proto/ with the buf and protoc-gen-es of those
// node_modules, and type-checks it. Without npm, or without the registry on
// a first run, it fails: CI has both.
func prepareTSExample(dir string) error {
	proto, err := filepath.Abs("../../proto")
	if err != nil {
		return err
	}
	return prepareNodeExample("../../examples/ts", dir, [][]string{
		{"node_modules/.bin/buf", "generate", proto, "--template", "buf.gen.yaml"}, // as npm run generate
		{"node_modules/.bin/tsc", "--noEmit"},                                      // as npm run typecheck
	})
}

// prepareOpenAPIExample copies examples/openapi-ts into dir as
// prepareTSExample does, generates its client's types from the OpenAPI
// description with openapi-typescript, and type-checks and compiles it to
// build/ with tsc (strict): a description that makes an answer's field
// optional, or requires a header ledgerd does not, fails here.
func prepareOpenAPIExample(dir string) error {
	spec, err := filepath.Abs("../../openapi/pointledger.v1.openapi.yaml")
	if err != nil {
		return err
	}
	return prepareNodeExample("../../examples/openapi-ts", dir, [][]string{
		{"node_modules/.bin/openapi-typescript", spec, "--output", "src/gen/pointledger.ts"}, // as npm run generate
		{"node_modules/.bin/tsc"}, // as npm run build
	})
}

// prepareNodeExample copies the example in src into dir, but for what npm
// and its steps make (node_modules, src/gen, build), links dir/node_modules
// to what npmCI installed, and runs steps in dir.
func prepareNodeExample(src, dir string, steps [][]string) error {
	src, err := filepath.Abs(src)
	if err != nil {
		return err
	}
	if _, err := exec.LookPath("npm"); err != nil {
		return fmt.Errorf("the TypeScript examples need Node.js and npm: %w", err)
	}
	modules, err := npmCI(src)
	if err != nil {
		return err
	}
	err = filepath.WalkDir(src, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		switch {
		case rel == "node_modules" || rel == filepath.Join("src", "gen") || rel == "build":
			return filepath.SkipDir // a developer's own npm ci, npm run generate and build
		case e.IsDir():
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), b, 0o644)
	})
	if err != nil {
		return err
	}
	if err := os.Symlink(modules, filepath.Join(dir, "node_modules")); err != nil {
		return err
	}
	for _, args := range steps {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w\n%s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// npmCI returns the node_modules folder of the example in src, installed
// by npm ci from its package-lock.json into .cache/examples-<its folder's
// name>/, under the hash of what npm reads, unless an earlier run did.
func npmCI(src string) (string, error) {
	h := sha256.New()
	contents := map[string][]byte{}
	for _, name := range []string{"package.json", "package-lock.json", ".npmrc"} {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			return "", err
		}
		contents[name] = b
		h.Write([]byte(name + "\x00"))
		h.Write(b)
	}
	cache, err := filepath.Abs("../../.cache/examples-" + filepath.Base(src))
	if err != nil {
		return "", err
	}
	final := filepath.Join(cache, hex.EncodeToString(h.Sum(nil))[:16])
	modules := filepath.Join(final, "node_modules")
	if _, err := os.Stat(modules); err == nil {
		return modules, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	// Installed aside, then renamed into place: a run that stops half way,
	// or another test binary installing at the same time, leaves no
	// half-filled folder at the final path.
	tmp, err := os.MkdirTemp(cache, "installing-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	for name, b := range contents {
		if err := os.WriteFile(filepath.Join(tmp, name), b, 0o644); err != nil {
			return "", err
		}
	}
	cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm ci (is the npm registry reachable?): %w\n%s", err, out)
	}
	if err := os.Rename(tmp, final); err != nil {
		if _, statErr := os.Stat(modules); statErr != nil { // not another's install
			return "", errors.Join(err, statErr)
		}
	}
	return modules, nil
}
