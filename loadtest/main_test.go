package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/loadtest/report"
	"github.com/pointledger/pointledger/loadtest/stack"
)

func TestMain(m *testing.M) { dynamotest.Main(m) }

// Two ledgerd with affinity on one DynamoDB (the test binary's DynamoDB
// Local, through -dynamodb-endpoint), one of them SIGKILLed mid-run: the
// load tool takes it out of its rotation, the other serves every user, and
// the checks pass. The report has both instances' figures, forwarding
// included.
func TestTwoInstancesAndTheKillOfOne(t *testing.T) {
	if testing.Short() {
		t.Skip("builds ledgerd and runs two of them for a few seconds")
	}
	bin, _, err := stack.BuildLedgerd(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// The history is caught up from the ledger before the checks; a
	// projector in each would wait out the killed one's shard lease.
	t.Setenv("LEDGER_PROJECTOR", "false")
	t.Setenv("LEDGER_SWEEPER", "false")
	// No webhooks: the killed one's claims on delivery queues would hold
	// its users' events for the claim's 40 s. Deliveries through a SIGKILL
	// are internal/faulttest's TestWebhooksThroughFaults.
	out := t.TempDir()
	ok, err := run(context.Background(), []string{"-ledgerd", bin, "-dynamodb-endpoint", dynamotest.Emulator(t).Endpoint, "-webhooks=false",
		"-instances", "2", "-affinity", "-kill-one", "1500ms", "-health-interval", "200ms",
		"-scenario", "uniform", "-users", "20", "-concurrency", "8", "-warmup", "1s", "-duration", "6s",
		"-baselines=false", "-out", out})
	if err != nil {
		t.Fatal(err)
	}
	rep := readReport(t, out)
	if !ok {
		t.Fatalf("the run failed its checks: %q", rep.Invariants.Violations)
	}
	if len(rep.Runs) != 1 || rep.Runs[0].Fleet == nil {
		t.Fatalf("runs = %+v, want one with its fleet", rep.Runs)
	}
	f := rep.Runs[0].Fleet
	// The balancer's counts and the run's are taken a moment apart, at the
	// start of the measurement and at its end: calls in flight at either
	// moment (8 at most each) may fall on either side, and on a busy
	// machine calls also finish between the two readings (24 more of
	// 2,486 seen with the load average over 30, 21 of 859 beside the rest
	// of make test): 16 calls or 5% of the run, whichever is more. A count
	// off by an instance, or counted twice, is far more.
	tolerance := max(16, rep.Runs[0].OK/20)
	if diff := f.Total.OK - rep.Runs[0].OK; f.Instances != 2 || len(f.PerInstance) != 2 || diff < -tolerance || diff > tolerance {
		t.Errorf("fleet = %+v, want 2 instances whose acknowledgements add up to about the run's %d", f, rep.Runs[0].OK)
	}
	if f.Total.Committed == 0 || f.Total.Groups == 0 || f.Total.Forwarded == 0 {
		t.Errorf("total = %+v, want the write path's commits and forwards from /metrics", f.Total)
	}
	if c := rep.Runs[0].LedgerdCPU; c == nil || c.Seconds <= 0 || c.PerPurchaseMS <= 0 || c.PerGrantMS != 0 {
		t.Errorf("ledgerd's CPU = %+v, want seconds and a cost per purchase (and none per grant: uniform grants before it measures)", c)
	}
	k := f.Kill
	if k == nil || k.TakenOutAfterMS < 0 || k.ServedLater == 0 || len(k.Late) != 0 {
		t.Fatalf("kill = %+v, want the instance taken out and the users served after the window", k)
	}
	for _, in := range f.PerInstance {
		if in.Name == k.Instance && in.Note == "" {
			t.Errorf("the killed %s has no note", in.Name)
		}
	}
}

func readReport(t *testing.T, dir string) report.Report {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) != 1 {
		t.Fatalf("reports in %s: %v, %v", dir, files, err)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var rep report.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestFleetFlags(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string // "" for valid, else a part of the error
	}{
		{[]string{"-instances", "3"}, ""},
		{[]string{"-instances", "3", "-compare", "-kill-one", "5s"}, ""},
		{[]string{"-instances", "0"}, "at least 1"},
		{[]string{"-compare"}, "-instances 2 or more"},
		{[]string{"-kill-one", "5s"}, "-instances 2 or more"},
		{[]string{"-instances", "2", "-kill-one", "20s"}, "before the end of -duration"},
		{[]string{"-target", "http://x", "-instances", "2"}, "not with -target"},
		{[]string{"-target", "http://x", "-affinity"}, "not with -target"},
		{[]string{"-instances", "2", "-health-interval", "0s"}, "-health-interval"},
	} {
		f, err := parseFlags(c.args)
		if err == nil {
			_, _, err = f.params()
		}
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}

func TestCompareRunsOneInstanceThenSeveralThenWithAffinity(t *testing.T) {
	t.Parallel()
	f, err := parseFlags([]string{"-instances", "3", "-compare"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range f.fleetConfigs() {
		names = append(names, c.runName())
	}
	if got := strings.Join(names, " "); got != "ledgerd ledgerd-x3 ledgerd-x3-affinity" {
		t.Errorf("runs = %s", got)
	}
	f, _ = parseFlags([]string{"-instances", "2", "-affinity"})
	if c := f.fleetConfigs(); len(c) != 1 || c[0].runName() != "ledgerd-x2-affinity" {
		t.Errorf("-instances 2 -affinity: %+v", c)
	}
}

// A hot user through -partition-scale 0.02 (20 write units a second on its
// partition): the proxy throttles the user's partition, the report counts
// the throttles by table and key kind and the write units of a purchase,
// and no more purchases go through than the partition allows. Without the
// limits the emulator takes hundreds a second; a busy machine only makes
// fewer.
func TestAHotUserThroughThePartitionLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("builds ledgerd and runs it for a few seconds")
	}
	out := t.TempDir()
	ok, err := run(context.Background(), []string{"-dynamodb-endpoint", dynamotest.Emulator(t).Endpoint, "-partition-scale", "0.02",
		"-scenario", "hot", "-concurrency", "16", "-warmup", "1s", "-duration", "5s", "-baselines=false", "-out", out})
	if err != nil {
		t.Fatal(err)
	}
	rep := readReport(t, out)
	if !ok {
		t.Fatalf("the run failed its checks: %q", rep.Invariants.Violations)
	}
	if rep.Options.PartitionScale != 0.02 || len(rep.Runs) != 1 {
		t.Fatalf("options %+v and %d runs, want the scale and one run", rep.Options, len(rep.Runs))
	}
	r := rep.Runs[0]
	if r.Throttles["ledger"]["ACCT"] == 0 {
		t.Errorf("throttles %v, want the ledger's ACCT partition throttled", r.Throttles)
	}
	// The report prices the purchases. Not to 4-6 units each here: it
	// divides the units charged in the measured window by the purchases
	// answered in it, and at 20 units a second a throttled group waits
	// seconds between its charge and its answers, so a 5 s window may
	// hold one without the other (2.19 was seen once throttles got their
	// own, longer, schedule). The units of a purchase are checked where
	// nothing waits: ddbproxy's tests and the capacity benchmarks.
	if r.WriteUnitsPerPurchase <= 0 {
		t.Errorf("%.2f write units per purchase, want the report to price them", r.WriteUnitsPerPurchase)
	}
	// 20 units a second, a second's worth in the bucket when the
	// measurement starts, and a group in flight at each end (a group of 48
	// costs 194 units; one costing more than the bucket holds passes from
	// a full bucket and leaves it in debt): at most (6 x 20 + 2 x 200) / 4 =
	// 130 purchases in 5 s.
	if limit := (6*20 + 2*200) / 4 / r.DurationS; r.Purchases > limit {
		t.Errorf("%.1f purchases a second through a partition of 20 write units a second, want at most %.1f", r.Purchases, limit)
	}
}

func TestPartitionScaleFlag(t *testing.T) {
	for _, args := range [][]string{
		{"-partition-scale", "-1"},
		{"-partition-scale", "NaN"},
		{"-partition-scale", "0.1", "-target", "http://127.0.0.1:1"},
	} {
		f, err := parseFlags(args)
		if err != nil {
			continue // refused by the flag package itself
		}
		if _, _, err := f.params(); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
	f, err := parseFlags([]string{"-partition-scale", "0.1"})
	if err != nil {
		t.Fatal(err)
	}
	if p := f.proxyOptions(); p.PartitionScale != 0.1 || p.Latency != 0 || p.On {
		t.Errorf("proxy options %+v, want the scale alone (which puts the proxy in)", p)
	}
}

// -compare-webhooks: delivery off, on, and on with one reading of the
// stream, each on tables of its own. The runs with delivery have the
// receiver's figures and pass its checks (every event verified, in order
// from version 1, one for each entry); the one without has none; and the
// report compares both with it.
func TestCompareWebhooks(t *testing.T) {
	if testing.Short() {
		t.Skip("builds ledgerd and runs it three times for a few seconds")
	}
	out := t.TempDir()
	ok, err := run(context.Background(), []string{"-dynamodb-endpoint", dynamotest.Emulator(t).Endpoint, "-compare-webhooks",
		"-scenario", "uniform", "-users", "10", "-concurrency", "4", "-warmup", "1s", "-duration", "2s", "-baselines=false", "-out", out})
	if err != nil {
		t.Fatal(err)
	}
	rep := readReport(t, out)
	if !ok {
		t.Fatalf("the run failed its checks: %q", rep.Invariants.Violations)
	}
	if !rep.Options.Webhooks || !rep.Options.CompareWebhooks {
		t.Errorf("options %+v, want webhooks and compare_webhooks", rep.Options)
	}
	var names []string
	for _, r := range rep.Runs {
		names = append(names, r.Name)
		w := r.Webhooks
		if r.Name == "ledgerd-no-webhooks" {
			if w != nil {
				t.Errorf("%s: webhooks %+v, want none", r.Name, w)
			}
			continue
		}
		if w == nil {
			t.Errorf("%s: no webhooks in the report", r.Name)
			continue
		}
		if w.Events-w.Notices < r.Mutations || w.Users != 10 || w.Lag.Count == 0 || len(w.Violations()) != 0 {
			t.Errorf("%s: webhooks %+v, want an event for each of its %d mutations at least, 10 users, a lag, no violation", r.Name, w, r.Mutations)
		}
	}
	if got := strings.Join(names, " "); got != "ledgerd-no-webhooks ledgerd ledgerd-own-reader" {
		t.Errorf("runs = %s", got)
	}
	if !slices.Contains(rep.Invariants.Checked, webhookChecked) {
		t.Errorf("checked %q, want the webhooks' check", rep.Invariants.Checked)
	}
	var compared []string
	for _, c := range rep.Comparisons() {
		compared = append(compared, c.Run+"/"+c.Baseline)
	}
	if got := strings.Join(compared, " "); got != "ledgerd/ledgerd-no-webhooks ledgerd-own-reader/ledgerd-no-webhooks" {
		t.Errorf("comparisons = %s", got)
	}
}

func TestWebhookFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  string // LEDGER_PROJECTOR
		want string // "" for valid, else a part of the error
	}{
		{[]string{"-compare-webhooks"}, "", ""},
		{[]string{"-compare-webhooks", "-instances", "2", "-affinity"}, "", ""},
		{[]string{"-compare-webhooks", "-target", "http://127.0.0.1:1"}, "", "not with -target or -compare"},
		{[]string{"-compare-webhooks", "-instances", "2", "-compare"}, "", "not with -target or -compare"},
		{[]string{"-compare-webhooks"}, "false", "not with LEDGER_PROJECTOR=false"},
		{[]string{"-webhooks=false"}, "false", ""},
		{[]string{"-webhook-drain", "0s"}, "", "-webhook-drain must be positive"},
	} {
		t.Setenv("LEDGER_PROJECTOR", c.env)
		f, err := parseFlags(c.args)
		if err == nil {
			_, _, err = f.params()
		}
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%v (LEDGER_PROJECTOR=%q): %v, want %q", c.args, c.env, err, c.want)
		}
	}
}

// What each configuration asks of ledgerd serve, and what its runs are
// called.
func TestWebhookConfigs(t *testing.T) {
	t.Parallel()
	type config struct{ name, args string }
	configs := func(args ...string) []config {
		t.Helper()
		f, err := parseFlags(args)
		if err != nil {
			t.Fatal(err)
		}
		var out []config
		for _, c := range f.fleetConfigs() {
			out = append(out, config{c.runName(), strings.Join(c.delivery.args(), " ")})
		}
		return out
	}
	on, off := "-webhook-allow-http -webhook-allow-loopback", "-dispatcher=false"
	for _, c := range []struct {
		args []string
		want []config
	}{
		{nil, []config{{"ledgerd", on}}},
		{[]string{"-webhooks=false"}, []config{{"ledgerd", off}}},
		{[]string{"-compare-webhooks"}, []config{{"ledgerd-no-webhooks", off}, {"ledgerd", on}, {"ledgerd-own-reader", on + " -shared-stream-reader=false"}}},
		{[]string{"-compare-webhooks", "-instances", "2"}, []config{{"ledgerd-x2-no-webhooks", off}, {"ledgerd-x2", on}, {"ledgerd-x2-own-reader", on + " -shared-stream-reader=false"}}},
		{[]string{"-instances", "2", "-compare", "-webhooks=false"}, []config{{"ledgerd", off}, {"ledgerd-x2", off}, {"ledgerd-x2-affinity", off}}},
	} {
		if got := configs(c.args...); !slices.Equal(got, c.want) {
			t.Errorf("%v:\n got %q\nwant %q", c.args, got, c.want)
		}
	}
}

// The receiver's violations are the run's, and so is an event count other
// than the entries'.
func TestCheckWebhooks(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		entries int64
		got     report.Webhooks
		want    int // violations
	}{
		{"one event an entry, retries and a notice beside", 10, report.Webhooks{Events: 11, Notices: 1, Duplicates: 3}, 0},
		{"events missing", 10, report.Webhooks{Events: 9}, 1},
		{"more events than entries", 10, report.Webhooks{Events: 11}, 1},
		{"a gap, and its version never came", 10, report.Webhooks{Events: 9, Gaps: 1, Missing: 1}, 3},
	} {
		inv := report.Invariants{Entries: c.entries}
		checkWebhooks(&inv, c.got, time.Minute)
		if len(inv.Violations) != c.want || !slices.Contains(inv.Checked, webhookChecked) {
			t.Errorf("%s: violations %q, checked %q; want %d violations and the check", c.name, inv.Violations, inv.Checked, c.want)
		}
	}
}

func TestCampaignFlags(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string // "" for valid, else a part of the error
	}{
		{[]string{"-scenario", "campaign"}, ""},
		{[]string{"-scenario", "campaign", "-campaign-shards", "1,32,64", "-campaign-grants", "500"}, ""},
		{[]string{"-scenario", "campaign", "-campaign-shards", "0"}, "from 1 to 64"},
		{[]string{"-scenario", "campaign", "-campaign-shards", "1,65"}, "from 1 to 64"},
		{[]string{"-scenario", "campaign", "-campaign-shards", "1,x"}, "from 1 to 64"},
		{[]string{"-scenario", "campaign", "-campaign-grants", "0"}, "-campaign-grants"},
		{[]string{"-scenario", "campaign", "-rate", "100"}, "not with -rate"},
		{[]string{"-scenario", "campaign", "-target", "http://127.0.0.1:1"}, "not with -target"},
	} {
		f, err := parseFlags(c.args)
		if err == nil {
			_, _, err = f.params()
		}
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
	f, err := parseFlags([]string{"-scenario", "campaign", "-campaign-shards", "1, 32"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.campaignShards, []int{1, 32}) || f.baselines {
		t.Errorf("shards %v, baselines %t: want [1 32] and no baselines (they send no grants from a budget)", f.campaignShards, f.baselines)
	}
}

// The campaign in one invocation: a budget on one item, then on 4 shards,
// each drawn on until it is exhausted, checked after each run. The
// measurement ends at the first BUDGET_EXHAUSTED, long before -duration.
// (No webhooks: TestCompareWebhooks has them.)
func TestCampaignRunsOneItemThenShardsUntilExhausted(t *testing.T) {
	if testing.Short() {
		t.Skip("builds ledgerd and runs it twice for a few seconds")
	}
	out := t.TempDir()
	ok, err := run(context.Background(), []string{"-dynamodb-endpoint", dynamotest.Emulator(t).Endpoint, "-partition-scale", "0.1", "-webhooks=false",
		"-scenario", "campaign", "-campaign-shards", "1,4", "-campaign-grants", "20", "-users", "20", "-concurrency", "8",
		"-warmup", "1s", "-duration", "20s", "-out", out})
	if err != nil {
		t.Fatal(err)
	}
	rep := readReport(t, out)
	if !ok {
		t.Fatalf("the run failed its checks: %q", rep.Invariants.Violations)
	}
	if len(rep.Runs) != 2 {
		t.Fatalf("%d runs, want one for each shard count", len(rep.Runs))
	}
	for i, shards := range []int{1, 4} {
		r := rep.Runs[i]
		c := r.Campaign
		if c == nil || r.Name != fmt.Sprintf("ledgerd-shards-%d", shards) || c.Shards != shards {
			t.Fatalf("run %d: %s with campaign %+v, want ledgerd-shards-%d", i, r.Name, c, shards)
		}
		// 20 grants in 20 s: exhausted, however slow a busy machine is.
		if !c.Exhausted || c.GrantsAcked != 20 || c.Granted != "200" || c.Remaining != "0" || c.Total != "200" || c.GrantsPerS <= 0 {
			t.Errorf("%s: %+v, want every grant of the budget acknowledged, then BUDGET_EXHAUSTED", r.Name, c)
		}
		if cpu := r.LedgerdCPU; cpu == nil || cpu.Seconds <= 0 || cpu.PerGrantMS <= 0 {
			t.Errorf("%s: ledgerd's CPU = %+v, want a cost per grant", r.Name, cpu)
		}
		if r.DurationS >= 20 {
			t.Errorf("%s measured for %.1f s, first BUDGET_EXHAUSTED at %.1f s: want the measurement to end there", r.Name, r.DurationS, c.FirstExhaustedS)
		}
	}
}

// The kinds scenario end to end, briefly: the program's kinds created
// through PointKindService, purchases at merchants and in categories,
// refunds; the reconcile, the eligibility of every draw and GetBalance's
// kinds all clean, and the report's kinds section filled.
func TestKindsScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("builds ledgerd and runs it for a few seconds")
	}
	out := t.TempDir()
	ok, err := run(context.Background(), []string{"-dynamodb-endpoint", dynamotest.Emulator(t).Endpoint, "-webhooks=false",
		"-scenario", "kinds", "-users", "4", "-concurrency", "4", "-warmup", "1s", "-duration", "3s", "-out", out})
	if err != nil {
		t.Fatal(err)
	}
	rep := readReport(t, out)
	if !ok {
		t.Fatalf("the run failed its checks: %q", rep.Invariants.Violations)
	}
	if len(rep.Runs) != 1 || rep.Runs[0].Kinds == nil {
		t.Fatalf("runs %+v: want one run of ledgerd, with its kinds", rep.Runs)
	}
	k := rep.Runs[0].Kinds
	// Campaign points are spent first, wherever a purchase spends.
	if k.Purchases == 0 || k.DrawsByKind["lt-campaign"] == "" {
		t.Errorf("kinds %+v: want purchases, and campaign points drawn first", k)
	}
	if k.Refusals["INSUFFICIENT_BALANCE"] == 0 {
		t.Errorf("refusals %v: want the purchases beyond what a user holds refused INSUFFICIENT_BALANCE", k.Refusals)
	}
	if len(k.Checks) != 2 {
		t.Fatalf("checks %+v: want the eligibility of draws and the balances by kind", k.Checks)
	}
	for _, c := range k.Checks {
		if c.Checked == 0 || c.Violations != 0 {
			t.Errorf("%s: %d checked, %d violations; want some checked, none", c.Name, c.Checked, c.Violations)
		}
	}
	if !slices.ContainsFunc(rep.Invariants.Checked, func(s string) bool { return strings.Contains(s, "reconciliation") }) {
		t.Errorf("checked %q: want the reconcile too", rep.Invariants.Checked)
	}
}

func TestKindsFlags(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string // "" for valid, else a part of the error
	}{
		{[]string{"-scenario", "kinds"}, ""},
		{[]string{"-scenario", "uniform", "-kinds"}, ""},
		{[]string{"-scenario", "hot", "-kinds", "-rate", "half"}, ""},
		{[]string{"-scenario", "mixed", "-kinds"}, "-kinds is for uniform, zipf and hot"},
		{[]string{"-scenario", "kinds", "-kinds"}, "-kinds is for uniform, zipf and hot"},
		{[]string{"-scenario", "kinds", "-target", "http://127.0.0.1:1"}, "not with -target"},
		{[]string{"-kinds", "-target", "http://127.0.0.1:1"}, "not with -target"},
	} {
		f, err := parseFlags(c.args)
		if err == nil {
			_, _, err = f.params()
		}
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
	if f, err := parseFlags([]string{"-scenario", "kinds"}); err != nil || f.baselines {
		t.Errorf("-scenario kinds: baselines %t, %v; want none (a baseline has no kinds)", f.baselines, err)
	}
}

// uniform with -kinds: the same purchases, at merchants and in categories,
// over users who hold the kinds too; checked as the kinds scenario is.
func TestUniformWithKinds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds ledgerd and runs it for a few seconds")
	}
	out := t.TempDir()
	ok, err := run(context.Background(), []string{"-dynamodb-endpoint", dynamotest.Emulator(t).Endpoint, "-webhooks=false", "-baselines=false",
		"-scenario", "uniform", "-kinds", "-users", "8", "-concurrency", "4", "-warmup", "1s", "-duration", "2s", "-out", out})
	if err != nil {
		t.Fatal(err)
	}
	rep := readReport(t, out)
	if !ok {
		t.Fatalf("the run failed its checks: %q", rep.Invariants.Violations)
	}
	if len(rep.Runs) != 1 || rep.Runs[0].Kinds == nil || rep.Runs[0].Kinds.DrawsByKind["lt-campaign"] == "" {
		t.Fatalf("runs %+v: want one run of ledgerd whose purchases drew campaign points", rep.Runs)
	}
	for _, c := range rep.Runs[0].Kinds.Checks {
		if c.Checked == 0 || c.Violations != 0 {
			t.Errorf("%s: %d checked, %d violations; want some checked, none", c.Name, c.Checked, c.Violations)
		}
	}
}
