// Command loadtest drives ledgerd and reports throughput, latency and whether
// the books still balance afterwards.
//
// By default it starts a fresh DynamoDB Local (the emulator slows down as
// stream records pile up, so every run gets a new one), with -latency the
// DynamoDB proxy in front of it, and the ledgerd binary at -ledgerd;
// -target URL drives a running ledgerd instead (its tables are read for the
// checks through -dynamodb-endpoint and -table-prefix; -token is its service
// token; -target-ops its operations listener, where the projection's status
// is; the ledgerd started here gets fresh credentials).
//
// One invocation measures, each for -warmup then -duration:
//
//   - baseline-direct: the load tool sends the write path's own transaction
//     straight to DynamoDB (the ceiling for the service);
//   - ledgerd: the scenario in a closed loop of -concurrency clients;
//   - ledgerd-open: the scenario in an open loop at -rate steps/s ("half":
//     half of what the closed loop reached), latency counted from when each
//     request was due (no coordinated omission);
//   - baseline-naive: read-then-write without conditions, and the
//     overdrafts and lost updates it causes.
//
// -pin-emulator gives DynamoDB Local a CPU of its own (see pinEmulator).
//
// -instances N starts N ledgerd on the one DynamoDB, behind the load tool
// as their round-robin load balancer (balancer), and reports each one's
// part from its /metrics; -affinity gives them their peers; -compare
// measures one instance, N, and N with affinity, in turn; -kill-one
// SIGKILLs one mid-measurement (fleetRun).
//
// Then it checks the invariants over everything sent to ledgerd, prints a
// summary table, and writes the report as JSON and HTML into -out. A
// violation, or a run of ledgerd with no mutation acknowledged, exits 1.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/shopspring/decimal"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/ddbproxy"
	"github.com/pointledger/pointledger/internal/dynamolocal"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/internal/projection"
	"github.com/pointledger/pointledger/migrations"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ok, err := run(ctx, os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(2)
	}
	if !ok {
		fmt.Fprintln(os.Stderr, "loadtest: the run failed its checks")
		os.Exit(1)
	}
}

type flags struct {
	target, targetOps, ledgerd            string
	dynamoEndpoint, tablePrefix           string
	token                                 string // -target: a service token
	scenario, rate, mix, out              string
	amount, grant                         string
	concurrency, users, spends, covers    int
	maxInFlight                           int
	duration, warmup, latency             time.Duration
	baselines, sharedEmulator, proxy, h2c bool
	pinEmulator                           bool

	instances         int           // ledgerd serve processes a run starts
	affinity, compare bool          // -affinity; -compare: 1, then -instances, then with affinity
	killOne           time.Duration // SIGKILL an instance this long into the measurement; 0: none
	healthInterval    time.Duration // the load balancer's health checks
}

// run makes the runs args ask for, then prints and writes the report; ok
// is false when the runs failed their checks.
func run(ctx context.Context, args []string) (ok bool, err error) {
	f, err := parseFlags(args)
	if err != nil {
		return false, err
	}
	cpus := fmt.Sprintf("%d CPUs", runtime.NumCPU())
	var emulatorCPUs string
	if f.pinEmulator {
		if f.target != "" || f.dynamoEndpoint != "" {
			return false, errors.New("-pin-emulator pins the DynamoDB Local it starts: not with -target or -dynamodb-endpoint")
		}
		// Re-executes the load tool pinned, the first time: what follows
		// runs in the pinned process.
		if emulatorCPUs, cpus, err = pinEmulator(args); err != nil {
			return false, err
		}
	}
	p, rate, err := f.params()
	if err != nil {
		return false, err
	}
	ledgerd := f.ledgerd // what the report calls the ledgerd it starts
	if f.target == "" && f.ledgerd == "" {
		dir, err := os.MkdirTemp("", "loadtest-ledgerd-")
		if err != nil {
			return false, err
		}
		defer os.RemoveAll(dir)
		var commit string
		if f.ledgerd, commit, err = buildLedgerd(ctx, dir); err != nil {
			return false, err
		}
		ledgerd = "built from ./cmd/ledgerd"
		if commit != "" {
			ledgerd += " at " + commit
		}
		fmt.Println("ledgerd:", ledgerd)
	}
	r, err := newRunner(ctx, f, p, newReport(f, p, args, cpus), emulatorCPUs, ledgerd)
	if err != nil {
		return false, err
	}
	if f.sharedEmulator && f.target == "" && f.dynamoEndpoint == "" {
		if r.shared, err = startEnv(ctx, f.latency, f.proxy, r.emulatorCPUs); err != nil {
			return false, err
		}
		defer r.shared.stop()
	}
	if err := r.runAll(ctx, rate); err != nil {
		return false, err
	}
	r.rep.printSummary(os.Stdout)
	if err := r.rep.writeFiles(f.out, f.scenario); err != nil {
		return false, err
	}
	return r.rep.Invariants.OK() && everyRunWrote(r.rep.Runs), nil
}

func parseFlags(args []string) (flags, error) {
	var f flags
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.StringVar(&f.target, "target", "", "URL of a running ledgerd; empty: start DynamoDB Local and ledgerd")
	fs.StringVar(&f.targetOps, "target-ops", "", "with -target: URL of its operations listener (-ops-listen), for the projection's lag and to know whether it projects; empty: no lag, and the history is caught up from the ledger before the checks")
	fs.StringVar(&f.token, "token", os.Getenv("LEDGER_TOKEN"), "with -target: a service token to send (LEDGER_TOKEN)")
	fs.StringVar(&f.ledgerd, "ledgerd", "", "the ledgerd binary to start when there is no -target; default: built from ./cmd/ledgerd of this checkout at start, so that a run measures the code it runs from")
	fs.StringVar(&f.dynamoEndpoint, "dynamodb-endpoint", "", "with -target: the DynamoDB endpoint of its tables, read for the checks (empty or aws: AWS's, from the environment); without: empty starts a fresh DynamoDB Local for each run, a URL uses the DynamoDB there and aws AWS's (region and credentials from the environment), each run on tables of its own, deleted after its checks")
	fs.StringVar(&f.tablePrefix, "table-prefix", "", "with -target: the prefix of its table names; with -dynamodb-endpoint and no -target: the start of the names of the tables the runs create")
	fs.StringVar(&f.scenario, "scenario", "uniform", "the load: "+strings.Join(scenarios, ", "))
	fs.IntVar(&f.concurrency, "concurrency", 16, "closed loop: clients")
	fs.StringVar(&f.rate, "rate", "", `open loop: steps per second (a retry burst or a double-spend round is one step); "half": half of the closed loop's; empty: closed loop only`)
	fs.IntVar(&f.maxInFlight, "max-in-flight", 4096, "open loop: at most this many steps at once (the rest wait, and their latency counts)")
	fs.DurationVar(&f.duration, "duration", 20*time.Second, "how long each run is measured")
	fs.DurationVar(&f.warmup, "warmup", 40*time.Second, "how long each run goes before it is measured (DynamoDB Local takes tens of seconds to reach its steady speed)")
	fs.IntVar(&f.users, "users", 1000, "users the load spreads over (hot: 1)")
	fs.StringVar(&f.amount, "amount", "1", "amount of each purchase")
	fs.StringVar(&f.grant, "grant", "1000000", "points granted to each user first")
	fs.IntVar(&f.spends, "spends", 16, "double-spend: purchases sent at once against one balance")
	fs.IntVar(&f.covers, "covers", 4, "double-spend: how many of them the balance covers")
	fs.StringVar(&f.mix, "mix", "purchase=55,grant=5,refund=10,balance=20,history=10", "mixed: the proportions of each operation")
	fs.DurationVar(&f.latency, "latency", 0, "put the DynamoDB proxy between ledgerd and the emulator: this much latency per call, and TransactionConflict like the real service")
	fs.BoolVar(&f.proxy, "proxy", false, "put the DynamoDB proxy in even without -latency (to count item writes and DynamoDB's time by operation)")
	fs.BoolVar(&f.h2c, "h2c", false, "talk to ledgerd over HTTP/2 without TLS (one connection) instead of HTTP/1.1")
	fs.BoolVar(&f.baselines, "baselines", true, "also measure the direct and the naive baselines (not with -target)")
	fs.BoolVar(&f.sharedEmulator, "shared-emulator", false, "run everything on one DynamoDB Local instead of a fresh one per run (to see the emulator slow down as stream records pile up)")
	fs.StringVar(&f.out, "out", "loadtest-results", "folder for the JSON and HTML reports")
	fs.IntVar(&f.instances, "instances", 1, "ledgerd serve processes to start on the one DynamoDB, each on ports of its own; the load tool spreads the calls over them round robin, as a load balancer")
	fs.BoolVar(&f.affinity, "affinity", false, "start the instances with their peers (-peers, -self), so that each user's mutations are committed by the one instance that owns the user")
	fs.BoolVar(&f.compare, "compare", false, "with -instances N: measure one instance, then N round robin, then N with -affinity, in turn, and compare their purchases/s")
	fs.DurationVar(&f.killOne, "kill-one", 0, "SIGKILL one instance (the one that committed the most so far) this long into each measurement of several instances; the load balancer takes it out after failures, and the checks require the others to serve every user within the health-check window")
	fs.DurationVar(&f.healthInterval, "health-interval", time.Second, "the load balancer's health checks: GET /healthz on each instance this often")
	fs.BoolVar(&f.pinEmulator, "pin-emulator", false, "run DynamoDB Local alone on the last CPU this process may use and the load tool, ledgerd and the proxy on the others (Linux, taskset), so that they do not take the emulator's CPU, as with DynamoDB on other machines")
	err := fs.Parse(args)
	return f, err
}

// params checks the flags that shape the load and returns its parameters,
// and the open loop's rate (0: none, or half of the closed loop's).
func (f flags) params() (p *params, rate float64, err error) {
	p = &params{ids: new(atomic.Int64), users: f.users, spends: f.spends, covers: f.covers, runID: strconv.FormatInt(time.Now().UnixNano(), 36),
		runFor: f.warmup + f.duration}
	if !slices.Contains(scenarios, f.scenario) {
		return nil, 0, fmt.Errorf("-scenario %q: want one of %s", f.scenario, strings.Join(scenarios, ", "))
	}
	if f.concurrency < 1 || f.users < 1 || f.duration <= 0 || f.warmup < 0 || f.maxInFlight < 1 {
		return nil, 0, errors.New("-concurrency, -users, -duration and -max-in-flight must be positive")
	}
	if f.scenario == "hot" {
		p.users = 1
	}
	if err := f.checkFleet(); err != nil {
		return nil, 0, err
	}
	if f.scenario == "double-spend" && (f.covers < 0 || f.spends <= f.covers) {
		return nil, 0, errors.New("double-spend: want 0 <= -covers < -spends")
	}
	if p.amount, err = decimal.NewFromString(f.amount); err != nil || !p.amount.IsPositive() {
		return nil, 0, fmt.Errorf("-amount %q: want a positive decimal", f.amount)
	}
	if p.grant, err = decimal.NewFromString(f.grant); err != nil || !p.grant.IsPositive() {
		return nil, 0, fmt.Errorf("-grant %q: want a positive decimal", f.grant)
	}
	if f.scenario == "mixed" {
		if p.mix, err = parseMix(f.mix); err != nil {
			return nil, 0, err
		}
	}
	if f.rate != "" && f.rate != "half" {
		if rate, err = strconv.ParseFloat(f.rate, 64); err != nil || rate <= 0 {
			return nil, 0, fmt.Errorf("-rate %q: want steps per second, or half", f.rate)
		}
	}
	return p, rate, nil
}

// checkFleet checks the flags that shape the instances.
func (f flags) checkFleet() error {
	switch {
	case f.instances < 1:
		return errors.New("-instances must be at least 1")
	case f.target != "" && (f.instances > 1 || f.affinity || f.compare || f.killOne > 0):
		return errors.New("-instances, -affinity, -compare and -kill-one start instances of their own: not with -target")
	case f.compare && f.instances < 2:
		return errors.New("-compare compares one instance with -instances of them: want -instances 2 or more")
	case f.killOne > 0 && f.instances < 2:
		return errors.New("-kill-one kills one of several instances: want -instances 2 or more")
	case f.killOne >= f.duration:
		return errors.New("-kill-one must come before the end of -duration")
	case f.healthInterval <= 0:
		return errors.New("-health-interval must be positive")
	}
	return nil
}

// failoverWindow is how long after a kill the other instances may take to
// serve every user: the load balancer's health checks' window (healthFails
// failed checks, one more interval for the check in flight, and the last
// check's timeout). Under affinity the instances check each other at the
// same interval (-peer-health-interval), and one that forwards to the dead
// owner commits the call itself at once, so the window is the same.
func (f flags) failoverWindow() time.Duration {
	return time.Duration(healthFails+1)*f.healthInterval + healthTimeout
}

// newReport starts the report with what the runs will not change: when,
// how to run it again, on what machine, with which options.
func newReport(f flags, p *params, args []string, cpus string) *Report {
	rep := &Report{
		Date:    time.Now().UTC(),
		Command: command(args),
		Machine: fmt.Sprintf("%s, %s/%s, %s", cpus, runtime.GOOS, runtime.GOARCH, runtime.Version()),
		Options: Options{Scenario: f.scenario, Concurrency: f.concurrency, DurationS: f.duration.Seconds(), WarmupS: f.warmup.Seconds(),
			Users: p.users, LatencyMS: float64(f.latency) / float64(time.Millisecond), MaxBatch: os.Getenv("LEDGER_MAX_BATCH"),
			SharedEmulator: f.sharedEmulator, PinEmulator: f.pinEmulator,
			Instances: f.instances, Affinity: f.affinity, Compare: f.compare, KillOneS: f.killOne.Seconds()},
	}
	if f.scenario == "mixed" {
		rep.Options.Mix = f.mix
	}
	return rep
}

// newRunner makes the runner of the invocation: its HTTP client to
// ledgerd and, with -target, the DynamoDB its checks read. ledgerd is what
// the report calls the ledgerd it starts (its binary, or its build).
func newRunner(ctx context.Context, f flags, p *params, rep *Report, emulatorCPUs, ledgerd string) (*runner, error) {
	transport := &http.Transport{MaxIdleConnsPerHost: max(f.concurrency*4, 256)}
	if f.h2c {
		transport.Protocols = new(http.Protocols)
		transport.Protocols.SetUnencryptedHTTP2(true) // ledgerd serves h2c
	}
	r := &runner{f: f, p: p, rep: rep, http: &http.Client{Transport: transport}, emulatorCPUs: emulatorCPUs}
	if f.target == "" {
		switch f.dynamoEndpoint {
		case "":
			rep.Target = "fresh DynamoDB Local and ledgerd " + ledgerd
		case awsDynamoDB:
			rep.Target = "AWS's DynamoDB (from the environment), fresh tables, and ledgerd " + ledgerd
		default:
			rep.Target = "the DynamoDB at " + f.dynamoEndpoint + ", fresh tables, and ledgerd " + ledgerd
		}
		if f.latency > 0 {
			rep.Target += fmt.Sprintf(", proxy adding %s per call", f.latency)
		}
		return r, nil
	}
	r.f.baselines = false
	rep.Target = f.target
	if f.dynamoEndpoint != "" && f.dynamoEndpoint != awsDynamoDB {
		r.checkDB = dynamolocal.NewClient(f.dynamoEndpoint)
		return r, nil
	}
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("AWS configuration for the checks: %w", err)
	}
	r.checkDB = dynamodb.NewFromConfig(cfg)
	return r, nil
}

// runAll makes the invocation's runs, in order: baseline-direct, ledgerd
// (closed loop), ledgerd-open (at rate, or half of what the closed loop
// reached), baseline-naive; with -compare, ledgerd's two runs for each
// configuration in turn.
func (r *runner) runAll(ctx context.Context, rate float64) error {
	// Baseline (a) first: if the emulator is shared and slows as data piles
	// up, the ceiling is measured on the faster emulator, never ledgerd.
	if r.f.baselines {
		if err := r.baseline(ctx, "baseline-direct", "the load tool sends the write path's transaction (account update, entry, request record; same conditions) straight to DynamoDB, one at a time per user",
			func(db *dynamodb.Client, table string) executor { return newDirectExec(db, table) }, nil); err != nil {
			return err
		}
	}
	for _, c := range r.f.fleetConfigs() {
		if err := r.ledgerdRuns(ctx, c, rate); err != nil {
			return err
		}
	}
	if !r.f.baselines {
		return nil
	}
	var naive *naiveExec
	return r.baseline(ctx, "baseline-naive", "read the balance, then write the entry and the balance without conditions",
		func(db *dynamodb.Client, table string) executor { naive = newNaiveExec(db, table); return naive },
		func(ctx context.Context, run *Run) error {
			notes, err := naive.damage(ctx, r.p.amount)
			run.Notes = append(run.Notes, notes...)
			return err
		})
}

// ledgerdRuns measures ledgerd in configuration c: its closed loop, and its
// open loop at rate (or at half of what the closed loop reached).
func (r *runner) ledgerdRuns(ctx context.Context, c fleetConfig, rate float64) error {
	name := c.runName()
	if rate == 0 || r.f.rate == "half" {
		run, err := r.ledgerd(ctx, name, c, 0)
		if err != nil {
			return err
		}
		if r.f.rate == "half" {
			rate = run.Steps / 2
		}
	}
	if rate > 0 {
		if _, err := r.ledgerd(ctx, name+"-open", c, rate); err != nil {
			return err
		}
		r.rep.Options.Rate = rate
	}
	return nil
}

// everyRunWrote says whether each of ledgerd's runs had a mutation
// acknowledged: a run that wrote nothing proved nothing, whatever its reads
// and its checks say.
func everyRunWrote(runs []Run) bool {
	n := 0
	for _, r := range runs {
		if !strings.HasPrefix(r.Name, "ledgerd") {
			continue
		}
		if r.Mutations == 0 {
			return false
		}
		n++
	}
	return n > 0
}

// runner runs the measured runs of one invocation.
type runner struct {
	f       flags
	p       *params
	rep     *Report
	http    *http.Client
	shared  *env             // -shared-emulator: every run's
	checkDB *dynamodb.Client // -target: its DynamoDB
	envs    int              // -dynamodb-endpoint: the runs' tables made so far

	emulatorCPUs string // -pin-emulator: the CPU DynamoDB Local gets alone
}

// env returns the DynamoDB of the next run: the shared one, or a fresh one
// (DynamoDB Local slows down as stream records pile up, so by default
// every run starts on a new one, alike).
func (r *runner) env(ctx context.Context) (*env, func(), error) {
	if r.shared != nil {
		return r.shared, func() {}, nil
	}
	var e *env
	var err error
	if r.f.dynamoEndpoint != "" {
		r.envs++
		prefix := fmt.Sprintf("%slt-%s-%d-", r.f.tablePrefix, r.p.runID, r.envs)
		e, err = givenEnv(ctx, r.f.dynamoEndpoint, prefix, r.f.latency, r.f.proxy)
	} else {
		e, err = startEnv(ctx, r.f.latency, r.f.proxy, r.emulatorCPUs)
	}
	if err != nil {
		return nil, nil, err
	}
	return e, e.stop, nil
}

// measure sets the scenario up and runs it, closed loop or (rate > 0)
// open loop.
func (r *runner) measure(ctx context.Context, name string, s scenario, send sender, rate float64, rec *recorder) (Run, error) {
	if err := s.setup(ctx, send); err != nil {
		return Run{}, fmt.Errorf("%s setup: %w", name, err)
	}
	f := r.f
	run := Run{Name: name, Mode: "closed", Concurrency: f.concurrency}
	if rate > 0 {
		run = Run{Name: name, Mode: "open", Rate: rate}
		fmt.Printf("%s: %s, open loop at %.0f steps/s, %s warm-up (closed loop) + 1s + %s\n", name, f.scenario, rate, f.warmup, f.duration)
		if late := openLoop(ctx, s, send, rate, f.maxInFlight, f.concurrency, f.warmup, f.duration, rec, progressOut()); late > 0 {
			fmt.Printf("  %d steps started late (the load tool fell behind its schedule; their latency counts from when they were due)\n", late)
		}
	} else {
		fmt.Printf("%s: %s, closed loop of %d clients, %s warm-up + %s\n", name, f.scenario, f.concurrency, f.warmup, f.duration)
		closedLoop(ctx, s, send, f.concurrency, f.warmup, f.duration, rec, progressOut())
	}
	measured := rec.run()
	measured.Name, measured.Mode, measured.Concurrency, measured.Rate = run.Name, run.Mode, run.Concurrency, run.Rate
	return measured, ctx.Err()
}

// countProxy has rec take the proxy's counts when it begins and ends
// measuring; withProxy adds their difference to the run.
func countProxy(rec *recorder, e *env) (before, after *ddbproxy.Stats) {
	before, after = new(ddbproxy.Stats), new(ddbproxy.Stats)
	rec.onBegin = append(rec.onBegin, func() { *before = e.proxyStats() })
	rec.onEnd = append(rec.onEnd, func() { *after = e.proxyStats() })
	return before, after
}

// withProxy adds what the proxy counted while the run was measured.
func withProxy(run *Run, e *env, table string, before, after *ddbproxy.Stats) {
	if e == nil || e.proxy == nil || run.Mutations == 0 {
		return
	}
	writes := after.ItemWrites[table] - before.ItemWrites[table]
	if run.Purchases > 0 {
		run.ItemWritesPerPurchase = float64(writes) / (run.Purchases * run.DurationS)
	}
	run.ItemWritesPerMutation = float64(writes) / float64(run.Mutations)
	run.Transactions, run.Conflicts = after.Transactions-before.Transactions, after.Conflicts-before.Conflicts
	// Where DynamoDB's time went, by operation.
	var parts []string
	var total time.Duration
	for _, op := range sortedKeys(after.Ops) {
		st := after.Ops[op]
		st.Calls -= before.Ops[op].Calls
		st.Time -= before.Ops[op].Time
		if st.Calls > 0 {
			total += st.Time
			parts = append(parts, fmt.Sprintf("%s %d calls, %.1fms each", op, st.Calls, float64(st.Time.Microseconds())/1000/float64(st.Calls)))
		}
	}
	run.Notes = append(run.Notes, fmt.Sprintf("DynamoDB (all tables) answered in %s summed over calls: %s", total.Round(time.Millisecond), strings.Join(parts, "; ")))
}

// baseline measures a baseline on its own table.
func (r *runner) baseline(ctx context.Context, name, description string, mk func(*dynamodb.Client, string) executor, finish func(context.Context, *Run) error) error {
	e, stop, err := r.env(ctx)
	if err != nil {
		return err
	}
	defer stop()
	prefix := e.prefix + name + "-"
	x, err := baselineExec(ctx, e, prefix, mk)
	if err != nil {
		return err
	}
	bp := *r.p
	bp.userTag = name
	rec := newRecorder()
	before, after := countProxy(rec, e)
	run, err := r.measure(ctx, name, newScenario(r.f.scenario, &bp, true), newSender(x, rec, nil), 0, rec)
	if err != nil {
		return err
	}
	run.Description = description
	withProxy(&run, e, prefix+migrations.LedgerTable, before, after)
	if finish != nil {
		if err := finish(ctx, &run); err != nil {
			return err
		}
	}
	r.rep.Runs = append(r.rep.Runs, run)
	return nil
}

// ledgerd measures ledgerd (the instances of c, started on a fresh
// emulator, or -target), then checks the invariants over everything the
// run sent.
func (r *runner) ledgerd(ctx context.Context, name string, c fleetConfig, rate float64) (Run, error) {
	instances := []*instance{{name: "target", url: r.f.target, opsURL: r.f.targetOps}}
	db, prefix, token := r.checkDB, r.f.tablePrefix, r.f.token
	var e *env
	killAfter := time.Duration(0)
	if r.f.target == "" {
		var stop func()
		var err error
		if e, stop, err = r.env(ctx); err != nil {
			return Run{}, err
		}
		defer stop()
		o := fleetOptions{bin: r.f.ledgerd, instances: c.instances, affinity: c.affinity, health: r.f.healthInterval}
		if r.f.scenario == "checkout" {
			// The check waits for the sweeper to release the holds the run
			// left open: at its 15 s default it would wait longer than the
			// holds lasted.
			o.args = []string{"-sweep-interval", checkoutSweepInterval.String()}
		}
		fl, err := startFleet(ctx, o, e)
		if err != nil {
			return Run{}, err
		}
		defer fl.stop()
		instances, db, prefix, token = fl.instances, e.db, e.prefix, fl.token
		if c.instances > 1 {
			killAfter = r.f.killOne
		}
	}
	rec, b := newRecorder(), newBook()
	before, after := countProxy(rec, e)
	fr := newFleetRun(instances, r.http, token, r.f.healthInterval, killAfter, r.f.failoverWindow(), rec)
	cpu := newCPUWatch(e, rec)
	x := fr.b
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go x.watch(watchCtx, r.http)
	p := *r.p
	p.userTag = name
	s := newScenario(r.f.scenario, &p, false)
	lagCtx, stopLag := context.WithCancel(ctx)
	lags := sampleLag(lagCtx, r.http, x.opsURL)
	run, err := r.measure(ctx, name, s, newSender(x, rec, b), rate, rec)
	stopLag()
	if err != nil {
		return Run{}, err
	}
	run.Description = "ledgerd, closed loop"
	if rate > 0 {
		run.Description = "ledgerd, open loop (latency from when each step was due)"
	}
	if len(instances) > 1 {
		run.Description += fmt.Sprintf(", %d instances", len(instances))
		if c.affinity {
			run.Description += " with affinity"
		}
	}
	if run.Fleet, err = fr.figures(c, run.DurationS); err != nil {
		return Run{}, err
	}
	withProxy(&run, e, prefix+migrations.LedgerTable, before, after)
	instancesCPU := -1.0
	if run.Fleet != nil && r.f.target == "" {
		instancesCPU = run.Fleet.Total.CPU
	}
	if note := cpu.note(instancesCPU); note != "" {
		run.Notes = append(run.Notes, note)
	}
	run.Notes = append(run.Notes, projectionNotes(ctx, x.client(), x.lastSpent(), <-lags)...)
	store := dynamo.New(db, dynamo.Options{Table: prefix + migrations.LedgerTable})
	chk := &checker{
		store:   store,
		history: projection.NewHistory(db, prefix+migrations.HistoryTable, store, nil),
		leases:  projection.NewLeaseTable(db, prefix+migrations.LeaseTable, nil),
	}
	if _, ok := s.(*checkout); ok {
		chk.api = x.client()
		fmt.Printf("%s: waiting for the holds left open to expire (ttl %s) and be released...\n", name, holdTTL)
		note, err := expiryNote(ctx, store, b.users())
		if err != nil {
			return Run{}, err
		}
		run.Notes = append(run.Notes, note)
	}
	r.rep.Runs = append(r.rep.Runs, run)

	fmt.Printf("%s: checking the invariants...\n", name)
	if err := catchUp(ctx, r.http, x.opsURL(), db, prefix); err != nil {
		return Run{}, err
	}
	covers := map[string]int{}
	addCovers(covers, s)
	inv, err := chk.check(ctx, b, covers)
	if err != nil {
		return Run{}, err
	}
	if run.Fleet != nil && run.Fleet.Kill != nil {
		inv.addFailover(*run.Fleet.Kill)
	}
	r.rep.Invariants.add(name, inv)
	return run, nil
}

// checkoutSweepInterval is the sweep interval of the ledgerd a checkout
// run starts.
const checkoutSweepInterval = time.Second

// expiryPatience bounds the wait for the ledger to put what expired on the
// record: a few passes of a sweeper at ledgerd's default interval (15 s),
// which a -target may keep.
const expiryPatience = 2 * time.Minute

// expiryNote waits for the ledger to put the expired holds and points of
// users on the record (awaitExpiry) and says how long it took; the checks
// after it report what is still off the record.
func expiryNote(ctx context.Context, store *dynamo.Ledger, users []string) (string, error) {
	took, pending, err := awaitExpiry(ctx, store.Balance, users, expiryPatience)
	if err != nil {
		return "", err
	}
	if len(pending) > 0 {
		return fmt.Sprintf("%d users still had expired holds or points off the record %s after the last hold expired", len(pending), took.Round(time.Second)), nil
	}
	return fmt.Sprintf("every expired hold and point was on the record %s after the last hold had expired", took.Round(100*time.Millisecond)), nil
}

func progressOut() io.Writer { return os.Stderr }

// command is how to run this again: the environment that shapes ledgerd and
// the emulator, then the flags.
func command(args []string) string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "LEDGER_") || strings.HasPrefix(kv, "JAVA_TOOL_OPTIONS=") {
			env = append(env, kv)
		}
	}
	slices.Sort(env)
	return strings.TrimSpace(strings.Join(env, " ") + " go run ./loadtest " + strings.Join(args, " "))
}

// baselineExec creates a baseline's own tables in e, named with prefix
// (same definitions as ledgerd's), and returns its executor on e's client
// under test (through the proxy, if any: the same conditions as ledgerd).
func baselineExec(ctx context.Context, e *env, prefix string, mk func(*dynamodb.Client, string) executor) (executor, error) {
	all, err := migrations.All(prefix)
	if err != nil {
		return nil, err
	}
	in := all[0].Input // the ledger table, stream and all
	if _, err := e.db.CreateTable(ctx, &in); err != nil {
		return nil, fmt.Errorf("baseline tables: %w", err)
	}
	if err := dynamodb.NewTableExistsWaiter(e.db).Wait(ctx, &dynamodb.DescribeTableInput{TableName: in.TableName}, 5*time.Minute); err != nil {
		return nil, fmt.Errorf("baseline tables: %w", err)
	}
	return mk(e.client, prefix+migrations.LedgerTable), nil
}

func addCovers(covers map[string]int, s scenario) {
	if d, ok := s.(*doubleSpend); ok {
		d.mu.Lock()
		defer d.mu.Unlock()
		for u, k := range d.covers {
			covers[u] = k
		}
	}
}

// projectionNotes: how far the projection lagged during the runs, and how
// soon the last purchase (or capture) showed in ListHistory.
func projectionNotes(ctx context.Context, client pointledgerv1connect.LedgerServiceClient, last *pb.Entry, lags []time.Duration) []string {
	var notes []string
	if len(lags) > 0 {
		slices.Sort(lags)
		notes = append(notes, fmt.Sprintf("projection lag p50 %s, max %s (%d samples of /projection/status every 500ms)",
			lags[len(lags)/2].Round(time.Millisecond), lags[len(lags)-1].Round(time.Millisecond), len(lags)))
	} else {
		notes = append(notes, "no projector running in ledgerd (or no -target-ops to ask)")
	}
	if last != nil && len(lags) > 0 {
		if d, err := historyDelay(ctx, client, last); err != nil {
			notes = append(notes, err.Error())
		} else {
			notes = append(notes, fmt.Sprintf("the last purchase (or capture) was in ListHistory %s after it was committed", d.Round(time.Millisecond)))
		}
	}
	return notes
}

// catchUp: when ledgerd runs no projector (or its operations listener
// cannot say), the history is brought up to date from the ledger (as
// `ledgerd project` would) so it can be checked.
func catchUp(ctx context.Context, c *http.Client, opsURL string, db *dynamodb.Client, prefix string) error {
	if st, err := getProjectionStatus(c, opsURL); err == nil && st.Running {
		return nil
	}
	fmt.Println("ledgerd runs no projector: catching the history up from the ledger, as `ledgerd project` would")
	store := dynamo.New(db, dynamo.Options{Table: prefix + migrations.LedgerTable})
	_, err := projection.NewHistory(db, prefix+migrations.HistoryTable, store, nil).CatchUp(ctx)
	return err
}
