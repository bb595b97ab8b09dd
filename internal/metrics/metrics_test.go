package metrics

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/pointledger/pointledger/internal/affinity"
	"github.com/pointledger/pointledger/internal/dispatch"
	"github.com/pointledger/pointledger/internal/history"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
)

func TestRetriesByReasonAndConflicts(t *testing.T) {
	t.Parallel()
	m := New()
	m.Retried(dynamo.RetryTransactionConflict)
	m.Retried(dynamo.RetryTransactionConflict)
	m.Retried(dynamo.RetryVersionMoved)
	m.Retried(dynamo.RetryThrottled)
	for reason, want := range map[string]float64{
		dynamo.RetryTransactionConflict: 2,
		dynamo.RetryVersionMoved:        1,
		dynamo.RetryThrottled:           1,
		dynamo.RetryStaleCache:          0,
	} {
		if got := testutil.ToFloat64(m.retries.WithLabelValues(reason)); got != want {
			t.Errorf("retries{reason=%q} = %v, want %v", reason, got, want)
		}
	}
	if got := testutil.ToFloat64(m.conflicts); got != 2 {
		t.Errorf("conflicts = %v, want 2 (only TransactionConflict retries)", got)
	}
}

func TestOutcome(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err  error
		want string
	}{
		{nil, "ok"},
		{fmt.Errorf("operation error DynamoDB: TransactWriteItems: %w", &types.TransactionCanceledException{}), "TransactionCanceledException"},
		{&types.ResourceNotFoundException{}, "ResourceNotFoundException"},
		{fmt.Errorf("get item: %w", context.DeadlineExceeded), "canceled"},
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), "error"},
	} {
		if got := outcome(tt.err); got != tt.want {
			t.Errorf("outcome(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

func TestAffinity(t *testing.T) {
	t.Parallel()
	m := New()
	const purchase = "/pointledger.v1.LedgerService/Purchase"
	m.Forwarded(purchase)
	m.Forwarded(purchase)
	m.ForwardFailed(affinity.FailUnreachable)
	m.FellBack(purchase)
	live, down := 2, 1
	m.WatchPeers(func() (int, int) { return live, down })
	for name, c := range map[string]struct {
		got, want float64
	}{
		"forwarded":   {testutil.ToFloat64(m.forwarded.WithLabelValues(purchase)), 2},
		"unreachable": {testutil.ToFloat64(m.forwardFailures.WithLabelValues(affinity.FailUnreachable)), 1},
		"fallbacks":   {testutil.ToFloat64(m.fallbacks.WithLabelValues(purchase)), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", name, c.got, c.want)
		}
	}
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	peers := map[string]float64{}
	for _, f := range families {
		if f.GetName() == "pointledger_peers" {
			for _, s := range f.GetMetric() {
				peers[s.GetLabel()[0].GetValue()] = s.GetGauge().GetValue()
			}
		}
	}
	if peers["live"] != 2 || peers["down"] != 1 {
		t.Errorf("pointledger_peers = %v, want live 2 and down 1", peers)
	}
}

// documentedMetric is a row of the metrics table of docs/operations.md.
type documentedMetric struct {
	name, kind string
	labels     []string
	peersOnly  bool // "with -peers"
}

// documentedMetrics reads the metrics table of docs/operations.md: the
// rows whose first cell is a pointledger_ name.
func documentedMetrics(tb testing.TB) []documentedMetric {
	tb.Helper()
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		tb.Fatal(err)
	}
	var out []documentedMetric
	for line := range strings.Lines(string(b)) {
		cells := strings.Split(strings.TrimSpace(line), "|")
		if len(cells) != 6 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`pointledger_") {
			continue
		}
		m := documentedMetric{
			name:      strings.Trim(strings.TrimSpace(cells[1]), "`"),
			kind:      strings.TrimSpace(cells[2]),
			peersOnly: strings.HasPrefix(strings.TrimSpace(cells[4]), "with `-peers`"),
		}
		for l := range strings.SplitSeq(cells[3], ",") {
			if l = strings.Trim(strings.TrimSpace(l), "`"); l != "" {
				m.labels = append(m.labels, l)
			}
		}
		slices.Sort(m.labels)
		out = append(out, m)
	}
	if len(out) < 10 {
		tb.Fatalf("docs/operations.md lists %d pointledger_ metrics; is its table still there?", len(out))
	}
	return out
}

// A dashboard's query must find every documented metric, at 0, before its
// first event (issue 22, item 5): a counter vector with no series is absent
// from /metrics altogether.
func TestDocumentedMetricsStartAtZero(t *testing.T) {
	t.Parallel()
	const grant, balance = "/pointledger.v1.LedgerService/Grant", "/pointledger.v1.LedgerService/GetBalance"
	m := New(grant, balance)
	m.WatchProjector(func() history.ProjectorStatus { return history.ProjectorStatus{} })
	m.WatchPeers(func() (int, int) { return 1, 0 })
	// The queue depth is per endpoint: its series comes with the first.
	m.WatchDispatcher(func() dispatch.Status { return dispatch.Status{} }).QueueDepth("ep1", 0)
	m.WatchNotices()
	// The budgets' series are the budgets': one here.
	m.WatchBudgets(func(context.Context, int) ([]ledger.Budget, error) {
		return []ledger.Budget{{ID: "spring", Status: ledger.BudgetOpen}}, nil
	})
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	gathered := map[string]*dto.MetricFamily{}
	for _, f := range families {
		gathered[f.GetName()] = f
	}
	documented := map[string]bool{}
	for _, d := range documentedMetrics(t) {
		documented[d.name] = true
		f := gathered[d.name]
		if f == nil {
			t.Errorf("%s is documented but has no series in a new registry", d.name)
			continue
		}
		if got := strings.ToLower(f.GetType().String()); got != d.kind {
			t.Errorf("%s is a %s, documented as a %s", d.name, got, d.kind)
		}
		for _, s := range f.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetName())
			}
			slices.Sort(labels)
			if !slices.Equal(labels, d.labels) {
				t.Errorf("%s has labels %v, documented %v", d.name, labels, d.labels)
			}
			if f.GetType() == dto.MetricType_COUNTER && s.GetCounter().GetValue() != 0 {
				t.Errorf("%s%v = %v in a new registry, want 0", d.name, s.GetLabel(), s.GetCounter().GetValue())
			}
			if f.GetType() == dto.MetricType_HISTOGRAM && s.GetHistogram().GetSampleCount() != 0 {
				t.Errorf("%s%v has %d samples in a new registry, want 0", d.name, s.GetLabel(), s.GetHistogram().GetSampleCount())
			}
		}
	}
	for name := range gathered {
		if strings.HasPrefix(name, "pointledger_") && !documented[name] {
			t.Errorf("%s is served but not in docs/operations.md", name)
		}
	}
	// Every known label value has its series.
	for _, want := range []struct {
		metric prometheus.Collector
		name   string
	}{
		{m.requests.WithLabelValues(grant, "ok"), "requests{Grant,ok}"},
		{m.requests.WithLabelValues(balance, "unavailable"), "requests{GetBalance,unavailable}"},
		{m.forwarded.WithLabelValues(grant), "forwarded{Grant}"},
		{m.forwardFailures.WithLabelValues(affinity.FailTimeout), "forward_failures{timeout}"},
		{m.dynamoCalls.WithLabelValues("TransactWriteItems", "ok"), "dynamodb_calls{TransactWriteItems,ok}"},
	} {
		if got := testutil.ToFloat64(want.metric); got != 0 {
			t.Errorf("%s = %v, want 0", want.name, got)
		}
	}
	counts := map[string]int{}
	for _, name := range []string{"pointledger_requests_total", "pointledger_write_retries_total", "pointledger_forwarded_total",
		"pointledger_forward_fallbacks_total", "pointledger_forward_failures_total", "pointledger_dynamodb_calls_total"} {
		counts[name] = len(gathered[name].GetMetric())
	}
	want := map[string]int{
		"pointledger_requests_total":          2 * 17, // two procedures, ok and the 16 Connect codes
		"pointledger_write_retries_total":     4,      // transaction_conflict, version_moved, throttled, stale_cache
		"pointledger_forwarded_total":         1,      // Grant; GetBalance is not forwarded
		"pointledger_forward_fallbacks_total": 1,
		"pointledger_forward_failures_total":  3, // unreachable, timeout, refused
		"pointledger_dynamodb_calls_total":    len(dynamoDBOperations) * 3,
	}
	if !maps.Equal(counts, want) {
		t.Errorf("series at start = %v, want %v", counts, want)
	}
}

// Without procedures (`ledgerd project`), no request or forwarding series
// are made up.
func TestNoProceduresNoRequestSeries(t *testing.T) {
	t.Parallel()
	m := New()
	if n := testutil.CollectAndCount(m.requests); n != 0 {
		t.Errorf("requests series = %d, want 0", n)
	}
	if n := testutil.CollectAndCount(m.forwardFailures); n != 0 {
		t.Errorf("forward failure series = %d, want 0", n)
	}
	if n := testutil.CollectAndCount(m.retries); n != 4 {
		t.Errorf("retry series = %d, want the 4 reasons", n)
	}
}

// A sub-millisecond call must land in a bucket of its own, not in one with
// every call up to 5 ms (issue 22, item 5: 28 of 34 GetBalance calls did).
func TestLatencyBucketsResolveSubMillisecond(t *testing.T) {
	t.Parallel()
	const balance = "/pointledger.v1.LedgerService/GetBalance"
	m := New(balance)
	m.requestDuration.WithLabelValues(balance).Observe(0.0003) // 0.3 ms
	m.dynamoDuration.WithLabelValues("GetItem").Observe(0.0003)
	for name, h := range map[string]prometheus.Collector{
		"pointledger_request_duration_seconds":       m.requestDuration,
		"pointledger_dynamodb_call_duration_seconds": m.dynamoDuration,
	} {
		families := gather(t, h)
		var observed *dto.Histogram
		for _, s := range families.GetMetric() {
			if s.GetHistogram().GetSampleCount() == 1 {
				observed = s.GetHistogram()
			}
		}
		if observed == nil {
			t.Fatalf("%s: no series with the observation", name)
		}
		below := 0
		first := -1.0 // the least bound the 0.3 ms call is under
		for _, b := range observed.GetBucket() {
			if b.GetUpperBound() < 0.001 {
				below++
			}
			if first < 0 && b.GetCumulativeCount() == 1 {
				first = b.GetUpperBound()
			}
		}
		if below < 3 {
			t.Errorf("%s: %d bucket bounds under 1 ms, want at least 3", name, below)
		}
		if first > 0.0005 {
			t.Errorf("%s: a 0.3 ms call is first counted under %v s, want at most 0.5 ms", name, first)
		}
	}
}

// gather collects c's one family.
func gather(tb testing.TB, c prometheus.Collector) *dto.MetricFamily {
	tb.Helper()
	r := prometheus.NewPedanticRegistry()
	r.MustRegister(c)
	families, err := r.Gather()
	if err != nil || len(families) != 1 {
		tb.Fatalf("gather: %d families, %v", len(families), err)
	}
	return families[0]
}

// An RPC is counted under its procedure and code, and timed under its
// procedure, whether the procedure was known at New (its series looked up
// once) or not.
func TestRequestsByProcedureAndCode(t *testing.T) {
	t.Parallel()
	const purchase, other = "/pointledger.v1.LedgerService/Purchase", "/pointledger.v1.LedgerService/Other"
	m := New(purchase)
	start := time.Now()
	m.observeRequest(purchase, start, nil)
	m.observeRequest(purchase, start, nil)
	m.observeRequest(purchase, start, connect.NewError(connect.CodeFailedPrecondition, errors.New("short")))
	m.observeRequest(other, start, nil)
	for _, tt := range []struct {
		procedure, code string
		want            float64
	}{
		{purchase, "ok", 2},
		{purchase, "failed_precondition", 1},
		{purchase, "aborted", 0},
		{other, "ok", 1},
	} {
		if got := testutil.ToFloat64(m.requests.WithLabelValues(tt.procedure, tt.code)); got != tt.want {
			t.Errorf("requests of %s with %s = %v, want %v", tt.procedure, tt.code, got, tt.want)
		}
	}
	for procedure, want := range map[string]uint64{purchase: 3, other: 1} {
		var got uint64
		for _, s := range gather(t, m.requestDuration).GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetValue() == procedure {
					got = s.GetHistogram().GetSampleCount()
				}
			}
		}
		if got != want {
			t.Errorf("durations of %s = %d, want %d", procedure, got, want)
		}
	}
}

// A DynamoDB call is counted under its operation and outcome, and timed
// under its operation, whether the operation and outcome were known at New
// (their series looked up once) or not: an AWS error code, an operation
// ledgerd did not list.
func TestDynamoDBCallsByOperationAndOutcome(t *testing.T) {
	t.Parallel()
	m := New()
	canceled := &types.TransactionCanceledException{}
	m.DynamoDBCall("TransactWriteItems", time.Millisecond, nil)
	m.DynamoDBCall("TransactWriteItems", time.Millisecond, nil)
	m.DynamoDBCall("TransactWriteItems", time.Millisecond, canceled)
	m.DynamoDBCall("GetItem", time.Millisecond, context.Canceled)
	m.DynamoDBCall("BatchGetItem", time.Millisecond, nil)
	for _, tt := range []struct {
		operation, outcome string
		want               float64
	}{
		{"TransactWriteItems", "ok", 2},
		{"TransactWriteItems", "TransactionCanceledException", 1},
		{"TransactWriteItems", "error", 0},
		{"GetItem", "canceled", 1},
		{"GetItem", "ok", 0},
		{"BatchGetItem", "ok", 1},
	} {
		if got := testutil.ToFloat64(m.dynamoCalls.WithLabelValues(tt.operation, tt.outcome)); got != tt.want {
			t.Errorf("dynamodb calls of %s with %s = %v, want %v", tt.operation, tt.outcome, got, tt.want)
		}
	}
	for operation, want := range map[string]uint64{"TransactWriteItems": 3, "GetItem": 1, "BatchGetItem": 1, "Query": 0} {
		var got uint64
		for _, s := range gather(t, m.dynamoDuration).GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetValue() == operation {
					got = s.GetHistogram().GetSampleCount()
				}
			}
		}
		if got != want {
			t.Errorf("durations of %s = %d, want %d", operation, got, want)
		}
	}
}
