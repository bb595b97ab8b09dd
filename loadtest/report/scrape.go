package report

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// WritePath is what one instance's /metrics say of its write path (package
// metrics), counted from its start; a run's figures are the difference
// over its measurement.
type WritePath struct {
	groups    float64             // ledger transactions committed (pointledger_group_commit_size's count)
	committed float64             // mutations in them, as entries or recorded refusals (its sum)
	sizes     map[float64]float64 // groups of at most le mutations (its cumulative buckets)
	conflicts float64             // pointledger_transaction_conflicts_total
	retries   map[string]float64  // pointledger_write_retries_total, by reason

	// Affinity: mutations sent to their user's owner and answered there
	// (pointledger_forwarded_total), those the owner gave no answer to, by
	// reason (pointledger_forward_failures_total), and those committed here
	// then (pointledger_forward_fallbacks_total).
	forwarded     float64
	forwardFailed map[string]float64
	fellBack      float64

	cpu float64 // CPU seconds the process used (process_cpu_seconds_total)
}

// Scrape reads the write path's metrics from an operations listener.
func Scrape(ctx context.Context, c *http.Client, opsURL string) (WritePath, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, opsURL+"/metrics", nil)
	if err != nil {
		return WritePath{}, err
	}
	res, err := c.Do(req)
	if err != nil {
		return WritePath{}, fmt.Errorf("GET %s/metrics: %w", opsURL, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return WritePath{}, fmt.Errorf("GET %s/metrics: %s", opsURL, res.Status)
	}
	return parseWritePath(res.Body)
}

func parseWritePath(r io.Reader) (WritePath, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return WritePath{}, fmt.Errorf("parse /metrics: %w", err)
	}
	w := WritePath{sizes: map[float64]float64{}, retries: map[string]float64{}, forwardFailed: map[string]float64{}}
	if f := families["pointledger_group_commit_size"]; f != nil {
		for _, m := range f.Metric {
			h := m.GetHistogram()
			w.groups += float64(h.GetSampleCount())
			w.committed += h.GetSampleSum()
			for _, b := range h.Bucket {
				w.sizes[b.GetUpperBound()] += float64(b.GetCumulativeCount())
			}
		}
	}
	w.conflicts = counterSum(families["pointledger_transaction_conflicts_total"])
	if f := families["pointledger_write_retries_total"]; f != nil {
		for _, m := range f.Metric {
			w.retries[label(m, "reason")] += m.GetCounter().GetValue()
		}
	}
	w.cpu = counterSum(families["process_cpu_seconds_total"])
	w.forwarded = counterSum(families["pointledger_forwarded_total"])
	w.fellBack = counterSum(families["pointledger_forward_fallbacks_total"])
	if f := families["pointledger_forward_failures_total"]; f != nil {
		for _, m := range f.Metric {
			w.forwardFailed[label(m, "reason")] += m.GetCounter().GetValue()
		}
	}
	return w, nil
}

// counterSum adds a counter family's values up, whatever their labels.
func counterSum(f *dto.MetricFamily) float64 {
	var n float64
	if f != nil {
		for _, m := range f.Metric {
			n += m.GetCounter().GetValue()
		}
	}
	return n
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// Committed is how many mutations the write path committed, as entries or
// recorded refusals.
func (w WritePath) Committed() float64 { return w.committed }

// Minus is what was counted after before.
func (w WritePath) Minus(before WritePath) WritePath {
	d := WritePath{groups: w.groups - before.groups, committed: w.committed - before.committed,
		conflicts: w.conflicts - before.conflicts, forwarded: w.forwarded - before.forwarded, fellBack: w.fellBack - before.fellBack, cpu: w.cpu - before.cpu,
		sizes: map[float64]float64{}, retries: minusEach(w.retries, before.retries), forwardFailed: minusEach(w.forwardFailed, before.forwardFailed)}
	for le, n := range w.sizes {
		d.sizes[le] = n - before.sizes[le]
	}
	return d
}

// minusEach is each of a's counts less b's, those that moved.
func minusEach[N int64 | float64](a, b map[string]N) map[string]N {
	d := map[string]N{}
	for k, n := range a {
		if n -= b[k]; n != 0 {
			d[k] = n
		}
	}
	return d
}

// plusEach is a's and b's counts added up, by key.
func plusEach[N int64 | float64](a, b map[string]N) map[string]N {
	s := map[string]N{}
	for _, x := range []map[string]N{a, b} {
		for k, n := range x {
			s[k] += n
		}
	}
	return s
}

// Plus adds two instances' figures up.
func (w WritePath) Plus(o WritePath) WritePath {
	s := WritePath{groups: w.groups + o.groups, committed: w.committed + o.committed, conflicts: w.conflicts + o.conflicts,
		forwarded: w.forwarded + o.forwarded, fellBack: w.fellBack + o.fellBack, cpu: w.cpu + o.cpu,
		sizes: map[float64]float64{}, retries: plusEach(w.retries, o.retries), forwardFailed: plusEach(w.forwardFailed, o.forwardFailed)}
	for _, x := range []WritePath{w, o} {
		for le, n := range x.sizes {
			s.sizes[le] += n
		}
	}
	return s
}

// groupSizes turns cumulative buckets into the number of groups of each
// size range: "1", "2", "3-4", ..., "33-48", and "49+" if any.
func (w WritePath) groupSizes() map[string]int64 {
	bounds := slices.Sorted(maps.Keys(w.sizes))
	out := map[string]int64{}
	lower, below := 1.0, 0.0
	for _, le := range bounds {
		n := w.sizes[le] - below
		below = w.sizes[le]
		name := strconv.FormatFloat(le, 'f', -1, 64)
		switch {
		case math.IsInf(le, 1):
			name = strconv.FormatFloat(lower, 'f', -1, 64) + "+"
		case le > lower:
			name = strconv.FormatFloat(lower, 'f', -1, 64) + "-" + name
		}
		if n > 0 {
			out[name] = int64(math.Round(n))
		}
		lower = math.Floor(le) + 1
	}
	return out
}

// CallCounts are what one instance was sent and answered, counted from
// the start; a run's are the difference over its measurement.
type CallCounts struct {
	Calls, OK, Purchases, Unreachable int64
	Codes                             map[string]int64
}

// Clone is a copy of c that shares nothing with it.
func (c CallCounts) Clone() CallCounts {
	c.Codes = maps.Clone(c.Codes)
	return c
}

// Minus is what was counted after before.
func (c CallCounts) Minus(before CallCounts) CallCounts {
	return CallCounts{Calls: c.Calls - before.Calls, OK: c.OK - before.OK, Purchases: c.Purchases - before.Purchases,
		Unreachable: c.Unreachable - before.Unreachable, Codes: minusEach(c.Codes, before.Codes)}
}

// Plus adds two instances' counts up.
func (c CallCounts) Plus(o CallCounts) CallCounts {
	return CallCounts{Calls: c.Calls + o.Calls, OK: c.OK + o.OK, Purchases: c.Purchases + o.Purchases,
		Unreachable: c.Unreachable + o.Unreachable, Codes: plusEach(c.Codes, o.Codes)}
}

// NewInstanceFigures are an instance's part of a run of durationS seconds
// (or the fleet's total): what it was sent and answered (n), and what its
// write path did (w).
func NewInstanceFigures(name string, n CallCounts, w WritePath, durationS float64) InstanceFigures {
	fig := InstanceFigures{Name: name, Calls: n.Calls, OK: n.OK, Codes: n.Codes,
		Committed: int64(w.committed), Groups: int64(w.groups), GroupSizes: w.groupSizes(), Conflicts: int64(w.conflicts),
		Retries: map[string]int64{}}
	if durationS > 0 {
		fig.Purchases = float64(n.Purchases) / durationS
		fig.CPU = w.cpu / durationS
	}
	if w.groups > 0 {
		fig.MeanGroup = w.committed / w.groups
	}
	for reason, k := range w.retries {
		fig.Retries[reason] = int64(k)
	}
	fig.Forwarded, fig.FellBack = int64(w.forwarded), int64(w.fellBack)
	if len(w.forwardFailed) > 0 {
		fig.ForwardFailures = map[string]int64{}
		for reason, k := range w.forwardFailed {
			fig.ForwardFailures[reason] = int64(k)
		}
	}
	return fig
}
