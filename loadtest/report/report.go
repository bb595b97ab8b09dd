// Package report is what a load test measured and checked: the Report, its
// JSON, the summary and the HTML page; and the figures read from ledgerd's
// /metrics and from the CPU each process used.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
)

// Report is everything one loadtest invocation measured and checked. Its
// JSON form (-json) is the input of the HTML report (-html) and of anyone
// comparing runs; fields are only added.
type Report struct {
	Date    time.Time `json:"date"`
	Command string    `json:"command"` // how to reproduce it
	Target  string    `json:"target"`
	Machine string    `json:"machine"` // CPUs, Go version
	Options Options   `json:"options"`

	// Runs: ledgerd's and the baselines', measured against the same
	// emulator, in the order they ran.
	Runs       []Run      `json:"runs"`
	Invariants Invariants `json:"invariants"`
}

// Options are the flags that shape a run.
type Options struct {
	Scenario    string  `json:"scenario"`
	Concurrency int     `json:"concurrency"`         // closed loop: clients
	Rate        float64 `json:"rate,omitempty"`      // open loop: requests/s (0: closed loop)
	DurationS   float64 `json:"duration_s"`          // measured, after the warm-up
	WarmupS     float64 `json:"warmup_s"`            // run but not measured
	Users       int     `json:"users"`               // users the scenario spreads over
	LatencyMS   float64 `json:"latency_ms"`          // the DynamoDB proxy's added latency (0: no proxy)
	MaxBatch    string  `json:"max_batch,omitempty"` // LEDGER_MAX_BATCH given to the ledgerd it started
	Mix         string  `json:"mix,omitempty"`       // mixed scenario: the proportions

	// PartitionScale: the proxy enforced DynamoDB's per-partition limits
	// times this (-partition-scale; 0: no limits).
	PartitionScale float64 `json:"partition_scale,omitempty"`

	// SharedEmulator: every run on one DynamoDB Local. By default each run
	// gets a fresh one, because the emulator slows every write to a table
	// with a stream as the records pile up, and a run after another would
	// pay for it.
	SharedEmulator bool `json:"shared_emulator"`
	// PinEmulator: DynamoDB Local ran alone on one CPU, everything else on
	// the others (-pin-emulator; Machine says which).
	PinEmulator bool `json:"pin_emulator,omitempty"`
	// Instances: ledgerd serve processes each run of ledgerd started
	// (-instances; with Compare, one, then this many, then this many with
	// affinity); Affinity: with their peers; KillOneS: one SIGKILLed this
	// long into each measurement of several.
	Instances int     `json:"instances,omitempty"`
	Affinity  bool    `json:"affinity,omitempty"`
	Compare   bool    `json:"compare,omitempty"`
	KillOneS  float64 `json:"kill_one_s,omitempty"`
	// Webhooks: each run of ledgerd delivered every event to the load
	// test's receiver (-webhooks); CompareWebhooks: measured with delivery
	// off, on, and on with one reading of the stream for history and
	// deliveries (-compare-webhooks).
	Webhooks        bool `json:"webhooks"`
	CompareWebhooks bool `json:"compare_webhooks,omitempty"`
}

// Run is one measured load: the service, or a baseline.
type Run struct {
	Name        string  `json:"name"` // "ledgerd", "baseline-direct", "baseline-naive"
	Description string  `json:"description"`
	Mode        string  `json:"mode"` // "closed" or "open"
	Concurrency int     `json:"concurrency"`
	Rate        float64 `json:"rate,omitempty"`
	DurationS   float64 `json:"duration_s"`

	Requests   int64            `json:"requests"`               // answered, with any outcome
	OK         int64            `json:"ok"`                     // acknowledged
	Codes      map[string]int64 `json:"codes"`                  // outcome -> count: "ok" or a Connect code
	Throughput float64          `json:"throughput"`             // acknowledged requests/s
	Purchases  float64          `json:"purchases_per_s"`        // acknowledged, replays left out
	Mutations  int64            `json:"mutations_acknowledged"` // grants, purchases, refunds, authorizations, captures and voids, replays left out
	Steps      float64          `json:"steps_per_s"`            // scenario steps completed (a retry burst, a double-spend round: one)
	// PurchaseCount and GrantCount: acknowledged purchases and grants,
	// replays left out.
	PurchaseCount int64 `json:"purchases_acknowledged"`
	GrantCount    int64 `json:"grants_acknowledged"`
	// LedgerdCPU: what ledgerd's instances spent of CPU over the
	// measurement, per what they acknowledged (the runs of a ledgerd the
	// load test started).
	LedgerdCPU *CPUCost `json:"ledgerd_cpu,omitempty"`

	// Latency of every request, whatever its outcome. Open loop: from the
	// time the schedule meant to send it (coordinated omission corrected).
	Latency Percentiles            `json:"latency"`
	ByOp    map[string]Percentiles `json:"by_op"` // latency by operation (purchase, grant, ...)
	// CodesByOp: the outcomes of each operation, when a run has several
	// (a checkout's authorizations refused, its captures acknowledged).
	CodesByOp map[string]map[string]int64 `json:"codes_by_op,omitempty"`
	Timeline  []Second                    `json:"timeline"`  // per second of the measured run
	Histogram []Bucket                    `json:"histogram"` // latency distribution, log-spaced buckets

	ItemWritesPerPurchase float64 `json:"item_writes_per_purchase,omitempty"` // ledger table, counted by the proxy
	// ItemWritesPerMutation: the same per acknowledged mutation of any kind
	// (a checkout's authorizations, captures and voids).
	ItemWritesPerMutation float64  `json:"item_writes_per_mutation,omitempty"`
	Transactions          int64    `json:"transactions,omitempty"`
	Conflicts             int64    `json:"transaction_conflicts,omitempty"`
	Notes                 []string `json:"notes,omitempty"` // findings of the run itself (the naive baseline's damage, ...)

	// WriteUnitsPerPurchase: the ledger table's write units, as the proxy
	// charged them by DynamoDB's rules (-partition-scale), per acknowledged
	// purchase; Throttles: the requests it refused for a partition over its
	// limit, by table and key kind (the partition key's prefix, ACCT).
	WriteUnitsPerPurchase float64                     `json:"write_units_per_purchase,omitempty"`
	Throttles             map[string]map[string]int64 `json:"throttles,omitempty"`

	// Fleet: the ledgerd instances the load test started, per instance and
	// in total (ledgerd's runs without -target).
	Fleet *Fleet `json:"fleet,omitempty"`

	// Webhooks: what the load test's receiver got from the run's webhook
	// endpoint (ledgerd's runs with -webhooks).
	Webhooks *Webhooks `json:"webhooks,omitempty"`

	// Campaign: the campaign scenario's budget and grants.
	Campaign *Campaign `json:"campaign,omitempty"`
	// Kinds: the kinds scenario's draws by kind, refusals and checks.
	Kinds *Kinds `json:"kinds,omitempty"`
}

// Fleet is how the instances of a run shared its load.
type Fleet struct {
	Instances int    `json:"instances"`
	Affinity  bool   `json:"affinity"` // each told of its peers (-peers), which own the users
	Balancer  string `json:"balancer"` // how calls were spread, in words
	// PerInstance and Total are counted over the measurement: calls as the
	// load tool (the load balancer) sent them, the write path from each
	// instance's /metrics, read when the measurement began and ended.
	PerInstance []InstanceFigures `json:"per_instance"`
	Total       InstanceFigures   `json:"total"`
	Kill        *Kill             `json:"kill,omitempty"` // -kill-one
}

// InstanceFigures are one instance's part of a run, or the fleet's total.
type InstanceFigures struct {
	Name      string           `json:"name"`
	Calls     int64            `json:"calls"`           // sent to it
	OK        int64            `json:"ok"`              // acknowledged by it
	Codes     map[string]int64 `json:"codes"`           // outcome -> count
	Purchases float64          `json:"purchases_per_s"` // acknowledged by it, replays left out
	// Committed: mutations its write path committed (entries and recorded
	// refusals), in Groups ledger transactions. Under affinity an instance
	// forwards what another owns: it answers calls it does not commit.
	Committed  int64            `json:"mutations_committed"`
	Groups     int64            `json:"groups"`
	MeanGroup  float64          `json:"mean_group_size"`
	GroupSizes map[string]int64 `json:"group_sizes"`           // "1", "2", "3-4", ... "33-48": groups of that many mutations
	Conflicts  int64            `json:"transaction_conflicts"` // its transactions DynamoDB cancelled for a conflict
	Retries    map[string]int64 `json:"retries"`               // its write path's attempts tried again, by reason
	// Under affinity: mutations it sent to their user's owner and had
	// answered there, those the owner gave no answer to (by reason), and
	// those it then committed itself.
	Forwarded       int64            `json:"forwarded,omitempty"`
	ForwardFailures map[string]int64 `json:"forward_failures,omitempty"`
	FellBack        int64            `json:"fell_back,omitempty"`
	// CPU: the CPUs the process kept busy, on average (CPU seconds a
	// second of the measurement, from process_cpu_seconds_total).
	CPU  float64 `json:"cpu"`
	Note string  `json:"note,omitempty"`
}

// Kill is what -kill-one did and what followed.
type Kill struct {
	Instance string  `json:"instance"`
	AtS      float64 `json:"at_s"` // after the measurement began
	// TakenOutAfterMS: how long after the kill the load balancer took the
	// instance out of service (-1: it did not), and what took it out.
	TakenOutAfterMS float64 `json:"taken_out_after_ms"`
	TakenOutBy      string  `json:"taken_out_by"`
	FailedCalls     int64   `json:"failed_calls"` // calls to it that were cut off or refused
	// WindowMS: once this long has passed since the kill, every user's
	// mutations must be served by the other instances.
	WindowMS float64 `json:"window_ms"`
	Users    int     `json:"users"` // users sent a mutation after the kill
	// LastFailureMS: the last mutation sent after the kill that failed for
	// want of an instance was sent this long after it (-1: none failed).
	LastFailureMS float64  `json:"last_failure_ms"`
	ServedLater   int      `json:"served_later"` // mutations sent after the window and served
	Late          []string `json:"late,omitempty"`
}

// Percentiles of a latency distribution, in milliseconds.
type Percentiles struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
}

// Second is one second of a run.
type Second struct {
	T      float64 `json:"t"`      // seconds since the measured run began
	OK     int64   `json:"ok"`     // acknowledged in this second
	Errors int64   `json:"errors"` // answered with an error in this second
	P50    float64 `json:"p50_ms"`
	P99    float64 `json:"p99_ms"`
}

// Bucket counts the requests whose latency was at most UpperMS (and more
// than the previous bucket's).
type Bucket struct {
	UpperMS float64 `json:"upper_ms"`
	Count   int64   `json:"count"`
}

// Invariants are the checks after the run. Any violation fails the run.
type Invariants struct {
	Checked    []string `json:"checked"`    // what was checked, in words
	Violations []string `json:"violations"` // each one found
	Users      int64    `json:"users"`
	Entries    int64    `json:"entries"`
	Acked      int64    `json:"acknowledged_requests"`
	Unacked    int64    `json:"unacknowledged_requests"` // errors and timeouts: applied at most once
	Granted    string   `json:"granted"`
	Spent      string   `json:"spent"`
	Refunded   string   `json:"refunded"`
	Expired    string   `json:"expired"`
	Balances   string   `json:"sum_of_balances"`
	Pending    string   `json:"sum_of_pending,omitempty"` // points granted, not yet spendable: in no balance
	// Holds: how many holds ended in each state (checkout).
	Holds map[ledger.HoldState]int64 `json:"holds,omitempty"`
	// Returns: what the entries hold of pending grants and their
	// reversals (returns).
	Returns Returns `json:"returns"`
}

// Returns counts pending grants, their maturations, and reversals by what
// they took back: pending points, matured ones (a reversal may take both).
type Returns struct {
	PendingGrants int64 `json:"pending_grants"`
	Maturations   int64 `json:"maturations"`
	OfPending     int64 `json:"reversals_of_pending"`
	OfMatured     int64 `json:"reversals_of_matured"`
}

// CountHolds counts holds by their state.
func (i *Invariants) CountHolds(holds []ledger.Hold) {
	if i.Holds == nil && len(holds) > 0 {
		i.Holds = map[ledger.HoldState]int64{}
	}
	for _, h := range holds {
		i.Holds[h.State]++
	}
}

// Add merges the checks after one ledgerd run into i.
func (i *Invariants) Add(run string, o Invariants) {
	for _, c := range o.Checked {
		if !slices.Contains(i.Checked, c) {
			i.Checked = append(i.Checked, c)
		}
	}
	for _, v := range o.Violations {
		i.Violations = append(i.Violations, run+": "+v)
	}
	if i.Holds == nil && len(o.Holds) > 0 {
		i.Holds = map[ledger.HoldState]int64{}
	}
	for state, n := range o.Holds {
		i.Holds[state] += n
	}
	i.Users += o.Users
	i.Entries += o.Entries
	i.Acked += o.Acked
	i.Unacked += o.Unacked
	sum := func(a, b string) string {
		x, _ := decimal.NewFromString(a)
		y, _ := decimal.NewFromString(b)
		return x.Add(y).String()
	}
	i.Granted, i.Spent, i.Refunded, i.Expired, i.Balances = sum(i.Granted, o.Granted), sum(i.Spent, o.Spent), sum(i.Refunded, o.Refunded), sum(i.Expired, o.Expired), sum(i.Balances, o.Balances)
	i.Pending = sum(i.Pending, o.Pending)
	i.Returns.PendingGrants += o.Returns.PendingGrants
	i.Returns.Maturations += o.Returns.Maturations
	i.Returns.OfPending += o.Returns.OfPending
	i.Returns.OfMatured += o.Returns.OfMatured
}

// AddFailover checks what followed a kill: once the health-check window
// had passed, the other instances served every user's mutations.
func (i *Invariants) AddFailover(k Kill) {
	i.Checked = append(i.Checked, "after -kill-one: every mutation sent once the health-check window had passed since the kill was served by the other instances (not failed for want of an instance: refused or broken connections, unavailable)")
	i.Violations = append(i.Violations, k.Late...)
	if k.ServedLater == 0 {
		i.Violations = append(i.Violations, fmt.Sprintf("after the kill of %s: no mutation sent after the health-check window (%.0f ms) was served", k.Instance, k.WindowMS))
	}
}

// OK says whether every invariant held.
func (i Invariants) OK() bool { return len(i.Violations) == 0 }

// EveryRunWrote says whether each of ledgerd's runs had a mutation
// acknowledged: a run that wrote nothing proved nothing, whatever its reads
// and its checks say.
func EveryRunWrote(runs []Run) bool {
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

// WriteFiles writes the report as JSON and HTML into the folder out, named
// by its date and scenario, and says where.
func (r *Report) WriteFiles(out, scenario string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	base := filepath.Join(out, r.Date.Format("20060102-150405")+"-"+scenario)
	if err := r.writeJSON(base + ".json"); err != nil {
		return err
	}
	if err := r.writeHTMLFile(base + ".html"); err != nil {
		return err
	}
	fmt.Printf("\nreport: %s.json, %s.html\n", base, base)
	return nil
}

func (r *Report) writeJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func (r *Report) writeHTMLFile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := writeHTML(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// PrintSummary writes the summary table.
func (r *Report) PrintSummary(w io.Writer) {
	fmt.Fprintf(w, "\n%s  %s\n", r.Date.UTC().Format("2006-01-02 15:04 MST"), r.Machine)
	fmt.Fprintf(w, "%s\n\n", r.Command)
	fmt.Fprintf(w, "%-24s %-6s %6s %9s %9s %9s %9s %9s %9s %9s  %s\n",
		"run", "mode", "load", "ok/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms", "p99/p50", "outcomes")
	for _, run := range r.Runs {
		load := fmt.Sprint(run.Concurrency)
		if run.Mode == "open" {
			load = fmt.Sprintf("%.0f/s", run.Rate)
		}
		ratio := 0.0
		if run.Latency.P50 > 0 {
			ratio = run.Latency.P99 / run.Latency.P50
		}
		fmt.Fprintf(w, "%-24s %-6s %6s %9.0f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f  %s\n",
			run.Name, run.Mode, load, run.Throughput, run.Latency.P50, run.Latency.P90, run.Latency.P99,
			run.Latency.P999, run.Latency.Max, ratio, codeList(run.Codes))
	}
	for _, run := range r.Runs {
		if len(run.ByOp) > 1 {
			fmt.Fprintf(w, "\n%s by operation (%.0f steps/s):\n", run.Name, run.Steps)
			for _, op := range sortedKeys(run.ByOp) {
				p := run.ByOp[op]
				fmt.Fprintf(w, "  %-10s %8d requests  p50 %7.1f  p99 %7.1f  max %7.1f ms  %s\n", op, p.Count, p.P50, p.P99, p.Max, codeList(run.CodesByOp[op]))
			}
		}
		if run.ItemWritesPerPurchase > 0 {
			fmt.Fprintf(w, "%s: %.2f ledger item writes per acknowledged purchase (%d transactions, %d cancelled for conflict)\n",
				run.Name, run.ItemWritesPerPurchase, run.Transactions, run.Conflicts)
		} else if run.ItemWritesPerMutation > 0 {
			fmt.Fprintf(w, "%s: %.2f ledger item writes per acknowledged mutation (%d transactions, %d cancelled for conflict)\n",
				run.Name, run.ItemWritesPerMutation, run.Transactions, run.Conflicts)
		}
		if run.LedgerdCPU != nil {
			fmt.Fprintf(w, "%s: %s\n", run.Name, run.LedgerdCPU.Summary())
		}
		if run.WriteUnitsPerPurchase > 0 {
			fmt.Fprintf(w, "%s: %.2f ledger write units per acknowledged purchase, by DynamoDB's rules\n", run.Name, run.WriteUnitsPerPurchase)
		}
		if run.Throttles != nil || r.Options.PartitionScale > 0 {
			fmt.Fprintf(w, "%s: throttled by the partition limits (requests, by table and key kind): %s\n", run.Name, ThrottleList(run.Throttles))
		}
		for _, n := range run.Notes {
			fmt.Fprintf(w, "%s: %s\n", run.Name, n)
		}
		if run.Webhooks != nil {
			fmt.Fprintf(w, "%s: %s\n", run.Name, run.Webhooks.Summary())
		}
		if run.Fleet != nil && (run.Fleet.Instances > 1 || r.Options.Compare) {
			printFleet(w, run.Name, run.Fleet)
		}
		if run.Campaign != nil {
			printCampaign(w, run.Name, run.Campaign)
		}
		if run.Kinds != nil {
			printKinds(w, run.Name, run.Kinds)
		}
	}
	printCampaignRatios(w, r.Runs)
	for _, c := range r.Comparisons() {
		fmt.Fprintf(w, "%s / %s: %.2f x purchases/s\n", c.Run, c.Baseline, c.Ratio)
	}
	inv := r.Invariants
	fmt.Fprintf(w, "\ninvariants: %d users, %d entries, %d acknowledged and %d unacknowledged requests\n",
		inv.Users, inv.Entries, inv.Acked, inv.Unacked)
	fmt.Fprintf(w, "  granted %s - spent %s + refunded %s - expired %s = sum of balances %s\n", inv.Granted, inv.Spent, inv.Refunded, inv.Expired, inv.Balances)
	if ret := inv.Returns; ret.PendingGrants > 0 {
		fmt.Fprintf(w, "  returns: %d pending grants, %d maturations, reversals of pending points %d, of matured points %d; pending now %s\n",
			ret.PendingGrants, ret.Maturations, ret.OfPending, ret.OfMatured, inv.Pending)
	}
	if len(inv.Holds) > 0 {
		fmt.Fprintf(w, "  holds: %d captured, %d voided, %d expired, %d held\n",
			inv.Holds[ledger.HoldCaptured], inv.Holds[ledger.HoldVoided], inv.Holds[ledger.HoldExpired], inv.Holds[ledger.HoldHeld])
	}
	for _, c := range inv.Checked {
		fmt.Fprintf(w, "  checked: %s\n", c)
	}
	if inv.OK() {
		fmt.Fprintf(w, "  0 violations\n")
	}
	for i, v := range inv.Violations {
		if i == 20 {
			fmt.Fprintf(w, "  ... and %d more violations (all in the JSON report)\n", len(inv.Violations)-i)
			break
		}
		fmt.Fprintf(w, "  VIOLATION %s\n", v)
	}
}

// printFleet writes a run's figures per instance and in total.
func printFleet(w io.Writer, run string, f *Fleet) {
	mode := "round robin"
	if f.Affinity {
		mode += ", with affinity"
	}
	fmt.Fprintf(w, "%s: %d instances, %s; write path from each one's /metrics:\n", run, f.Instances, mode)
	fmt.Fprintf(w, "  %-10s %8s %8s %11s %10s %8s %6s %9s %5s  %s\n", "instance", "calls", "ok", "purchases/s", "committed", "groups", "mean", "conflicts", "CPUs", "retries; group sizes; outcomes")
	for _, in := range append(slices.Clone(f.PerInstance), f.Total) {
		fmt.Fprintf(w, "  %-10s %8d %8d %11.0f %10d %8d %6.1f %9d %5.2f  retries: %s; groups: %s; %s\n", in.Name, in.Calls, in.OK, in.Purchases,
			in.Committed, in.Groups, in.MeanGroup, in.Conflicts, in.CPU, orNone(codeList(in.Retries)), orNone(groupList(in.GroupSizes)), codeList(in.Codes))
		if f.Affinity {
			fmt.Fprintf(w, "  %-10s forwarded to the owner %d, no answer from it %d (%s), committed here instead %d\n", "",
				in.Forwarded, sum(in.ForwardFailures), orNone(codeList(in.ForwardFailures)), in.FellBack)
		}
		if in.Note != "" {
			fmt.Fprintf(w, "  %-10s (%s)\n", "", in.Note)
		}
	}
	if k := f.Kill; k != nil {
		out := "never"
		if k.TakenOutAfterMS >= 0 {
			out = fmt.Sprintf("%.0f ms after it, by %s", k.TakenOutAfterMS, k.TakenOutBy)
		}
		last := "none"
		if k.LastFailureMS >= 0 {
			last = fmt.Sprintf("the last sent %.0f ms after the kill", k.LastFailureMS)
		}
		fmt.Fprintf(w, "  SIGKILL of %s %.1f s into the measurement: taken out of the balancer %s; %d calls to it cut off or refused; mutations failed for want of an instance: %s (window %.0f ms); %d mutations sent after the window served, over %d users\n",
			k.Instance, k.AtS, out, k.FailedCalls, last, k.WindowMS, k.ServedLater, k.Users)
	}
}

// groupList is "size=n ..." from the smallest groups to the largest.
func groupList(sizes map[string]int64) string {
	keys := sortedKeys(sizes)
	lower := func(k string) int {
		n, _ := strconv.Atoi(strings.TrimRight(strings.SplitN(k, "-", 2)[0], "+"))
		return n
	}
	slices.SortFunc(keys, func(a, b string) int { return lower(a) - lower(b) })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s:%d", k, sizes[k])
	}
	return strings.Join(parts, " ")
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func codeList(codes map[string]int64) string {
	var out []string
	for _, c := range sortedKeys(codes) {
		out = append(out, fmt.Sprintf("%s=%d", c, codes[c]))
	}
	return strings.Join(out, " ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Comparison is a run's purchases/s over another's, in the same
// invocation: ledgerd's over a baseline's, or with -compare, several
// instances' over one's.
type Comparison struct {
	Run      string  `json:"run"`
	Baseline string  `json:"baseline"`
	Ratio    float64 `json:"ratio"`
}

// Comparisons compares ledgerd's first closed loop with each baseline, and
// each later closed loop of ledgerd (other instances, or other deliveries)
// with the first.
func (r Report) Comparisons() []Comparison {
	i := slices.IndexFunc(r.Runs, func(run Run) bool { return strings.HasPrefix(run.Name, "ledgerd") && run.Mode == "closed" })
	if i < 0 || r.Runs[i].Purchases <= 0 {
		return nil
	}
	ref := r.Runs[i]
	var out []Comparison
	for _, b := range r.Runs {
		if strings.HasPrefix(b.Name, "baseline") && b.Purchases > 0 {
			out = append(out, Comparison{Run: ref.Name, Baseline: b.Name, Ratio: ref.Purchases / b.Purchases})
		}
	}
	for _, run := range r.Runs[i+1:] {
		if strings.HasPrefix(run.Name, "ledgerd") && run.Mode == "closed" {
			out = append(out, Comparison{Run: run.Name, Baseline: ref.Name, Ratio: run.Purchases / ref.Purchases})
		}
	}
	return out
}

// ThrottleList writes throttles by table and key kind as "ledger ACCT=12,
// history ACCT=3", or "none".
func ThrottleList(throttles map[string]map[string]int64) string {
	var out []string
	for _, table := range sortedKeys(throttles) {
		out = append(out, table+" "+codeList(throttles[table]))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}
