package report

import (
	"testing"
	"time"
)

func TestLatencyPercentiles(t *testing.T) {
	t.Parallel()
	if got := LatencyPercentiles(NewLatencyHistogram()); got != (Percentiles{}) {
		t.Errorf("an empty histogram: %+v, want the zero Percentiles", got)
	}
	h := NewLatencyHistogram()
	for i := 1; i <= 100; i++ {
		RecordLatency(h, time.Duration(i)*time.Millisecond)
	}
	p := LatencyPercentiles(h)
	// 3 significant digits: within 0.1% of the value recorded.
	near := func(got, want float64) bool { return got >= want*0.999 && got <= want*1.001 }
	if p.Count != 100 || !near(p.P50, 50) || !near(p.P99, 99) || !near(p.Max, 100) || !near(p.Mean, 50.5) {
		t.Errorf("1 to 100 ms: %+v, want count 100, p50 50, p99 99, max 100, mean 50.5", p)
	}

	// Out of range, held to the range rather than lost.
	h = NewLatencyHistogram()
	RecordLatency(h, -time.Second) // a clock that stepped back
	RecordLatency(h, time.Hour)
	p = LatencyPercentiles(h)
	if p.Count != 2 || p.P50 != 0.001 || !near(p.Max, float64(10*time.Minute/time.Millisecond)) {
		t.Errorf("-1 s and 1 h: %+v, want count 2, the least 1 µs, the most 10 minutes", p)
	}
}
