package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/pointledger/pointledger/internal/dynamolocal"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/internal/projection"
	"github.com/pointledger/pointledger/internal/reconcile"
	"github.com/pointledger/pointledger/loadtest/baseline"
	"github.com/pointledger/pointledger/loadtest/check"
	"github.com/pointledger/pointledger/loadtest/drive"
	"github.com/pointledger/pointledger/loadtest/report"
	"github.com/pointledger/pointledger/loadtest/stack"
	"github.com/pointledger/pointledger/migrations"
)

// newRunner makes the runner of the invocation: its HTTP client to
// ledgerd and, with -target, the DynamoDB its checks read. ledgerd is what
// the report calls the ledgerd it starts (its binary, or its build).
func newRunner(ctx context.Context, f flags, p *drive.Params, rep *report.Report, emulatorCPUs, ledgerd string) (*runner, error) {
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
		case stack.AWSDynamoDB:
			rep.Target = "AWS's DynamoDB (from the environment), fresh tables, and ledgerd " + ledgerd
		default:
			rep.Target = "the DynamoDB at " + f.dynamoEndpoint + ", fresh tables, and ledgerd " + ledgerd
		}
		if f.latency > 0 {
			rep.Target += fmt.Sprintf(", proxy adding %s per call", f.latency)
		}
		if f.partitionScale > 0 {
			rep.Target += fmt.Sprintf(", proxy limiting each partition to DynamoDB's units times %g", f.partitionScale)
		}
		return r, nil
	}
	// Its dispatcher, URL policy and admin token are not the load test's.
	r.f.baselines, r.f.webhooks = false, false
	rep.Target = f.target
	if f.dynamoEndpoint != "" && f.dynamoEndpoint != stack.AWSDynamoDB {
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

// runner runs the measured runs of one invocation.
type runner struct {
	f       flags
	p       *drive.Params
	rep     *report.Report
	http    *http.Client
	shared  *stack.Env       // -shared-emulator: every run's
	checkDB *dynamodb.Client // -target: its DynamoDB
	envs    int              // -dynamodb-endpoint: the runs' tables made so far

	campaign *campaignRun // the campaign scenario's run under way (campaign.go)

	emulatorCPUs string // -pin-emulator: the CPU DynamoDB Local gets alone
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
			func(db *dynamodb.Client, table string) drive.Executor { return baseline.NewDirectExec(db, table) }, nil); err != nil {
			return err
		}
	}
	for _, c := range r.f.fleetConfigs() {
		if r.f.scenario == "campaign" {
			if err := r.campaignRuns(ctx, c); err != nil {
				return err
			}
			continue
		}
		if err := r.ledgerdRuns(ctx, c, rate); err != nil {
			return err
		}
	}
	if !r.f.baselines {
		return nil
	}
	var naive *baseline.NaiveExec
	return r.baseline(ctx, "baseline-naive", "read the balance, then write the entry and the balance without conditions",
		func(db *dynamodb.Client, table string) drive.Executor {
			naive = baseline.NewNaiveExec(db, table)
			return naive
		},
		func(ctx context.Context, run *report.Run) error {
			notes, err := naive.Damage(ctx, r.p.Amount)
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

// env returns the DynamoDB of the next run: the shared one, or a fresh one
// (DynamoDB Local slows down as stream records pile up, so by default
// every run starts on a new one, alike).
func (r *runner) env(ctx context.Context) (*stack.Env, func(), error) {
	if r.shared != nil {
		return r.shared, func() {}, nil
	}
	var e *stack.Env
	var err error
	if r.f.dynamoEndpoint != "" {
		r.envs++
		prefix := fmt.Sprintf("%slt-%s-%d-", r.f.tablePrefix, r.p.RunID, r.envs)
		e, err = stack.GivenEnv(ctx, r.f.dynamoEndpoint, prefix, r.f.proxyOptions())
	} else {
		e, err = stack.StartEnv(ctx, r.f.proxyOptions(), r.emulatorCPUs)
	}
	if err != nil {
		return nil, nil, err
	}
	return e, e.Stop, nil
}

// measure sets the scenario up and runs it, closed loop or (rate > 0)
// open loop.
func (r *runner) measure(ctx context.Context, name string, s drive.Scenario, send drive.Sender, rate float64, rec *drive.Recorder) (report.Run, error) {
	if err := s.Setup(ctx, send); err != nil {
		return report.Run{}, fmt.Errorf("%s setup: %w", name, err)
	}
	f := r.f
	run := report.Run{Name: name, Mode: "closed", Concurrency: f.concurrency}
	if rate > 0 {
		run = report.Run{Name: name, Mode: "open", Rate: rate}
		fmt.Printf("%s: %s, open loop at %.0f steps/s, %s warm-up (closed loop) + 1s + %s\n", name, f.scenario, rate, f.warmup, f.duration)
		if late := drive.OpenLoop(ctx, s, send, rate, f.maxInFlight, f.concurrency, f.warmup, f.duration, rec, progressOut()); late > 0 {
			fmt.Printf("  %d steps started late (the load tool fell behind its schedule; their latency counts from when they were due)\n", late)
		}
	} else {
		fmt.Printf("%s: %s, closed loop of %d clients, %s warm-up + %s\n", name, f.scenario, f.concurrency, f.warmup, f.duration)
		drive.ClosedLoop(ctx, s, send, f.concurrency, f.warmup, f.duration, rec, progressOut())
	}
	measured := rec.Run()
	measured.Name, measured.Mode, measured.Concurrency, measured.Rate = run.Name, run.Mode, run.Concurrency, run.Rate
	return measured, ctx.Err()
}

// baseline measures a baseline on its own table.
func (r *runner) baseline(ctx context.Context, name, description string, mk func(*dynamodb.Client, string) drive.Executor, finish func(context.Context, *report.Run) error) error {
	e, stop, err := r.env(ctx)
	if err != nil {
		return err
	}
	defer stop()
	// The baseline's own table, written through the proxy if any: the
	// same conditions as ledgerd.
	table, err := baseline.CreateTable(ctx, e.DB, e.Prefix+name+"-")
	if err != nil {
		return err
	}
	x := mk(e.Client, table)
	bp := *r.p
	bp.UserTag = name
	rec := drive.NewRecorder()
	before, after := stack.CountProxy(rec, e)
	run, err := r.measure(ctx, name, drive.NewScenario(r.f.scenario, &bp, true), drive.NewSender(x, rec, nil), 0, rec)
	if err != nil {
		return err
	}
	run.Description = description
	stack.AddProxyFigures(&run, e, table, before, after)
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
func (r *runner) ledgerd(ctx context.Context, name string, c fleetConfig, rate float64) (report.Run, error) {
	instances := []*stack.Instance{{Name: "target", URL: r.f.target, OpsURL: r.f.targetOps}}
	db, prefix, token := r.checkDB, r.f.tablePrefix, r.f.token
	adminToken := "" // of the ledgerd started here: the campaign creates its budget with it
	var e *stack.Env
	var hooks *webhookEndpoint // the run's endpoint at the receiver; nil: none
	killAfter := time.Duration(0)
	if r.f.target == "" {
		var stop func()
		var err error
		if e, stop, err = r.env(ctx); err != nil {
			return report.Run{}, err
		}
		defer stop()
		o := stack.FleetOptions{Bin: r.f.ledgerd, Instances: c.instances, Affinity: c.affinity, Health: r.f.healthInterval}
		if r.f.scenario == "checkout" || r.f.scenario == "returns" {
			// The check waits for the sweeper to release the holds the run
			// left open (and to mature the grants it left pending): at its
			// 15 s default it would wait longer than they lasted.
			o.Args = []string{"-sweep-interval", checkoutSweepInterval.String()}
		}
		o.Args = append(o.Args, c.delivery.args()...)
		fl, err := stack.StartFleet(ctx, o, e)
		if err != nil {
			return report.Run{}, err
		}
		defer fl.Stop()
		instances, db, prefix, token, adminToken = fl.Instances, e.DB, e.Prefix, fl.Token, fl.AdminToken
		if c.delivery != deliveryOff {
			if hooks, err = startWebhooks(ctx, r.http, fl.Instances[0].URL, fl.AdminToken, name); err != nil {
				return report.Run{}, err
			}
			defer func() {
				if hooks != nil { // not stopped after its drain: an error came first
					_ = hooks.receiver.Close(context.WithoutCancel(ctx))
				}
			}()
		}
		if c.instances > 1 {
			killAfter = r.f.killOne
		}
	}
	rec, b := drive.NewRecorder(), check.NewBook()
	before, after := stack.CountProxy(rec, e)
	fr := stack.NewFleetRun(instances, r.http, token, r.f.healthInterval, killAfter, r.f.failoverWindow(), rec)
	emulatorPid := 0 // none to watch under -target
	if e != nil {
		emulatorPid = e.EmulatorPid
	}
	cpu := report.NewCPUWatch(emulatorPid)
	rec.OnMeasure(cpu.Begin, cpu.End)
	prof, err := newCPUProfile(r.http, r.f.cpuProfile, name, instances[0].OpsURL, r.f.duration) // nil without -cpu-profile, which -target refuses
	if err != nil {
		return report.Run{}, err
	}
	if prof != nil {
		rec.OnMeasure(func() { prof.begin(ctx) }, nil)
	}
	if hooks != nil {
		hooks.measure(rec)
	}
	x := fr.Balancer
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go x.Watch(watchCtx, r.http)
	p := *r.p
	p.UserTag = name
	r.campaign.prepare(&p, rec, r.http, instances[0].URL, adminToken)
	if r.f.scenario == "kinds" || r.f.kinds {
		prepareKinds(&p, r.http, instances[0].URL, adminToken)
	}
	s := drive.NewScenario(r.f.scenario, &p, false)
	lagCtx, stopLag := context.WithCancel(ctx)
	lags := stack.SampleLag(lagCtx, r.http, x.OpsURL)
	run, err := r.measure(ctx, name, s, drive.NewSender(x, rec, b), rate, rec)
	stopLag()
	if err != nil {
		return report.Run{}, err
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
	if r.f.target == "" {
		run.Description += ", " + c.delivery.describe()
	}
	if run.Fleet, err = fr.Figures(c.affinity, run.DurationS); err != nil {
		return report.Run{}, err
	}
	stack.AddProxyFigures(&run, e, prefix+migrations.LedgerTable, before, after)
	instancesCPU := -1.0
	if run.Fleet != nil && r.f.target == "" {
		instancesCPU = run.Fleet.Total.CPU
		run.LedgerdCPU = report.NewCPUCost(instancesCPU*run.DurationS, run)
	}
	if note := cpu.Note(instancesCPU); note != "" {
		run.Notes = append(run.Notes, note)
	}
	if prof != nil {
		run.Notes = append(run.Notes, prof.note(ctx))
	}
	run.Notes = append(run.Notes, stack.ProjectionNotes(ctx, x.Client(), x.LastSpent(), <-lags)...)
	store := dynamo.New(db, dynamo.Options{Table: prefix + migrations.LedgerTable})
	chk := &check.Checker{Ledger: store, Reconciler: reconcile.New(store,
		projection.NewHistory(db, prefix+migrations.HistoryTable, store, nil),
		projection.NewLeaseTable(db, prefix+migrations.LeaseTable, nil))}
	if r.f.scenario == "checkout" || r.f.scenario == "returns" {
		if r.f.scenario == "checkout" {
			chk.API = x.Client()
		}
		fmt.Printf("%s: waiting for the holds left open to expire (ttl %s) and be released, and the grants left pending to mature...\n", name, drive.HoldTTL)
		note, err := check.ExpiryNote(ctx, store.Balance, b.Users())
		if err != nil {
			return report.Run{}, err
		}
		run.Notes = append(run.Notes, note)
	}
	r.campaign.figures(&run)
	r.rep.Runs = append(r.rep.Runs, run)
	reported := &r.rep.Runs[len(r.rep.Runs)-1]

	fmt.Printf("%s: checking the invariants...\n", name)
	if err := catchUp(ctx, r.http, x.OpsURL(), db, prefix); err != nil {
		return report.Run{}, err
	}
	inv, err := chk.Check(ctx, b, drive.Covers(s))
	if err != nil {
		return report.Run{}, err
	}
	if run.Fleet != nil && run.Fleet.Kill != nil {
		inv.AddFailover(*run.Fleet.Kill)
	}
	if hooks != nil {
		fmt.Printf("%s: waiting for the webhooks of its %d entries (at most %s)...\n", name, inv.Entries, r.f.webhookDrain)
		got := hooks.drain(ctx, inv.Entries, r.f.webhookDrain)
		checkWebhooks(&inv, got, r.f.webhookDrain)
		run.Webhooks, reported.Webhooks = &got, &got
		err := hooks.stop(ctx, x.URL())
		hooks = nil
		if err != nil {
			return report.Run{}, err
		}
	}
	if err := r.campaign.check(ctx, chk, store, b, run, &inv); err != nil {
		return report.Run{}, err
	}
	if r.f.scenario == "kinds" || r.f.kinds {
		fmt.Printf("%s: checking the draws and balances of each kind...\n", name)
		if err := checkKinds(ctx, chk, store, x.Client(), &p, b, reported, &inv); err != nil {
			return report.Run{}, err
		}
		run.Kinds = reported.Kinds
	}
	r.rep.Invariants.Add(name, inv)
	return run, nil
}

// checkoutSweepInterval is the sweep interval of the ledgerd a checkout
// run starts.
const checkoutSweepInterval = time.Second

func progressOut() io.Writer { return os.Stderr }

// catchUp: when ledgerd runs no projector (or its operations listener
// cannot say), the history is brought up to date from the ledger (as
// `ledgerd project` would) so it can be checked.
func catchUp(ctx context.Context, c *http.Client, opsURL string, db *dynamodb.Client, prefix string) error {
	if st, err := stack.ReadProjectionStatus(c, opsURL); err == nil && st.Running {
		return nil
	}
	fmt.Println("ledgerd runs no projector: catching the history up from the ledger, as `ledgerd project` would")
	store := dynamo.New(db, dynamo.Options{Table: prefix + migrations.LedgerTable})
	_, err := projection.NewHistory(db, prefix+migrations.HistoryTable, store, nil).CatchUp(ctx)
	return err
}
