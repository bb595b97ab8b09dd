// Package faulttest runs the real ledgerd binary through faults, against
// DynamoDB Local, and checks afterwards that no point was lost or repeated.
// Run it with `make test-faults` (also in .ci/run), or as a soak with
// `make soak` (-soak-ops: on through faults until that many requests have
// an answer).
package faulttest

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/auth"
	"github.com/pointledger/pointledger/internal/ddbproxy"
	"github.com/pointledger/pointledger/internal/dynamolocal"
)

var soakOps = flag.Int("soak-ops", 0, "soak: keep the load and the faults going until this many requests have a definite answer (make soak); 0: make test's small run")

// shape is the size of a run.
type shape struct {
	// ledgerds serve the clients, on one table: with more than one, two
	// write one user at once, and DynamoDB cancels one with
	// TransactionConflict.
	ledgerds int
	workers  int
	users    []string // most of the load goes to them
	// quietUsers get a request every few seconds at most, so that the
	// sweeper, not a mutation, puts their expired points and holds on the
	// record.
	quietUsers []string
	ops        int           // soak: requests answered before the faults stop; 0: the small run, three rounds of faults
	pause      time.Duration // before each SIGKILL
}

func smallRun() shape {
	return shape{ledgerds: 1, workers: 8, users: names("u", 5), quietUsers: names("q", 2), pause: 3 * time.Second}
}

// soakRun has two ledgerds (TransactionConflicts; one is up while the other
// restarts), more users, and more time between kills, so that most of its
// time goes to the load rather than to restarts.
func soakRun(ops int) shape {
	return shape{ledgerds: 2, workers: 16, users: names("u", 12), quietUsers: names("q", 4), ops: ops, pause: 8 * time.Second}
}

func names(prefix string, n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return s
}

// TestNoPointLostOrRepeatedThroughFaults: clients grant (expiring or not,
// pending for seconds or an hour), buy, refund (in parts, again, and over
// what is left), reverse grants (in parts, again, and over what is left),
// and authorize, capture and void holds, through ledgerd, which talks to DynamoDB Local
// through a proxy that injects latency spikes, closed connections,
// TransactionConflicts, and transactions carried out whose answers are lost
// or late. Meanwhile ledgerd and the projector (its own process, `ledgerd
// project`, killed while it applies the load's records) are each killed
// with SIGKILL and restarted, and the emulator, persisting with -dbPath, is
// stopped under load and restarted: three rounds, or as many as a soak
// (-soak-ops) takes. Clients retry whatever has no definite answer with the
// same request id, as a client of a ledger must. Points and holds expire,
// and pending grants mature, during the run, put on the record by the next
// mutation and by the sweeper. Once the sweeper has put on the record what
// fell due by the end of the load: reconciliation is clean (aggregate =
// fold, no negative balance, holds and their records agree, refunds and
// reversals within what they take back, pending the fold's, nothing due
// off the record, history = ledger, sums; its pending what the book says),
// every request got a definite answer, every
// acknowledged request is exactly one entry, every other at most one, and
// no entry is unaccounted for; what is held is the sum of the open holds;
// every hold made has its record, and every capture or void applied
// resolved its hold, by its own entry, for what it says; every refund within
// what is left was applied and every one over it refused; the campaign's
// budget, drawn on by grants until it ran dry on its shards, has granted +
// remaining = total, granted = the sum of its grants, each acknowledged
// grant once, and no BUDGET_EXHAUSTED while it still covered the grant;
// pending grants and reversals did what they say (checkPending).
func TestNoPointLostOrRepeatedThroughFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of faults")
	}
	t.Parallel() // with the webhook test: both mostly wait for their faults
	sh := smallRun()
	if *soakOps > 0 {
		sh = soakRun(*soakOps)
	}
	s := startServices(t, setup{ledgerds: sh.ledgerds, projector: true})
	s.createBudget(t)
	s.createKinds(t)
	l := startLoad(s.clients, sh)
	caused := s.injectFaults(t, sh, l)
	l.waitDry()
	l.stop()
	users := append(slices.Clone(sh.users), sh.quietUsers...)
	stopped := time.Now()
	swept := s.waitSwept(t, users, stopped)
	t.Logf("what fell due by %s on the record %s after the load stopped", swept.Format(time.RFC3339Nano), time.Since(stopped).Round(100*time.Millisecond))

	// Anything that fell due more than reconcileMargin before swept and is
	// still off the record is a finding: the sweeper had it on the record
	// by now (waitSwept), and the margin covers the reconciliation's own
	// start.
	rec := s.reconcile(t, time.Since(swept)+reconcileMargin)
	// Nothing writes while the book is read (ledgerd's sweeper would).
	for _, p := range s.ledgerds {
		p.kill()
	}
	s.projector.kill()
	v := &verdict{t: t}
	view := s.readLedger(t, users, v)
	got := checkBook(l.book, view, v)
	budget := s.checkBudget(t, l.book, view, v)
	pending := checkPending(l.book, view, swept, v) + "\n" + checkReads(l.reads, view, v) + "\n" + checkKinds(view, v)
	checkReconciledPending(l.book, rec, v)
	checkCoverage(sh, l, s.proxy.Stats(), caused, view, got, v)
	t.Logf("%s\n%s\n%s", summary(sh, l, s.proxy.Stats(), caused, rec, view, got, v), budget, pending)
	if t.Failed() {
		t.Logf("ledgerd's logs (the last %d KiB):\n%s", logTail>>10, tail(s.logs.String(), logTail))
	}
}

// services are what the suite runs and faults: DynamoDB Local persisting
// to disk, the fault proxy before it, ledgerd (one or more) and the
// projector.
type services struct {
	bin, dbPath string
	base        []string // the environment of every ledgerd command
	proxied     []string // base, with DynamoDB behind the proxy
	creds       auth.DevCredentials
	emu         *dynamolocal.Emulator
	proxy       *ddbproxy.Proxy
	ledgerds    []*process
	projector   *process // nil without setup.projector
	logs        *dynamolocal.Output
	apis        []string                                   // each ledgerd's base URL
	clients     []pointledgerv1connect.LedgerServiceClient // one for each ledgerd
	adminToken  string                                     // for BudgetService
}

// setup is what startServices starts.
type setup struct {
	ledgerds  int
	projector bool     // `ledgerd project`, a process of its own
	serveEnv  []string // added to ledgerd serve's environment (NAME=value)
}

func startServices(t *testing.T, set setup) *services {
	ctx := context.Background()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	s := &services{bin: buildLedgerd(t, root), dbPath: t.TempDir(), logs: &dynamolocal.Output{}}
	if s.emu, err = dynamolocal.Start(ctx, dynamolocal.Options{DBPath: s.dbPath, JVMFlags: dynamolocal.TestJVMFlags}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.emu.Stop() }) // the emulator of the moment: it is restarted during the run
	s.proxy, err = ddbproxy.Start(ddbproxy.Options{Target: s.emu.Endpoint, Latency: time.Millisecond, Faults: ddbproxy.Faults{
		Seed: uint64(time.Now().UnixNano()), Spike: 0.05, SpikeMax: 300 * time.Millisecond, Reset: 0.02,
		LoseAnswer: 0.05, LateAnswer: 0.05, LateBy: 1500 * time.Millisecond,
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.proxy.Close() })
	creds := auth.GenerateDev()
	s.creds = creds
	s.adminToken = creds.AdminToken
	// Operations listeners on any free port: the defaults may be held by
	// another ledgerd on this machine. The sweeper passes every 2 s, so that
	// it puts the quiet users' expiries on the record during the run.
	s.base = append(os.Environ(), "LEDGER_LOG_LEVEL=warn", "LEDGER_LEASE_TTL=3s", "LEDGER_OPS_LISTEN=127.0.0.1:0", "LEDGER_SWEEP_INTERVAL=2s",
		"LEDGER_AUTH_FILE=", "LEDGER_AUTH_JSON="+string(creds.Credentials.JSON()))
	migrate := exec.Command(s.bin, "migrate")
	migrate.Env = append(s.base, "LEDGER_DYNAMODB_ENDPOINT="+s.emu.Endpoint)
	if out, err := migrate.CombinedOutput(); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	env := append(s.base, "LEDGER_DYNAMODB_ENDPOINT="+s.proxy.URL)
	s.proxied = env
	// ledgerd serves without its projector; the projector runs as its own
	// process (`ledgerd project`), so that each can be killed on its own.
	for range set.ledgerds {
		port, err := dynamolocal.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		p := &process{bin: s.bin, env: append(append(slices.Clone(env), "LEDGER_PROJECTOR=false"), set.serveEnv...), out: s.logs,
			args: []string{"serve", "-listen", fmt.Sprintf("127.0.0.1:%d", port)}}
		p.start(t)
		t.Cleanup(p.kill)
		s.ledgerds = append(s.ledgerds, p)
		s.apis = append(s.apis, fmt.Sprintf("http://127.0.0.1:%d", port))
		s.clients = append(s.clients, pointledgerv1connect.NewLedgerServiceClient(http.DefaultClient, s.apis[len(s.apis)-1],
			connect.WithInterceptors(auth.Bearer(creds.ServiceToken))))
	}
	if !set.projector {
		return s
	}
	s.projector = &process{bin: s.bin, env: env, out: s.logs, args: []string{"project"}}
	s.projector.start(t)
	t.Cleanup(s.projector.kill)
	return s
}

// built is the ledgerd that the suite's tests run, built once (they run
// at once) into dir, which TestMain removes.
var built struct {
	once     sync.Once
	dir, bin string
	err      error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// buildLedgerd builds ./cmd/ledgerd of the module at root, once.
func buildLedgerd(t *testing.T, root string) string {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "faulttest"); built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "ledgerd")
		if out, err := exec.Command("go", "build", "-o", built.bin, filepath.Join(root, "cmd", "ledgerd")).CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// caused counts the faults the suite causes itself, in rounds.
type caused struct {
	rounds, ledgerdKills, projectorKills, emulatorRestarts int
}

// injectFaults runs rounds of faults while the load goes on: three, or
// until a soak's requests have their answers; then it lets the load go on
// until enough requests were acknowledged for the checks to mean
// something, however slow a busy machine makes them.
func (s *services) injectFaults(t *testing.T, sh shape, l *load) caused {
	var c caused
	step := func(d time.Duration, what string, f func()) {
		time.Sleep(d)
		t.Logf("%s (%d requests answered)", what, l.answered.Load())
		f()
	}
	for ; c.rounds < 3 || l.answered.Load() < int64(sh.ops); c.rounds++ {
		step(sh.pause, "SIGKILL the projector (mid-batch: the load goes on)", func() { s.projector.kill(); c.projectorKills++ })
		step(500*time.Millisecond, "restart the projector", func() { s.projector.start(t) })
		i := c.rounds % len(s.ledgerds) // in turn
		step(sh.pause, fmt.Sprintf("SIGKILL ledgerd %d", i), func() { s.ledgerds[i].kill(); c.ledgerdKills++ })
		step(time.Second, fmt.Sprintf("restart ledgerd %d", i), func() { s.ledgerds[i].start(t) })
		if c.rounds%3 != 1 {
			continue
		}
		// SIGTERM: killed with SIGKILL, DynamoDB Local loses its last
		// acknowledged write (see dynamolocal.Shutdown), which the real
		// service never does, so that is not a fault to test here.
		step(4*time.Second, "stop DynamoDB Local (SIGTERM) under load", func() { s.emu.Shutdown() })
		step(2*time.Second, "restart DynamoDB Local on its -dbPath", func() {
			var err error
			if s.emu, err = dynamolocal.Start(context.Background(), dynamolocal.Options{DBPath: s.dbPath, Port: s.emu.Port, JVMFlags: dynamolocal.TestJVMFlags}); err != nil {
				t.Fatal(err)
			}
			c.emulatorRestarts++
		})
	}
	time.Sleep(6 * time.Second)
	// A bound on a hang, not on speed.
	for deadline := time.Now().Add(5 * time.Minute); l.acked.Load() < minAcked && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	return c
}

// minAcked is how many acknowledged requests make the fault test prove
// something.
const minAcked = 100

// reconciled is what `ledgerd reconcile -json` reports.
type reconciled struct {
	Clean     bool              `json:"clean"`
	Findings  []json.RawMessage `json:"findings"`
	Entries   int64             `json:"entries_checked"`
	StartTime time.Time         `json:"start_time"`
	// Points pending: the entries' pending changes folded, what the
	// accounts say, and by the month they mature in as time decided at
	// StartTime.
	SumOfPendingChanges string `json:"sum_of_pending_changes"`
	SumOfPending        string `json:"sum_of_pending"`
	Pending             []struct {
		Month  string `json:"month"`
		Amount string `json:"amount"`
	} `json:"pending"`
}

// reconcileMargin is how much longer than since the load stopped the
// reconciliation lets what fell due stay off the record: more than it
// takes to start.
const reconcileMargin = 10 * time.Second

// reconcile runs `ledgerd reconcile` once the projection has caught up;
// an expiry or a maturity off the record for longer than sweepGrace is a
// finding.
func (s *services) reconcile(t *testing.T, sweepGrace time.Duration) reconciled {
	reportFile := filepath.Join(t.TempDir(), "reconcile.json")
	rec := exec.Command(s.bin, "reconcile", "-json", reportFile, "-projection-grace", "5m", // ends once caught up
		"-sweep-grace", sweepGrace.Round(time.Second).String())
	rec.Env = append(s.base, "LEDGER_DYNAMODB_ENDPOINT="+s.emu.Endpoint)
	recOut, err := rec.CombinedOutput()
	out, _ := os.ReadFile(reportFile)
	var report reconciled
	if jerr := json.Unmarshal(out, &report); jerr != nil || err != nil || !report.Clean || len(report.Findings) > 0 {
		t.Errorf("reconcile: %v, %v: %s\n%s", err, jerr, out, recOut)
	}
	return report
}

// logTail is how much of ledgerd's logs a failure shows: a soak's are long.
const logTail = 256 << 10

func tail(s string, n int) string {
	return s[max(0, len(s)-n):]
}

// process is a ledgerd command that the test kills and starts again.
type process struct {
	bin  string
	args []string
	env  []string
	out  *dynamolocal.Output
	mu   sync.Mutex
	cmd  *exec.Cmd
}

func (p *process) start(t *testing.T) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cmd = exec.Command(p.bin, p.args...)
	p.cmd.Env, p.cmd.Stdout, p.cmd.Stderr = p.env, p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
}

// kill kills it with SIGKILL: no shutdown, no last checkpoint.
func (p *process) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
}
