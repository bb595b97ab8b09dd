package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/auth"
	"github.com/pointledger/pointledger/internal/dynamolocal"
	"github.com/pointledger/pointledger/internal/dynamotest"
)

func TestMain(m *testing.M) {
	code := dynamotest.Run(m)
	if build.dir != "" {
		_ = os.RemoveAll(build.dir)
	}
	os.Exit(code)
}

// build is ledgerd, built once for all the package's tests: a link takes
// more than a second of CPU, and most tests start a ledgerd.
var build struct {
	once sync.Once
	dir  string
	err  error
}

func ledgerdBinary(t testing.TB) string {
	t.Helper()
	build.once.Do(func() {
		if build.dir, build.err = os.MkdirTemp("", "ledgerd-test-"); build.err != nil {
			return
		}
		if out, err := exec.Command("go", "build", "-o", filepath.Join(build.dir, "ledgerd"), ".").CombinedOutput(); err != nil {
			build.err = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return filepath.Join(build.dir, "ledgerd")
}

// ledgerdProcess is the real binary, built from this package and serving
// against the test binary's DynamoDB Local.
type ledgerdProcess struct {
	addr     string
	opsAddr  string // its operations listener
	bin      string
	env      []string
	prefix   string // of the tables
	insecure bool   // -insecure-dev: no credentials
	cmd      *exec.Cmd
	out      *dynamolocal.Output // its stdout and stderr
	creds    auth.DevCredentials // its auth file: LEDGER_AUTH_FILE in env
}

// ledgerClient calls p's LedgerService as a trusted service.
func (p *ledgerdProcess) ledgerClient(opts ...connect.ClientOption) pointledgerv1connect.LedgerServiceClient {
	opts = append(opts, connect.WithInterceptors(auth.Bearer(p.creds.ServiceToken)))
	return pointledgerv1connect.NewLedgerServiceClient(http.DefaultClient, "http://"+p.addr, opts...)
}

// startLedgerd builds and starts ledgerd with fresh credentials; extraEnv
// (NAME=value) overrides its environment.
func startLedgerd(t testing.TB, extraEnv ...string) *ledgerdProcess {
	t.Helper()
	return startLedgerdAuth(t, false, extraEnv...)
}

// startLedgerdAuth starts ledgerd with fresh credentials, or with none and
// -insecure-dev.
func startLedgerdAuth(t testing.TB, insecure bool, extraEnv ...string) *ledgerdProcess {
	t.Helper()
	p := newLedgerd(t, insecure, extraEnv...)
	p.start(t)
	return p
}

// newLedgerd makes ready a ledgerd of a deployment of its own: its tables
// migrated, fresh credentials (or none, insecure), its environment, a free
// port; start serves it.
func newLedgerd(t testing.TB, insecure bool, extraEnv ...string) *ledgerdProcess {
	t.Helper()
	emu := dynamotest.Emulator(t)
	bin := ledgerdBinary(t)
	prefix := strings.ReplaceAll(t.Name(), "/", "_") + "_"
	creds := auth.GenerateDev()
	authFile := filepath.Join(t.TempDir(), "credentials.json")
	if err := os.WriteFile(authFile, creds.Credentials.JSON(), 0o600); err != nil {
		t.Fatal(err)
	}
	if insecure {
		authFile = ""
	}
	env := append(os.Environ(),
		"LEDGER_AUTH_FILE="+authFile,
		"LEDGER_PEER_TOKEN="+creds.PeerToken, // only read with -peers
		"LEDGER_DYNAMODB_ENDPOINT="+emu.Endpoint,
		"LEDGER_TABLE_PREFIX="+prefix,
		"LEDGER_LOG_FORMAT=text",
	)
	env = append(env, extraEnv...)
	for range 2 { // migrate is idempotent
		migrate := exec.Command(bin, "migrate")
		migrate.Env = env
		if out, err := migrate.CombinedOutput(); err != nil {
			t.Fatalf("ledgerd migrate: %v\n%s", err, out)
		}
	}
	p := &ledgerdProcess{bin: bin, env: env, prefix: prefix, insecure: insecure, creds: creds}
	return p.another(t)
}

// another is one more ledgerd of p's deployment: the same tables,
// credentials and environment, on a free port of its own.
func (p *ledgerdProcess) another(t testing.TB) *ledgerdProcess {
	t.Helper()
	port, err := dynamolocal.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return &ledgerdProcess{addr: fmt.Sprintf("127.0.0.1:%d", port), bin: p.bin, env: p.env, prefix: p.prefix,
		insecure: p.insecure, out: &dynamolocal.Output{}, creds: p.creds}
}

// start serves p, with args added to serve's, until the test ends, and
// waits until it is healthy.
func (p *ledgerdProcess) start(t testing.TB, args ...string) {
	t.Helper()
	// Port 0: tests run side by side, each ledgerd with its own.
	serveArgs := []string{"serve", "-ops-listen", "127.0.0.1:0"}
	if p.insecure {
		serveArgs = append(serveArgs, "-insecure-dev")
	}
	p.cmd = exec.Command(p.bin, append(append(serveArgs, args...), "-listen", p.addr)...)
	p.cmd.Env = p.env
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		if t.Failed() {
			t.Logf("ledgerd %s output:\n%s", p.addr, p.out)
		}
	})
	deadline := time.Now().Add(2 * time.Minute) // bounds a hang; says nothing about speed
	for {
		res, err := http.Get("http://" + p.addr + "/healthz")
		if err == nil {
			res.Body.Close()
			// The operations listener is bound, and logged, before the
			// API's port serves; but its log line reaches p.out through a
			// pipe copied by another goroutine, which a busy machine may
			// run after the health check answered: wait for both.
			if m := opsListenLog.FindStringSubmatch(p.out.String()); res.StatusCode == http.StatusOK && m != nil {
				p.opsAddr = m[1]
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("ledgerd not healthy after 2 minutes: %v\n%s", err, p.out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

var opsListenLog = regexp.MustCompile(`ops_listen=(\S+)`)

// opsAddr is the address of the operations listener a ledgerd logged (text
// format).
func opsAddr(tb testing.TB, log string) string {
	tb.Helper()
	m := opsListenLog.FindStringSubmatch(log)
	if m == nil {
		tb.Fatalf("ledgerd did not log its operations listener (ops_listen=):\n%s", log)
	}
	return m[1]
}

// quickstartStep is one command of the README's quick start and the answer
// the README shows for it.
type quickstartStep struct {
	command string
	answer  string
}

var codeBlock = regexp.MustCompile("(?s)```(sh|json)\n(.*?)```")

func readQuickstart(t *testing.T) []quickstartStep {
	t.Helper()
	return readSteps(t, "../../README.md", "quickstart")
}

// readSteps returns the commands (sh blocks) of a Markdown file between
// <!-- name:begin --> and <!-- name:end -->, each with the answer (the json
// block after it) that the file shows.
func readSteps(t *testing.T, path, name string) []quickstartStep {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "<!-- "+name+":begin -->")
	section, _, ok2 := strings.Cut(section, "<!-- "+name+":end -->")
	if !ok || !ok2 {
		t.Fatalf("%s has no %s:begin/end section", path, name)
	}
	var steps []quickstartStep
	for _, m := range codeBlock.FindAllStringSubmatch(section, -1) {
		switch m[1] {
		case "sh":
			steps = append(steps, quickstartStep{command: m[2]})
		case "json":
			if len(steps) == 0 || steps[len(steps)-1].answer != "" {
				t.Fatalf("%s, %s: a json block without its command: %s", path, name, m[2])
			}
			steps[len(steps)-1].answer = m[2]
		}
	}
	return steps
}

// normalize parses a JSON answer and blanks what differs from run to run.
func normalize(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, s)
	}
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				// A page token is signed with a key derived from the
				// table names, which differ here.
				// A webhook endpoint's id and secret are drawn at random.
				// A reconciliation's start, duration and months of
				// liability are those of the run.
				if k == "entry_id" || k == "create_time" || k == "update_time" || k == "next_page_token" || k == "expire_time" ||
					k == "effective_time" || k == "endpoint_id" || k == "secret" ||
					k == "startTime" || k == "duration" || k == "month" {
					v[k] = "<" + k + ">"
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(v)
	return v
}

// TestReadmeQuickstart runs the README's quick start against a real
// ledgerd, as a newcomer would after make run, comparing each answer with
// the one the README shows; then, in the order a reader meets them, the
// tested commands of docs/ that go on from it (docsAfterQuickstart).
func TestReadmeQuickstart(t *testing.T) {
	t.Parallel()
	// The history read waits for its min_version for up to 30 s instead of
	// 2: a machine busy with other tests may lag that long, and what is
	// checked here is the answer, not the lag.
	// Webhook endpoints on loopback over http, as make run allows them.
	p := startLedgerd(t, "LEDGER_HISTORY_WAIT=30s", "LEDGER_WEBHOOK_ALLOW_HTTP=true", "LEDGER_WEBHOOK_ALLOW_LOOPBACK=true")
	steps := readQuickstart(t)
	if len(steps) < 5 {
		t.Fatalf("README quick start has %d commands, want grant, purchase, refund, balance and more", len(steps))
	}
	for _, step := range steps {
		// The commands call $LEDGER_URL, which .local/dev.env sets, so they
		// work on whatever port make run serves (issue 22, item 7).
		if !strings.Contains(step.command, `"$LEDGER_URL/`) || strings.Contains(step.command, "localhost:") {
			t.Fatalf("README command does not call \"$LEDGER_URL/...\": %s", step.command)
		}
		if step.answer == "" {
			t.Fatalf("README command has no answer shown: %s", step.command)
		}
		cmd := step.command
		want := normalize(t, step.answer)
		// Each command runs once: the history read asks for min_version, so
		// ledgerd waits for the projection itself.
		c := exec.Command("bash", "-c", cmd)
		c.Env = append(os.Environ(), "TOKEN="+p.creds.ServiceToken, "ADMIN_TOKEN="+p.creds.AdminToken, "LEDGER_URL=http://"+p.addr)
		out, err := c.Output()
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		if got := normalize(t, string(out)); !reflect.DeepEqual(got, want) {
			t.Errorf("README command:\n%s\nanswered:\n%s\nREADME shows:\n%s", step.command, out, step.answer)
		}
	}
	if !t.Failed() { // the docs go on from alice's state
		docsAfterQuickstart(t, p)
	}
}

// docRun is a folder standing in for the repository's root, as a reader
// after the quick start has it: make run's .local/dev.env (for p), and
// go.mod, go.sum, examples/, proto/ and .cache/ (buf) linked to the
// repository's. The example receiver gets a free port (WEBHOOK_LISTEN),
// and the docs' 127.0.0.1:9000 becomes that port in the commands and the
// answers: 9000 may be another test's, or a developer's receiver.
type docRun struct {
	dir, receiverAddr string
	env               []string
	receiver          *dynamolocal.Output // what the receiver prints, once started
}

func newDocRun(t *testing.T, p *ledgerdProcess) *docRun {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, ".local"), 0o755); err != nil {
		t.Fatal(err)
	}
	devEnv := fmt.Sprintf("export LEDGER_URL=http://%s\nexport LEDGER_OPS_URL=http://%s\nexport TOKEN=%s\nexport ADMIN_TOKEN=%s\n",
		p.addr, p.opsAddr, p.creds.ServiceToken, p.creds.AdminToken)
	if err := os.WriteFile(filepath.Join(dir, ".local", "dev.env"), []byte(devEnv), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"go.mod", "go.sum", "examples", "proto", ".cache"} {
		target, err := filepath.Abs(filepath.Join("../..", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	port, err := dynamolocal.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	// No LEDGER_URL or tokens of the test's own: the commands load
	// .local/dev.env, as the docs say, or fail.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEDGER_") && !strings.HasPrefix(kv, "TOKEN=") && !strings.HasPrefix(kv, "ADMIN_TOKEN=") {
			env = append(env, kv)
		}
	}
	return &docRun{dir: dir, receiverAddr: addr, env: append(env, "WEBHOOK_LISTEN="+addr)}
}

// command is a docs command as it runs here: bash, strict, in the folder.
func (r *docRun) command(text string) *exec.Cmd {
	c := exec.Command("bash", "-euo", "pipefail", "-c", strings.ReplaceAll(text, "127.0.0.1:9000", r.receiverAddr))
	c.Dir, c.Env = r.dir, r.env
	return c
}

// docsAfterQuickstart runs, after the README's quick start and in this
// order, what docs/ says to run next: reconciliation over the API
// (operations.md, reconcile: its report compared with the one shown), the
// pending grant and its reversal (design.md, pending: each answer
// compared), the example receiver's delivery (operations.md, receiver: the
// answers compared, the receiver's lines waited for), and the webhook
// operations that follow it (operations.md, webhooks: each exits 0 and
// answers no error; the redelivery reaches the receiver as a backfill and
// a duplicate, nothing OUT OF ORDER), and last the point kinds (design.md,
// kinds: each answer compared; hanako's, so no answer above changes).
func docsAfterQuickstart(t *testing.T, p *ledgerdProcess) {
	t.Helper()
	r := newDocRun(t, p)
	r.runReconcile(t)
	r.runAnswered(t, "../../docs/design.md", "pending")
	r.runReceiver(t)
	r.runOperationsWebhooks(t)
	r.runAnswered(t, "../../docs/design.md", "kinds")
}

// runReconcile runs operations.md's AdminService.Reconcile command (buf
// curl, a server stream): it must exit 0 and end with the report shown.
func (r *docRun) runReconcile(t *testing.T) {
	t.Helper()
	steps := readSteps(t, "../../docs/operations.md", "reconcile")
	if len(steps) != 1 || !strings.Contains(steps[0].command, "AdminService/Reconcile") || steps[0].answer == "" {
		t.Fatalf("docs/operations.md's reconcile section: %d commands, want the Reconcile RPC's, with its report", len(steps))
	}
	if _, err := os.Stat("../../.cache/bin/buf"); err != nil {
		t.Fatalf("docs/operations.md's Reconcile command calls .cache/bin/buf: make setup (or make tools) puts it there: %v", err)
	}
	out, err := r.command(steps[0].command).CombinedOutput()
	if err != nil {
		t.Fatalf("docs/operations.md command:\n%s\nfailed (%v):\n%s", steps[0].command, err, out)
	}
	var last json.RawMessage
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var msg json.RawMessage
		if err := dec.Decode(&msg); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("docs/operations.md command:\n%s\nprinted no JSON stream (%v):\n%s", steps[0].command, err, out)
		}
		if last != nil {
			if !bytes.Contains(last, []byte(`"progress"`)) {
				t.Errorf("Reconcile sent %s before its last message; want progress only", last)
			}
		}
		last = msg
	}
	if got, want := normalize(t, string(last)), normalize(t, steps[0].answer); !reflect.DeepEqual(got, want) {
		t.Errorf("docs/operations.md command:\n%s\nended with:\n%s\nthe docs show:\n%s", steps[0].command, last, steps[0].answer)
	}
}

// runAnswered runs the commands of a section of path, each compared with
// the JSON answer the page shows after it.
func (r *docRun) runAnswered(t *testing.T, path, section string) {
	t.Helper()
	steps := readSteps(t, path, section)
	if len(steps) == 0 {
		t.Fatalf("%s's %s section has no command", path, section)
	}
	for _, step := range steps {
		if step.answer == "" {
			t.Fatalf("%s command has no answer shown: %s", path, step.command)
		}
		out, err := r.command(step.command).Output()
		if err != nil {
			t.Fatalf("%s command:\n%s\nfailed: %v", path, step.command, err)
		}
		if got, want := normalize(t, string(out)), normalize(t, step.answer); !reflect.DeepEqual(got, want) {
			t.Errorf("%s command:\n%s\nanswered:\n%s\nthe page shows:\n%s", path, step.command, out, step.answer)
		}
	}
}

// webhookStep is one command of operations.md's receiver section, with
// the JSON answer it shows (if any) and the lines the receiver prints after
// it (a text block).
type webhookStep struct {
	command, answer, printed string
}

var webhookBlock = regexp.MustCompile("(?s)```(sh|json|text)\n(.*?)```")

func readWebhookSteps(t *testing.T) []webhookStep {
	t.Helper()
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "<!-- receiver:begin -->")
	section, _, ok2 := strings.Cut(section, "<!-- receiver:end -->")
	if !ok || !ok2 {
		t.Fatal("docs/operations.md has no receiver:begin/end section")
	}
	var steps []webhookStep
	for _, m := range webhookBlock.FindAllStringSubmatch(section, -1) {
		if m[1] == "sh" {
			steps = append(steps, webhookStep{command: m[2]})
			continue
		}
		if len(steps) == 0 {
			t.Fatalf("docs/operations.md receiver: a %s block before any command: %s", m[1], m[2])
		}
		last := &steps[len(steps)-1]
		if m[1] == "json" {
			last.answer = m[2]
		} else {
			last.printed = m[2]
		}
	}
	return steps
}

// runReceiver runs operations.md's receiver section as a newcomer would:
// it creates the endpoint and keeps the answer in .local/, starts the
// example receiver with the secret read from that answer (the command as
// the page writes it), makes the grant, and waits until the receiver has
// printed the lines the page shows: a delivery it verified with the secret
// of the answer.
func (r *docRun) runReceiver(t *testing.T) {
	t.Helper()
	for _, step := range readWebhookSteps(t) {
		c := r.command(step.command)
		if strings.Contains(step.command, "webhook-receiver") {
			r.receiver = startReceiver(t, c)
		} else {
			out, err := c.Output()
			if err != nil {
				t.Fatalf("docs/operations.md command:\n%s\nfailed: %v", step.command, err)
			}
			switch {
			case step.answer != "":
				want := normalize(t, strings.ReplaceAll(step.answer, "127.0.0.1:9000", r.receiverAddr))
				if got := normalize(t, string(out)); !reflect.DeepEqual(got, want) {
					t.Fatalf("docs/operations.md command:\n%s\nanswered:\n%s\nthe page shows:\n%s", step.command, out, step.answer)
				}
			case strings.Contains(string(out), `"code":`) || !json.Valid(out):
				t.Fatalf("docs/operations.md command:\n%s\nanswered: %s", step.command, out)
			}
		}
		if step.printed == "" {
			continue
		}
		if r.receiver == nil {
			t.Fatalf("docs/operations.md receiver: the receiver's lines come before it starts:\n%s", step.printed)
		}
		waitForLines(t, r.receiver, strings.ReplaceAll(step.printed, "127.0.0.1:9000", r.receiverAddr))
	}
	if r.receiver == nil {
		t.Fatal("docs/operations.md receiver: no command starts the receiver")
	}
}

// runOperationsWebhooks runs the commands of docs/operations.md's webhooks
// section, which it says work after its receiver steps, in the same
// folder: each must exit 0 and answer no error. Its redelivery from
// version 1 must reach the receiver: alice's versions 1 to 7, older than
// the endpoint, as a backfill, and version 8 again as a duplicate; none of
// it OUT OF ORDER (issue 31).
func (r *docRun) runOperationsWebhooks(t *testing.T) {
	t.Helper()
	steps := readSteps(t, "../../docs/operations.md", "webhooks")
	if len(steps) < 3 {
		t.Fatalf("docs/operations.md has %d webhook commands, want the status, the deliveries, a redelivery and more", len(steps))
	}
	redelivered := false
	for _, step := range steps {
		out, err := r.command(step.command).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) == "" || strings.Contains(string(out), `"code":`) {
			t.Fatalf("docs/operations.md command:\n%s\nanswered (%v):\n%s", step.command, err, out)
		}
		redelivered = redelivered || strings.Contains(step.command, "RedeliverWebhookEvents")
	}
	if !redelivered {
		t.Fatal("docs/operations.md's webhook commands redeliver nothing")
	}
	waitForOutput(t, r.receiver, "alice's version 8 again, as a duplicate", func(line string) bool {
		return strings.HasPrefix(line, "alice version 8 points.granted: duplicate of webhook-id ")
	})
	for v := 1; v <= 7; v++ {
		prefix := fmt.Sprintf("alice version %d ", v)
		waitForOutput(t, r.receiver, fmt.Sprintf("alice's version %d as a backfill", v), func(line string) bool {
			return strings.HasPrefix(line, prefix) && strings.HasSuffix(line, " (a backfill: older than version 8, the first received)")
		})
	}
	if strings.Contains(r.receiver.String(), "OUT OF ORDER") || strings.Contains(r.receiver.String(), "GAP") {
		t.Errorf("the receiver found the documented deliveries out of order:\n%s", r.receiver)
	}
}

// startReceiver starts the docs' receiver command c in a process group
// of its own (go run's child included), stopped when the test ends, and
// waits until it listens.
func startReceiver(t *testing.T, c *exec.Cmd) *dynamolocal.Output {
	t.Helper()
	out := &dynamolocal.Output{}
	c.Stdout, c.Stderr = out, out
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = c.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGINT)
		<-exited
		if t.Failed() {
			t.Logf("the webhook receiver printed:\n%s", out)
		}
	})
	// go run builds it first: a bound on a hang, not on speed.
	deadline := time.Now().Add(5 * time.Minute)
	for !strings.Contains(out.String(), "listening on ") {
		select {
		case <-exited:
			t.Fatalf("the webhook receiver exited:\n%s", out)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the webhook receiver did not listen within 5 minutes:\n%s", out)
		}
	}
	return out
}

// waitForLines waits until the receiver has printed each line of want as
// a line of its own: a delivery it verified, of the version and type the
// docs show, with nothing noticed about its order.
func waitForLines(t *testing.T, receiver *dynamolocal.Output, want string) {
	t.Helper()
	for _, w := range strings.Split(strings.TrimSpace(want), "\n") {
		waitForOutput(t, receiver, strconv.Quote(w), func(line string) bool { return line == w })
	}
}

// waitForOutput waits until the receiver has printed a line that matches.
func waitForOutput(t *testing.T, receiver *dynamolocal.Output, what string, match func(line string) bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute) // a bound on a hang, not on speed
	for {
		if slices.ContainsFunc(strings.Split(receiver.String(), "\n"), match) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the webhook receiver did not print %s within 2 minutes; it printed:\n%s", what, receiver)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// One port serves Connect, gRPC over h2c and gRPC-Web.
func TestServeSpeaksGRPCAndGRPCWebAndStopsGracefully(t *testing.T) {
	t.Parallel()
	p := startLedgerd(t)
	h2c := &http.Client{Transport: &http.Transport{
		Protocols: func() *http.Protocols {
			var ps http.Protocols
			ps.SetUnencryptedHTTP2(true)
			return &ps
		}(),
		DialContext: (&net.Dialer{}).DialContext,
	}}
	ctx := context.Background()
	grpcClient := pointledgerv1connect.NewLedgerServiceClient(h2c, "http://"+p.addr, connect.WithGRPC(), connect.WithInterceptors(auth.Bearer(p.creds.ServiceToken)))
	if _, err := grpcClient.Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: "bob", Amount: "5", RequestId: "g"})); err != nil {
		t.Fatalf("gRPC grant: %v", err)
	}
	webClient := p.ledgerClient(connect.WithGRPCWeb())
	res, err := webClient.Purchase(ctx, connect.NewRequest(&pb.PurchaseRequest{UserId: "bob", Amount: "2", RequestId: "p"}))
	if err != nil {
		t.Fatalf("gRPC-Web purchase: %v", err)
	}
	if res.Msg.Balance != "3" {
		t.Errorf("balance after gRPC grant and gRPC-Web purchase = %s, want 3", res.Msg.Balance)
	}
	_, err = grpcClient.Purchase(ctx, connect.NewRequest(&pb.PurchaseRequest{UserId: "bob", Amount: "1e3", RequestId: "p2"}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("gRPC purchase of 1e3: %v, want invalid_argument", err)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ledgerd exited with %v after SIGTERM, want 0", err)
		}
		if !strings.Contains(p.out.String(), "stopped") {
			t.Errorf("ledgerd did not log its graceful stop:\n%s", p.out)
		}
	case <-time.After(2 * time.Minute): // a bound on a hang, not on speed
		t.Fatal("ledgerd did not stop within 2 minutes of SIGTERM")
	}
}

func TestRunCommands(t *testing.T) {
	t.Parallel()
	getenv := func(string) string { return "" }
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"version"}, getenv, &out, &errOut); err != nil || !strings.HasPrefix(out.String(), "ledgerd ") {
		t.Errorf("version: %q, %v", out.String(), err)
	}
	if err := run(context.Background(), []string{"frobnicate"}, getenv, &out, &errOut); err == nil {
		t.Error("an unknown command succeeded")
	}
	if err := run(context.Background(), nil, getenv, &out, &errOut); err == nil {
		t.Error("no command succeeded")
	}
	badScale := func(k string) string {
		if k == "LEDGER_AMOUNT_SCALE" {
			return "many"
		}
		return ""
	}
	if err := run(context.Background(), []string{"serve"}, badScale, &out, &errOut); err == nil || !strings.Contains(err.Error(), "LEDGER_AMOUNT_SCALE") {
		t.Errorf("serve with LEDGER_AMOUNT_SCALE=many: %v, want an error naming the variable", err)
	}
	if err := run(context.Background(), []string{"serve", "-log-level", "loud"}, getenv, &out, &errOut); err == nil {
		t.Error("serve with -log-level loud succeeded")
	}
}

func TestProjectRebuildsOneUser(t *testing.T) {
	t.Parallel()
	p := startLedgerd(t)
	ctx := context.Background()
	client := p.ledgerClient()
	if _, err := client.Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: "carol", Amount: "5", RequestId: "g"})); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Purchase(ctx, connect.NewRequest(&pb.PurchaseRequest{UserId: "carol", Amount: "2", RequestId: "p"})); err != nil {
		t.Fatal(err)
	}
	rebuild := exec.Command(p.bin, "project", "-rebuild", "-user", "carol")
	rebuild.Env = p.env
	if out, err := rebuild.CombinedOutput(); err != nil || !strings.Contains(string(out), "history rebuilt") {
		t.Fatalf("ledgerd project -rebuild -user carol: %v\n%s", err, out)
	}
	res, err := client.ListHistory(ctx, connect.NewRequest(&pb.ListHistoryRequest{UserId: "carol", OldestFirst: true}))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Msg.Items) != 2 || res.Msg.Items[1].BalanceAfter != "3" {
		t.Errorf("history of carol after rebuild = %v, want the grant and the purchase", res.Msg.Items)
	}
	for _, args := range [][]string{{"project", "-user", "carol"}, {"project", "-rebuild", "-user", "car#ol"}} {
		cmd := exec.Command(p.bin, args...)
		cmd.Env = p.env
		if out, err := cmd.CombinedOutput(); err == nil {
			t.Errorf("ledgerd %v succeeded:\n%s", args, out)
		}
	}
}

func TestReconcileCommandExitsByFindings(t *testing.T) {
	t.Parallel()
	p := startLedgerd(t)
	ctx := context.Background()
	client := p.ledgerClient()
	for _, u := range []string{"dora", "emil"} {
		if _, err := client.Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: u, Amount: "5", RequestId: "g"})); err != nil {
			t.Fatal(err)
		}
	}
	reconcile := func() (int, string, map[string]any) {
		jsonFile := filepath.Join(t.TempDir(), "report.json")
		// A grace as long as a busy machine may need: it ends once the
		// history has caught up.
		cmd := exec.Command(p.bin, "reconcile", "-json", jsonFile, "-segments", "2", "-projection-grace", "2m")
		cmd.Env = p.env
		out, err := cmd.Output()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		var rep map[string]any
		if b, err := os.ReadFile(jsonFile); err == nil {
			_ = json.Unmarshal(b, &rep)
		}
		return code, string(out), rep
	}
	// The in-process projector may still be applying the grants: the
	// reconciliation gives it its grace period.
	code, out, rep := reconcile()
	if code != 0 || !strings.Contains(out, "CLEAN") || rep["clean"] != true {
		t.Fatalf("reconcile of a clean ledger: exit %d, report %v\n%s", code, rep, out)
	}

	// Alter emil's balance behind the ledger's back.
	db := dynamolocal.NewClient(dynamotest.Emulator(t).Endpoint)
	_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(p.prefix + "ledger"),
		Key:                       map[string]types.AttributeValue{"PK": &types.AttributeValueMemberS{Value: "ACCT#emil"}, "SK": &types.AttributeValueMemberS{Value: "A"}},
		UpdateExpression:          aws.String("SET balance = :b"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":b": &types.AttributeValueMemberN{Value: "6"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	code, out, rep = reconcile()
	if code != 1 || !strings.Contains(out, "balance_mismatch") || rep["clean"] != false {
		t.Fatalf("reconcile of an altered balance: exit %d, report %v\n%s", code, rep, out)
	}
	findings, _ := rep["findings"].([]any)
	if len(findings) != 2 { // emil's balance, and the sum over all users
		t.Errorf("findings = %v, want emil's balance_mismatch and the sum_mismatch", findings)
	}
}

// readSection returns the sh blocks of the README between
// <!-- name:begin --> and <!-- name:end -->.
func readSection(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "<!-- "+name+":begin -->")
	section, _, ok2 := strings.Cut(section, "<!-- "+name+":end -->")
	if !ok || !ok2 {
		t.Fatalf("README.md has no %s:begin/end section", name)
	}
	var blocks []string
	for _, m := range codeBlock.FindAllStringSubmatch(section, -1) {
		if m[1] == "sh" {
			blocks = append(blocks, m[2])
		}
	}
	return blocks
}

// devstack is `make run` in a folder of its own: bin/ledgerd,
// bin/devstack and the Makefile, on ports of its own.
type devstack struct {
	dir    string
	env    []string
	cmd    *exec.Cmd
	out    *dynamolocal.Output
	done   chan error
	exited bool // done was received from
}

func newDevstack(t *testing.T) *devstack {
	t.Helper()
	dir := t.TempDir()
	for _, b := range []struct{ out, pkg string }{{"bin/ledgerd", "."}, {"bin/devstack", "../devstack"}} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(dir, b.out), b.pkg).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", b.pkg, err, out)
		}
	}
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Makefile"), makefile, 0o644); err != nil {
		t.Fatal(err)
	}
	emulatorDir, err := dynamolocal.FindDir()
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() { // nothing of the developer's own setup
		if !strings.HasPrefix(kv, "LEDGER_") && !strings.HasPrefix(kv, "DYNAMODB_") && !strings.HasPrefix(kv, "TOKEN=") {
			env = append(env, kv)
		}
	}
	var ports [3]int
	for i := range ports {
		if ports[i], err = dynamolocal.FreePort(); err != nil {
			t.Fatal(err)
		}
	}
	env = append(env,
		"LEDGER_DYNAMODB_LOCAL_DIR="+emulatorDir,
		fmt.Sprintf("LEDGER_LISTEN_ADDR=127.0.0.1:%d", ports[0]),
		fmt.Sprintf("LEDGER_OPS_LISTEN=127.0.0.1:%d", ports[1]),
		fmt.Sprintf("DYNAMODB_PORT=%d", ports[2]),
		"DYNAMODB_DB_PATH=.local/db", // relative, as the README writes it
	)
	return &devstack{dir: dir, env: env}
}

// start runs bin/devstack as `make run` does and waits until ledgerd answers.
func (d *devstack) start(t *testing.T) {
	t.Helper()
	d.out = &dynamolocal.Output{}
	d.cmd = exec.Command("bin/devstack", "-ledgerd", "bin/ledgerd")
	d.cmd.Dir, d.cmd.Env, d.cmd.Stdout, d.cmd.Stderr = d.dir, d.env, d.out, d.out
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.done, d.exited = make(chan error, 1), false
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() {
		if !d.exited {
			_ = d.cmd.Process.Signal(syscall.SIGINT)
			if err := <-d.done; err != nil {
				t.Logf("devstack stopped at cleanup: %v", err)
			}
		}
		if t.Failed() {
			t.Logf("devstack output:\n%s", d.out)
		}
	})
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if out, err := d.shell(". .local/dev.env && curl -sf $LEDGER_URL/healthz"); err == nil && out == "ok\n" {
			return
		}
		select {
		case err := <-d.done:
			d.exited = true
			t.Fatalf("devstack exited: %v\n%s", err, d.out)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("devstack did not serve within 2 minutes:\n%s", d.out)
		}
	}
}

// interrupt is Ctrl-C: devstack must stop everything and exit 0.
func (d *devstack) interrupt(t *testing.T) {
	t.Helper()
	_ = d.cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-d.done:
		d.exited = true
		if err != nil {
			t.Fatalf("devstack after Ctrl-C: %v, want exit 0\n%s", err, d.out)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("devstack did not stop within 2 minutes of Ctrl-C:\n%s", d.out)
	}
}

// shell runs script with bash in the devstack's folder, as a developer in
// another terminal at the repository's root would.
func (d *devstack) shell(script string) (string, error) {
	c := exec.Command("bash", "-euo", "pipefail", "-c", script)
	c.Dir, c.Env = d.dir, d.env
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		return string(out), fmt.Errorf("%w\n%s%s", err, out, stderr.String())
	}
	return string(out), nil
}

// The README's commands beside `make run` work as written, right after it
// started; Ctrl-C stops it cleanly; and with DYNAMODB_DB_PATH (relative, as
// the README writes it) a restart keeps the data.
func TestReadmeBesideMakeRun(t *testing.T) {
	t.Parallel()
	d := newDevstack(t)
	d.start(t)
	grant := `. .local/dev.env && curl -sf $LEDGER_URL/pointledger.v1.LedgerService/Grant -H 'Content-Type: application/json' ` +
		`-H "Authorization: Bearer $TOKEN" -d '{"user_id":"alice","amount":"100","request_id":"grant-1"}'`
	if _, err := d.shell(grant); err != nil {
		t.Fatal(err)
	}
	blocks := readSection(t, "afterrun")
	if len(blocks) < 4 {
		t.Fatalf("README has %d commands beside make run, want reconcile, a user token, an admin call and the status", len(blocks))
	}
	for _, block := range blocks {
		out, err := d.shell(block)
		switch {
		case err != nil:
			t.Errorf("README command:\n%s\nfailed: %v", block, err)
		case strings.TrimSpace(out) == "" || strings.Contains(out, `"code":`):
			t.Errorf("README command:\n%s\nanswered: %q", block, out)
		case strings.Contains(block, "reconcile") && !strings.Contains(out, "CLEAN"):
			t.Errorf("README command:\n%s\ndid not report a clean ledger:\n%s", block, out)
		case strings.Contains(block, "user-token") && strings.Count(strings.TrimSpace(out), ".") != 2:
			t.Errorf("README command:\n%s\nprinted no JWT: %q", block, out)
		}
	}
	d.interrupt(t)
	if _, err := os.Stat(filepath.Join(d.dir, ".local", "dev.env")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dev.env after the run stopped: %v, want it removed", err)
	}

	d.start(t)
	out, err := d.shell(`. .local/dev.env && curl -sf $LEDGER_URL/pointledger.v1.LedgerService/GetBalance -H 'Content-Type: application/json' ` +
		`-H "Authorization: Bearer $TOKEN" -d '{"user_id":"alice"}'`)
	if err != nil {
		t.Fatal(err)
	}
	var bal struct{ Balance, Status string }
	if err := json.Unmarshal([]byte(out), &bal); err != nil || bal.Balance != "100" || bal.Status != "ACCOUNT_STATUS_FROZEN" {
		t.Errorf("after a restart on DYNAMODB_DB_PATH: %s (%v), want alice's 100, frozen", out, err)
	}
	d.interrupt(t)
}
