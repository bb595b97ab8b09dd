package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pointledger/pointledger/internal/dispatch"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/notice"
)

// lagBuckets are the upper bounds, in seconds, of the delivery lag: from
// 10 ms (a receiver that keeps pace) to the three days an event is tried
// for (dispatch.DefaultSchedule).
var lagBuckets = []float64{
	.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600, 7200, 21600, 86400, 259200,
}

// attemptOutcomes are the values of pointledger_webhook_attempts_total's
// outcome, each from 0.
var attemptOutcomes = []dispatch.Outcome{
	dispatch.OutcomeSucceeded, dispatch.OutcomeFailed, dispatch.OutcomeGaveUp, dispatch.OutcomeGone,
}

// WatchDispatcher registers the metrics of the webhook dispatcher running
// in this process and returns the hooks that feed them (its Observer).
// The queue depth is per endpoint, so its series appear with an endpoint's
// first queue; the others start at 0.
func (m *Metrics) WatchDispatcher(status func() dispatch.Status) dispatch.Observer {
	events := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "pointledger_webhook_events_total",
		Help: "Events put on endpoints' queues for delivery (one per entry and endpoint that receives it).",
	})
	attempts := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pointledger_webhook_attempts_total",
		Help: "Delivery attempts, by outcome: succeeded (2xx), failed (tried again later), gave_up (the last attempt: FAILED), gone (410: endpoint disabled).",
	}, []string{"outcome"})
	lag := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "pointledger_webhook_delivery_lag_seconds",
		Help:    "From an entry's create_time (a notice's decision) to the 2xx of its event's first delivery; redeliveries are pointledger_webhook_redeliveries_total.",
		Buckets: lagBuckets,
	})
	depth := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "pointledger_webhook_queue_depth",
		Help: "Events waiting for an endpoint, as this dispatcher last read its queues (an estimate), by endpoint_id.",
	}, []string{"endpoint_id"})
	redelivered := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "pointledger_webhook_redeliveries_total",
		Help: "Events delivered again (2xx) because RedeliverWebhookEvents asked: apart from the delivery lag, which they would swell by their age.",
	})
	disabled := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "pointledger_webhook_endpoints_disabled_total",
		Help: "Endpoints this dispatcher disabled because they answered 410 Gone.",
	})
	for _, o := range attemptOutcomes {
		attempts.WithLabelValues(string(o))
	}
	m.registry.MustRegister(events, attempts, lag, redelivered, depth, disabled,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "pointledger_webhook_queues_in_flight",
			Help: "Users' queues this dispatcher is delivering now.",
		}, func() float64 { return float64(status().InFlight) }),
	)
	return dispatch.Observer{
		EventsDispatched: func(_ string, n int) { events.Add(float64(n)) },
		Attempted:        func(_ string, o dispatch.Outcome) { attempts.WithLabelValues(string(o)).Inc() },
		Delivered:        func(_ string, d time.Duration) { lag.Observe(d.Seconds()) },
		Redelivered:      func(string) { redelivered.Inc() },
		QueueDepth:       func(endpoint string, n int64) { depth.WithLabelValues(endpoint).Set(float64(n)) },
		EndpointDisabled: func(string) { disabled.Inc() },
	}
}

// WatchNotices registers the metrics of the notice finder running in this
// process and returns the hooks that feed them.
func (m *Metrics) WatchNotices() notice.Observer {
	decided := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pointledger_notices_total",
		Help: "Notices decided (each once, whichever finder decides it) and handed to the dispatcher, by event type.",
	}, []string{"type"})
	failed := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pointledger_notice_emits_failed_total",
		Help: "Notices the dispatcher did not take (a later pass hands them over again), by event type.",
	}, []string{"type"})
	decided.WithLabelValues(string(ledger.EventPointsExpiring))
	failed.WithLabelValues(string(ledger.EventPointsExpiring))
	m.registry.MustRegister(decided, failed)
	return notice.Observer{
		Decided:    func(t ledger.EventType) { decided.WithLabelValues(string(t)).Inc() },
		EmitFailed: func(t ledger.EventType) { failed.WithLabelValues(string(t)).Inc() },
	}
}
