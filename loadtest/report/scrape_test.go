package report

import (
	"maps"
	"strings"
	"testing"
)

// What ledgerd's /metrics say of its write path (package metrics), at the
// start of a measurement and at its end.
const metricsBefore = `# TYPE pointledger_group_commit_size histogram
pointledger_group_commit_size_bucket{le="1"} 10
pointledger_group_commit_size_bucket{le="2"} 12
pointledger_group_commit_size_bucket{le="4"} 12
pointledger_group_commit_size_bucket{le="8"} 12
pointledger_group_commit_size_bucket{le="16"} 12
pointledger_group_commit_size_bucket{le="32"} 12
pointledger_group_commit_size_bucket{le="48"} 12
pointledger_group_commit_size_bucket{le="+Inf"} 12
pointledger_group_commit_size_sum 14
pointledger_group_commit_size_count 12
# TYPE pointledger_transaction_conflicts_total counter
pointledger_transaction_conflicts_total 1
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 2.5
# TYPE pointledger_write_retries_total counter
pointledger_write_retries_total{reason="transaction_conflict"} 1
`

const metricsAfter = `# TYPE pointledger_group_commit_size histogram
pointledger_group_commit_size_bucket{le="1"} 11
pointledger_group_commit_size_bucket{le="2"} 13
pointledger_group_commit_size_bucket{le="4"} 15
pointledger_group_commit_size_bucket{le="8"} 15
pointledger_group_commit_size_bucket{le="16"} 15
pointledger_group_commit_size_bucket{le="32"} 15
pointledger_group_commit_size_bucket{le="48"} 17
pointledger_group_commit_size_bucket{le="+Inf"} 17
pointledger_group_commit_size_sum 119
pointledger_group_commit_size_count 17
# TYPE pointledger_transaction_conflicts_total counter
pointledger_transaction_conflicts_total 4
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.5
# TYPE pointledger_write_retries_total counter
pointledger_write_retries_total{reason="transaction_conflict"} 4
pointledger_write_retries_total{reason="version_moved"} 2
# TYPE pointledger_requests_total counter
pointledger_requests_total{code="ok",procedure="/pointledger.v1.LedgerService/Purchase"} 100
# TYPE pointledger_forwarded_total counter
pointledger_forwarded_total{procedure="/pointledger.v1.LedgerService/Purchase"} 7
pointledger_forwarded_total{procedure="/pointledger.v1.LedgerService/Grant"} 1
# TYPE pointledger_forward_failures_total counter
pointledger_forward_failures_total{reason="unreachable"} 2
# TYPE pointledger_forward_fallbacks_total counter
pointledger_forward_fallbacks_total{procedure="/pointledger.v1.LedgerService/Purchase"} 2
`

func TestAWritePathIsWhatItsMetricsCountedMeanwhile(t *testing.T) {
	t.Parallel()
	before, err := parseWritePath(strings.NewReader(metricsBefore))
	if err != nil {
		t.Fatal(err)
	}
	after, err := parseWritePath(strings.NewReader(metricsAfter))
	if err != nil {
		t.Fatal(err)
	}
	d := after.Minus(before)
	fig := NewInstanceFigures("ledgerd-1", CallCounts{Calls: 120, OK: 105, Purchases: 100, Codes: map[string]int64{"ok": 105, "aborted": 15}}, d, 10)
	if fig.Groups != 5 || fig.Committed != 105 || fig.MeanGroup != 21 || fig.Conflicts != 3 || fig.Purchases != 10 {
		t.Errorf("figures = %+v, want 5 groups of 105 mutations (21 each), 3 conflicts, 10 purchases/s", fig)
	}
	if want := map[string]int64{"1": 1, "3-4": 2, "33-48": 2}; !maps.Equal(fig.GroupSizes, want) {
		t.Errorf("group sizes = %v, want %v", fig.GroupSizes, want)
	}
	if want := map[string]int64{"transaction_conflict": 3, "version_moved": 2}; !maps.Equal(fig.Retries, want) {
		t.Errorf("retries = %v, want %v", fig.Retries, want)
	}
	if fig.CPU != 1 {
		t.Errorf("CPU = %v, want 10 s over 10 s: 1", fig.CPU)
	}
	if fig.Forwarded != 8 || fig.FellBack != 2 || !maps.Equal(fig.ForwardFailures, map[string]int64{"unreachable": 2}) {
		t.Errorf("forwarding = %d forwarded, %v failed, %d fell back; want 8, unreachable=2, 2", fig.Forwarded, fig.ForwardFailures, fig.FellBack)
	}
	if got := groupList(fig.GroupSizes); got != "1:1 3-4:2 33-48:2" {
		t.Errorf("groupList = %q", got)
	}
	total := d.Plus(d)
	if total.groups != 10 || total.committed != 210 || total.retries["version_moved"] != 4 || total.sizes[48] != 10 {
		t.Errorf("the sum of two = %+v", total)
	}
	none, err := parseWritePath(strings.NewReader(""))
	if err != nil || none.groups != 0 || len(none.groupSizes()) != 0 {
		t.Errorf("no metrics: %+v, %v", none, err)
	}
}
