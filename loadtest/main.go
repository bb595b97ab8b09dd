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
// -pin-emulator gives DynamoDB Local a CPU of its own (see stack.PinEmulator).
//
// -scenario campaign measures instead one closed loop of ledgerd for each of
// -campaign-shards (ledgerd-shards-1, ledgerd-shards-32, ...): grants from
// a budget on that many escrow shards until it is exhausted, purchases
// beside them, and the grants a second of each against the first's
// (campaign.go).
//
// -scenario kinds runs a program of point kinds (drive/kinds.go): standard,
// limited-time campaign, store-only and exchange-barred points, purchases
// at merchants and in categories, refunds; after the checks of every run it
// checks that no purchase drew an ineligible kind and that GetBalance's
// kinds are the fold's (check/kinds.go), and reports the draws by kind.
//
// -instances N starts N ledgerd on the one DynamoDB, behind the load tool
// as their round-robin load balancer (stack.Balancer), and reports each one's
// part from its /metrics; -affinity gives them their peers; -compare
// measures one instance, N, and N with affinity, in turn; -kill-one
// SIGKILLs one mid-measurement (stack.FleetRun).
//
// -webhooks (on by default, as ledgerd serve runs its dispatcher by
// default) has each run of ledgerd deliver every event to a receiver of
// the load test's (loadtest/receive) on 127.0.0.1, through an endpoint it
// creates with WebhookService, and report the events a second, the
// delivery lag and whether order held; -compare-webhooks measures, in
// turn, delivery off, on (serve's default: one reading of the stream for
// history and deliveries), and on with the dispatcher's own reading
// (-shared-stream-reader=false).
//
// Then it checks the invariants over everything sent to ledgerd, prints a
// summary table, and writes the report as JSON and HTML into -out. A
// violation, or a run of ledgerd with no mutation acknowledged, exits 1.
//
// The work is in packages by what it does: stack starts what a run runs on
// (DynamoDB Local, the proxy, the ledgerd instances and the load balancer
// in front of them); drive makes the load (the scenarios, the open and
// closed loops, the calls to ledgerd); baseline sends the baselines' writes
// straight to DynamoDB; check checks the invariants after a run; report
// holds the figures and writes them. This package keeps the flags and
// wires a run from them (run.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/loadtest/drive"
	"github.com/pointledger/pointledger/loadtest/report"
	"github.com/pointledger/pointledger/loadtest/stack"
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
	partitionScale                        float64
	pinEmulator                           bool

	instances         int           // ledgerd serve processes a run starts
	affinity, compare bool          // -affinity; -compare: 1, then -instances, then with affinity
	killOne           time.Duration // SIGKILL an instance this long into the measurement; 0: none
	healthInterval    time.Duration // the load balancer's health checks

	webhooks          bool          // deliver every event to the load test's receiver
	compareWebhooks   bool          // -compare-webhooks: delivery off, on, on with the dispatcher's own reading
	webhookDrain      time.Duration // how long to wait after a run for its events
	campaignShardList string        // -campaign-shards, as given
	campaignShards    []int         // the campaign's runs: one budget of each of these shard counts
	campaignGrants    int           // the campaign's budget, in grants
	kinds             bool          // -kinds: uniform, zipf or hot with the kinds scenario's kinds in use
	cpuProfile        string        // -cpu-profile: a folder for a CPU profile of ledgerd over each run's measurement
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
		if emulatorCPUs, cpus, err = stack.PinEmulator(args); err != nil {
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
		if f.ledgerd, commit, err = stack.BuildLedgerd(ctx, dir); err != nil {
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
		if r.shared, err = stack.StartEnv(ctx, f.proxyOptions(), r.emulatorCPUs); err != nil {
			return false, err
		}
		defer r.shared.Stop()
	}
	if err := r.runAll(ctx, rate); err != nil {
		return false, err
	}
	r.rep.PrintSummary(os.Stdout)
	if err := r.rep.WriteFiles(f.out, f.scenario); err != nil {
		return false, err
	}
	return r.rep.Invariants.OK() && report.EveryRunWrote(r.rep.Runs), nil
}

// proxyOptions are what the flags ask of the DynamoDB proxy.
func (f flags) proxyOptions() stack.Proxy {
	return stack.Proxy{On: f.proxy, Latency: f.latency, PartitionScale: f.partitionScale}
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
	fs.StringVar(&f.scenario, "scenario", "uniform", "the load: "+strings.Join(drive.Scenarios, ", "))
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
	fs.Float64Var(&f.partitionScale, "partition-scale", 0, "put the DynamoDB proxy in and have it enforce DynamoDB's per-partition limits times this: at 1, 1,000 write units and 3,000 read units a second per partition key, at 0.1 a tenth (so that the partition, not the emulator, is the bound); 0: no limits")
	fs.BoolVar(&f.h2c, "h2c", false, "talk to ledgerd over HTTP/2 without TLS (one connection) instead of HTTP/1.1")
	fs.BoolVar(&f.baselines, "baselines", true, "also measure the direct and the naive baselines (not with -target)")
	fs.BoolVar(&f.sharedEmulator, "shared-emulator", false, "run everything on one DynamoDB Local instead of a fresh one per run (to see the emulator slow down as stream records pile up)")
	fs.StringVar(&f.out, "out", "loadtest-results", "folder for the JSON and HTML reports")
	fs.IntVar(&f.instances, "instances", 1, "ledgerd serve processes to start on the one DynamoDB, each on ports of its own; the load tool spreads the calls over them round robin, as a load balancer")
	fs.BoolVar(&f.affinity, "affinity", false, "start the instances with their peers (-peers, -self), so that each user's mutations are committed by the one instance that owns the user")
	fs.BoolVar(&f.compare, "compare", false, "with -instances N: measure one instance, then N round robin, then N with -affinity, in turn, and compare their purchases/s")
	fs.DurationVar(&f.killOne, "kill-one", 0, "SIGKILL one instance (the one that committed the most so far) this long into each measurement of several instances; the load balancer takes it out after failures, and the checks require the others to serve every user within the health-check window")
	fs.DurationVar(&f.healthInterval, "health-interval", time.Second, "the load balancer's health checks: GET /healthz on each instance this often")
	fs.BoolVar(&f.webhooks, "webhooks", true, "each run of ledgerd delivers every event to a receiver of the load test's on 127.0.0.1 (an endpoint subscribed to * created through WebhookService), and the report has the events a second, the delivery lag and the order's violations; false: ledgerd runs no dispatcher (-dispatcher=false). Not with -target")
	fs.BoolVar(&f.compareWebhooks, "compare-webhooks", false, "measure ledgerd with delivery off, then on (serve's default: one reading of the stream for history and the dispatcher), then on with -shared-stream-reader=false (the dispatcher's own reading), in turn, and compare their purchases/s")
	fs.DurationVar(&f.webhookDrain, "webhook-drain", 2*time.Minute, "with webhooks: how long to wait after a run's checks for the receiver to have the event of every entry")
	fs.BoolVar(&f.pinEmulator, "pin-emulator", false, "run DynamoDB Local alone on the last CPU this process may use and the load tool, ledgerd and the proxy on the others (Linux, taskset), so that they do not take the emulator's CPU, as with DynamoDB on other machines")
	fs.StringVar(&f.campaignShardList, "campaign-shards", "1,32", "campaign: a run for each of these escrow shard counts, in turn (1: one budget item), each on a fresh emulator; the summary compares their grants/s with the first's")
	fs.IntVar(&f.campaignGrants, "campaign-grants", 2000, "campaign: the budget covers this many grants (each of 10 x -amount); grants begin with the measurement, which ends at the first BUDGET_EXHAUSTED (or after -duration)")
	fs.StringVar(&f.cpuProfile, "cpu-profile", "", "a folder for a CPU profile of ledgerd (its first instance) over each run's measured window, <run>.pprof, taken from its operations listener; loadtest/cpushares.sh reads it. Not with -target")
	fs.BoolVar(&f.kinds, "kinds", false, "uniform, zipf, hot: the users also hold the kinds scenario's point kinds (created first with the admin token) and each purchase spends at a merchant and in a category; the kinds are checked after each run of ledgerd")
	err := fs.Parse(args)
	if err == nil && f.scenario == "kinds" {
		f.baselines = false // a baseline has no kinds
	}
	if err == nil && f.scenario == "campaign" {
		f.baselines = false // a baseline sends no grants from a budget
		f.campaignShards, err = parseShards(f.campaignShardList)
	}
	return f, err
}

// params checks the flags that shape the load and returns its parameters,
// and the open loop's rate (0: none, or half of the closed loop's).
func (f flags) params() (p *drive.Params, rate float64, err error) {
	p = &drive.Params{IDs: new(atomic.Int64), Users: f.users, Spends: f.spends, Covers: f.covers, RunID: strconv.FormatInt(time.Now().UnixNano(), 36),
		RunFor: f.warmup + f.duration}
	if !slices.Contains(drive.Scenarios, f.scenario) {
		return nil, 0, fmt.Errorf("-scenario %q: want one of %s", f.scenario, strings.Join(drive.Scenarios, ", "))
	}
	if f.concurrency < 1 || f.users < 1 || f.duration <= 0 || f.warmup < 0 || f.maxInFlight < 1 {
		return nil, 0, errors.New("-concurrency, -users, -duration and -max-in-flight must be positive")
	}
	if f.scenario == "hot" {
		p.Users = 1
	}
	if !(f.partitionScale >= 0) || math.IsInf(f.partitionScale, 1) {
		return nil, 0, fmt.Errorf("-partition-scale %v: want 0 (no limits) or a positive factor", f.partitionScale)
	}
	if f.partitionScale > 0 && f.target != "" {
		return nil, 0, errors.New("-partition-scale limits the DynamoDB of the ledgerd the load test starts: not with -target")
	}
	if err := f.checkFleet(); err != nil {
		return nil, 0, err
	}
	if f.scenario == "double-spend" && (f.covers < 0 || f.spends <= f.covers) {
		return nil, 0, errors.New("double-spend: want 0 <= -covers < -spends")
	}
	if p.Amount, err = decimal.NewFromString(f.amount); err != nil || !p.Amount.IsPositive() {
		return nil, 0, fmt.Errorf("-amount %q: want a positive decimal", f.amount)
	}
	if p.Grant, err = decimal.NewFromString(f.grant); err != nil || !p.Grant.IsPositive() {
		return nil, 0, fmt.Errorf("-grant %q: want a positive decimal", f.grant)
	}
	if f.scenario == "campaign" {
		if f.target != "" {
			return nil, 0, errors.New("-scenario campaign creates its budgets with the admin token of the ledgerd it starts: not with -target")
		}
		if f.campaignGrants < 1 {
			return nil, 0, errors.New("-campaign-grants must be positive")
		}
		if f.rate != "" {
			return nil, 0, errors.New("-scenario campaign runs a closed loop until its budget is exhausted: not with -rate")
		}
	}
	if (f.scenario == "kinds" || f.kinds) && f.target != "" {
		return nil, 0, errors.New("-scenario kinds and -kinds create their point kinds with the admin token of the ledgerd the load test starts: not with -target")
	}
	if f.cpuProfile != "" && f.target != "" {
		return nil, 0, errors.New("-cpu-profile profiles the ledgerd the load test starts: not with -target (ask its operations listener for /debug/pprof/profile)")
	}
	if f.kinds && !slices.Contains([]string{"uniform", "zipf", "hot"}, f.scenario) {
		return nil, 0, fmt.Errorf("-kinds is for uniform, zipf and hot (-scenario kinds has its own), not %s", f.scenario)
	}
	if f.scenario == "mixed" {
		if p.Mix, err = drive.ParseMix(f.mix); err != nil {
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
	case f.compareWebhooks && (f.target != "" || f.compare):
		return errors.New("-compare-webhooks starts instances of its own, one configuration at a time: not with -target or -compare")
	case f.compareWebhooks && os.Getenv("LEDGER_PROJECTOR") == "false":
		return errors.New("-compare-webhooks compares one reading of the stream for history and deliveries with one each: not with LEDGER_PROJECTOR=false")
	case f.webhookDrain <= 0:
		return errors.New("-webhook-drain must be positive")
	}
	return nil
}

// failoverWindow is how long after a kill the other instances may take to
// serve every user (stack.FailoverWindow).
func (f flags) failoverWindow() time.Duration { return stack.FailoverWindow(f.healthInterval) }

// fleetConfig is the shape of one ledgerd run: how many instances,
// whether they know their peers, and how they deliver webhooks
// (namedDelivery: the run's name says how, under -compare-webhooks).
type fleetConfig struct {
	instances     int
	affinity      bool
	delivery      delivery
	namedDelivery bool
}

// runName names a run of c: "ledgerd" for one instance, "ledgerd-x3" for
// three round robin, "ledgerd-x3-affinity" with affinity.
func (c fleetConfig) runName() string {
	name := "ledgerd"
	if c.instances > 1 || c.affinity {
		name += fmt.Sprintf("-x%d", c.instances)
	}
	if c.affinity {
		name += "-affinity"
	}
	if c.namedDelivery {
		name += c.delivery.suffix()
	}
	return name
}

// fleetConfigs are the configurations the invocation measures, in order:
// with -compare one instance, then -instances round robin, then the same
// with affinity; with -compare-webhooks delivery off (the reference the
// others are compared with), on, then on with the dispatcher's own
// reading of the stream; else the
// one the flags ask for.
func (f flags) fleetConfigs() []fleetConfig {
	d := deliveryOn
	if !f.webhooks {
		d = deliveryOff
	}
	switch {
	case f.compare:
		return []fleetConfig{{instances: 1, delivery: d}, {instances: f.instances, delivery: d}, {instances: f.instances, affinity: true, delivery: d}}
	case f.compareWebhooks:
		var out []fleetConfig
		for _, d := range []delivery{deliveryOff, deliveryOn, deliveryOwnReader} {
			out = append(out, fleetConfig{instances: f.instances, affinity: f.affinity, delivery: d, namedDelivery: true})
		}
		return out
	}
	return []fleetConfig{{instances: f.instances, affinity: f.affinity, delivery: d}}
}

// newReport starts the report with what the runs will not change: when,
// how to run it again, on what machine, with which options.
func newReport(f flags, p *drive.Params, args []string, cpus string) *report.Report {
	rep := &report.Report{
		Date:    time.Now().UTC(),
		Command: command(args),
		Machine: fmt.Sprintf("%s, %s/%s, %s", cpus, runtime.GOOS, runtime.GOARCH, runtime.Version()),
		Options: report.Options{Scenario: f.scenario, Concurrency: f.concurrency, DurationS: f.duration.Seconds(), WarmupS: f.warmup.Seconds(),
			Users: p.Users, LatencyMS: float64(f.latency) / float64(time.Millisecond), PartitionScale: f.partitionScale, MaxBatch: os.Getenv("LEDGER_MAX_BATCH"),
			SharedEmulator: f.sharedEmulator, PinEmulator: f.pinEmulator,
			Instances: f.instances, Affinity: f.affinity, Compare: f.compare, KillOneS: f.killOne.Seconds(),
			Webhooks: f.webhooks && f.target == "", CompareWebhooks: f.compareWebhooks},
	}
	if f.scenario == "mixed" {
		rep.Options.Mix = f.mix
	}
	return rep
}

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
