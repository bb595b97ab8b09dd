package report

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/ledger"
)

func TestWriteHTML(t *testing.T) {
	t.Parallel()
	r := &Report{
		Date:    time.Date(2025, 11, 22, 11, 0, 0, 0, time.UTC),
		Command: `loadtest -scenario purchase -html "out.html"`,
		Target:  "http://localhost:8080",
		Machine: "8 CPUs, go1.26",
		Options: Options{Scenario: "purchase", Concurrency: 64, DurationS: 30, Users: 1000},
		Runs: []Run{
			{Name: "baseline-direct", Mode: "closed", Concurrency: 64, DurationS: 3, Purchases: 800}, // ran first
			{
				Name: "ledgerd", Mode: "closed", Concurrency: 64, DurationS: 3,
				Requests: 3003, OK: 3000, Throughput: 1000, Purchases: 1000,
				Codes:   map[string]int64{"ok": 3000, "unavailable": 3},
				Latency: Percentiles{Count: 3003, P50: 2, P90: 4, P99: 9, P999: 20, Max: 31},
				ByOp: map[string]Percentiles{
					"purchase": {Count: 2000, P50: 2, P99: 9},
					"grant":    {Count: 1003, P50: 1, P99: 5},
				},
				CodesByOp: map[string]map[string]int64{"purchase": {"ok": 1997, "unavailable": 3}, "grant": {"ok": 1003}},
				Timeline: []Second{
					{T: 0, OK: 990, Errors: 3, P50: 2, P99: 9},
					{T: 1, OK: 1010, P50: 2.1, P99: math.NaN()},
					{T: 2, OK: 1000, P50: 1.9, P99: 8},
				},
				Histogram: []Bucket{{UpperMS: 1, Count: 100}, {UpperMS: 2, Count: 2000}, {UpperMS: 4.5, Count: 880}, {UpperMS: math.Inf(1), Count: 23}},
				Notes:     []string{"the batcher merged 12 purchases per transaction"},
				Webhooks: &Webhooks{Events: 3000, Users: 40, EventsPerS: 998.6, Lag: Percentiles{P50: 12.34, P99: 456.7, Max: 900},
					Duplicates: 2, Gaps: 1, Missing: 1},
			},
			{Name: "baseline-<b>naive</b>", Mode: "open", Rate: 500},
		},
		Invariants: Invariants{
			Checked:    []string{"every acknowledged purchase is in the ledger"},
			Violations: []string{"user u-17: balance -5 is negative"},
			Granted:    "100", Spent: "60", Refunded: "5", Balances: "45",
			Holds: map[ledger.HoldState]int64{ledger.HoldCaptured: 7, ledger.HoldExpired: 2},
		},
	}
	page := renderHTML(t, r)

	if !strings.HasPrefix(page, "<!DOCTYPE html>") {
		t.Errorf("page starts with %.40q, want <!DOCTYPE html>", page)
	}
	for _, want := range []string{
		"<svg",
		"ledgerd",
		"baseline-&lt;b&gt;naive&lt;/b&gt;",
		"no data",                             // the empty run's charts
		"user u-17: balance -5 is negative",   // the violation
		"granted 100 − spent 60 + refunded 5", // the conservation line
		"grant", "purchase",                   // the by-operation table
		"ok=1997 unavailable=3", // its outcomes
		"holds by how they ended: 7 CAPTURED 2 EXPIRED",
		"the batcher merged 12 purchases per transaction",
		"webhooks: 3000 events (0 notices) for 40 users, 999/s; delivery lag p50 12.3 ms, p99 456.7 ms, max 900.0 ms; 2 duplicates, 1 gaps (1 versions missing)",
		"ledgerd / baseline-direct: 1.25 × purchases/s", // whichever ran first
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page does not contain %q", want)
		}
	}
	if strings.Contains(page, "<b>naive") {
		t.Error("run name is not escaped")
	}
	if strings.Contains(page, "0 violations") {
		t.Error("page says 0 violations, want the violation")
	}
	assertSelfContained(t, page)
	assertSVGWellFormed(t, page)
}

func TestWriteHTMLEmpty(t *testing.T) {
	t.Parallel()
	for _, r := range []*Report{nil, {}} {
		page := renderHTML(t, r)
		if !strings.HasPrefix(page, "<!DOCTYPE html>") || !strings.Contains(page, "0 violations") {
			t.Errorf("empty report renders as %q", page)
		}
		assertSelfContained(t, page)
	}
}

func TestLineChartDegenerate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		xs     []float64
		ys     []float64
		noData bool
	}{
		{name: "empty", noData: true},
		{name: "no finite x", xs: []float64{math.NaN(), math.Inf(1)}, ys: []float64{1, 2}, noData: true},
		{name: "one point", xs: []float64{0}, ys: []float64{5}},
		{name: "all zero", xs: []float64{0, 1, 2}, ys: []float64{0, 0, 0}},
		{name: "not finite y", xs: []float64{0, 1, 2}, ys: []float64{math.NaN(), math.Inf(1), math.Inf(-1)}},
		{name: "short series", xs: []float64{0, 1, 2}, ys: []float64{3}},
		{name: "huge", xs: []float64{0, 1}, ys: []float64{math.MaxFloat64, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := string(lineChart("t", tt.xs, []chartSeries{{"s", "#000", tt.ys}}, "ms"))
			if noData := strings.Contains(got, "no data"); noData != tt.noData {
				t.Fatalf("no data = %v, want %v: %s", noData, tt.noData, got)
			}
			if strings.Contains(got, "NaN") || strings.Contains(got, "Inf") {
				t.Errorf("chart contains NaN or Inf: %s", got)
			}
			assertSVGWellFormed(t, got)
		})
	}
}

func TestTickLabel(t *testing.T) {
	t.Parallel()
	for v, want := range map[float64]string{
		0: "0", 0.123456: "0.123", 1.5: "1.5", 12.34: "12.3", 250: "250", 12345: "12345", 1683.41: "1683", 2.5e7: "2.5e+07",
		math.Inf(1): "∞", math.NaN(): "–",
	} {
		if got := tickLabel(v); got != want {
			t.Errorf("tickLabel(%v) = %q, want %q", v, got, want)
		}
	}
}

func renderHTML(tb testing.TB, r *Report) string {
	tb.Helper()
	var buf bytes.Buffer
	if err := writeHTML(&buf, r); err != nil {
		tb.Fatalf("writeHTML: %v", err)
	}
	return buf.String()
}

var externalRef = regexp.MustCompile(`(?i)\b(src|href)\s*=\s*["']?\s*(https?:)?//|<script|<link|@import|url\(`)

func assertSelfContained(tb testing.TB, page string) {
	tb.Helper()
	if m := externalRef.FindString(page); m != "" {
		tb.Errorf("page is not self-contained: it has %q", m)
	}
}

// assertSVGWellFormed parses every <svg> element of page as XML.
func assertSVGWellFormed(tb testing.TB, page string) {
	tb.Helper()
	for rest := page; ; {
		start := strings.Index(rest, "<svg")
		if start < 0 {
			return
		}
		end := strings.Index(rest[start:], "</svg>")
		if end < 0 {
			tb.Fatalf("unterminated <svg> in %s", rest[start:])
		}
		svg := rest[start : start+end+len("</svg>")]
		d := xml.NewDecoder(strings.NewReader(svg))
		for {
			_, err := d.Token()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				tb.Fatalf("svg is not well-formed: %v\n%s", err, svg)
			}
		}
		rest = rest[start+end:]
	}
}

// A campaign's page shows what the text report says of it: each run's
// grants a second, the ratio to the one item, the overspend, when the
// first BUDGET_EXHAUSTED came against what had been granted, and the
// throttles.
func TestWriteHTMLCampaign(t *testing.T) {
	t.Parallel()
	r := &Report{
		Options: Options{Scenario: "campaign", PartitionScale: 0.1},
		Runs: []Run{
			{Name: "campaign-1-shard", Throttles: map[string]map[string]int64{"ledger": {"BUDGET": 1797}},
				Campaign: &Campaign{BudgetID: "campaign", Shards: 1, Grants: 800, GrantAmount: "10", GrantsSent: 3866, GrantsAcked: 297,
					GrantsPerS: 9.9, Refusals: map[string]int64{"THROTTLED": 74}, Total: "8000", Granted: "2970", Remaining: "5030"}},
			{Name: "campaign-32-shards",
				Campaign: &Campaign{BudgetID: "campaign-32", Shards: 32, Grants: 250, GrantAmount: "10", GrantsSent: 3180, GrantsAcked: 250,
					GrantsPerS: 21.78, Exhausted: true, FirstExhaustedS: 24.5, AckedBeforeFirstExhausted: 239, SentBeforeFirstExhausted: 301,
					Total: "2500", Granted: "2510", Remaining: "-10"}},
		},
	}
	page := renderHTML(t, r)
	for _, want := range []string{
		"campaign-32-shards / campaign-1-shard: <b>2.20 × grants/s</b> (32 shards against 1)",
		"budget campaign on 1 shard(s), 800 grants of 10: 3866 sent, 297 acknowledged, 9.9 grants/s; granted 2970, remaining 5030 of 8000, overspent <span class=\"good\">0</span>",
		"overspent <span class=\"bad\">10</span>",
		"the budget was not exhausted within the measurement; grants refused or failed: THROTTLED=74",
		"first BUDGET_EXHAUSTED 24.5 s into the measurement, after 239 grants acknowledged (95.6% of the budget's 250), 301 sent",
		"<td>24.5 s</td><td>239 of 250 (95.6%)</td>",
		"<td>none came</td>",
		"<td class=\"text\">ledger BUDGET=1797</td>",
		"<td class=\"text\">none</td>", // the sharded run: none throttled
		"<td>2.20 ×</td>",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page does not contain %q", want)
		}
	}
	assertSelfContained(t, page)
	assertSVGWellFormed(t, page)

	// A run of no campaign has no campaign table.
	if page := renderHTML(t, &Report{Runs: []Run{{Name: "ledgerd"}}}); strings.Contains(page, "grants/s") {
		t.Error("a page without a campaign shows grants/s")
	}
}
