package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pointledger/pointledger/client"
)

// otherReason is the value of pointledger_refusals_total's reason for an
// error without a reason ledgerd knows (connect-go's own refusals, such as
// a body over the size limit), so that the label's values stay bounded.
const otherReason = "other"

// refusals counts failed RPCs by the reason of their ErrorInfo (issue 31:
// pointledger_requests_total says the code only, so BUDGET_EXHAUSTED was
// counted nowhere). Its values are client.Reasons() and otherReason, every
// one made at 0.
type refusals struct {
	counter *prometheus.CounterVec
	known   map[string]bool
}

func newRefusals() *refusals {
	r := &refusals{
		counter: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pointledger_refusals_total",
			Help: "RPCs answered with an error, by the reason of its ErrorInfo (INSUFFICIENT_BALANCE, BUDGET_EXHAUSTED, ...; other: none ledgerd knows).",
		}, []string{"reason"}),
		known: map[string]bool{},
	}
	for _, reason := range client.Reasons() {
		r.known[string(reason)] = true
		r.counter.WithLabelValues(string(reason))
	}
	r.counter.WithLabelValues(otherReason)
	return r
}

// observe counts err, a failed RPC's error.
func (r *refusals) observe(err error) {
	reason := string(client.ReasonOf(err))
	if !r.known[reason] {
		reason = otherReason
	}
	r.counter.WithLabelValues(reason).Inc()
}
