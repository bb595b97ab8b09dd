package report

import (
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Latencies are recorded in microseconds, from 1 µs to 10 minutes, with 3
// significant digits: the request latencies of a run and the delivery lag
// of its webhooks alike.
const (
	hdrMin    = 1
	hdrMax    = int64(10 * time.Minute / time.Microsecond)
	hdrDigits = 3
)

// NewLatencyHistogram is an empty histogram of latencies, for
// RecordLatency and LatencyPercentiles.
func NewLatencyHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(hdrMin, hdrMax, hdrDigits)
}

// RecordLatency records d in h, held within the histogram's range (a
// latency under 1 µs counts as 1 µs, one over 10 minutes as 10 minutes).
func RecordLatency(h *hdrhistogram.Histogram, d time.Duration) {
	_ = h.RecordValue(min(max(d.Microseconds(), hdrMin), hdrMax))
}

// LatencyPercentiles summarises a histogram of latencies in milliseconds
// (the zero Percentiles when it is empty).
func LatencyPercentiles(h *hdrhistogram.Histogram) Percentiles {
	if h.TotalCount() == 0 {
		return Percentiles{}
	}
	return Percentiles{Count: h.TotalCount(), Mean: h.Mean() / 1000,
		P50: msOf(h.ValueAtQuantile(50)), P90: msOf(h.ValueAtQuantile(90)), P99: msOf(h.ValueAtQuantile(99)),
		P999: msOf(h.ValueAtQuantile(99.9)), Max: msOf(h.Max())}
}

func msOf(us int64) float64 { return float64(us) / 1000 }
