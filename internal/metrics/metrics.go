// Package metrics measures ledgerd for Prometheus, in a registry of its own:
// the API's requests (by procedure and Connect code, and their latency), the
// write path (group sizes, retries, TransactionConflicts, through the
// dynamo.Observer hook), every DynamoDB call (by operation and outcome,
// through an AWS SDK middleware), the projection (lag, entries applied) and
// user affinity (calls forwarded to their user's owner, failures,
// fallbacks, peers live, through the affinity.Observer hook).
//
// Every name starts with pointledger_; the domain packages know nothing of
// Prometheus.
package metrics

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"connectrpc.com/connect"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pointledger/pointledger/internal/affinity"
	"github.com/pointledger/pointledger/internal/history"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
)

// Metrics are ledgerd's metrics and the registry that holds them.
type Metrics struct {
	registry *prometheus.Registry

	requests        *prometheus.CounterVec
	refusals        *refusals
	requestDuration *prometheus.HistogramVec
	groupSize       prometheus.Histogram
	retries         *prometheus.CounterVec
	conflicts       prometheus.Counter
	budgetsGrown    prometheus.Counter
	dynamoCalls     *prometheus.CounterVec
	dynamoDuration  *prometheus.HistogramVec
	forwarded       *prometheus.CounterVec
	forwardFailures *prometheus.CounterVec
	fallbacks       *prometheus.CounterVec

	// byProcedure holds the series of every procedure known at New,
	// looked up once: an RPC then finds its two by one map read, not by
	// hashing its labels in each vector. Read-only after New.
	byProcedure map[string]procedureSeries
	// byOperation holds the series of every DynamoDB operation known at
	// New (its duration, and its calls by the outcomes that are not an AWS
	// error code), looked up once as byProcedure's: a call then finds its
	// two by map reads, not by hashing its labels in each vector.
	// Read-only after New.
	byOperation map[string]operationSeries
}

// operationSeries are one DynamoDB operation's series.
type operationSeries struct {
	duration prometheus.Observer
	calls    map[string]prometheus.Counter // by outcome, of dynamoDBOutcomes
}

// procedureSeries are one procedure's request series.
type procedureSeries struct {
	duration prometheus.Observer
	requests map[string]prometheus.Counter // by code, as observeRequest spells it
}

var (
	_ dynamo.Observer   = (*Metrics)(nil)
	_ affinity.Observer = (*Metrics)(nil)
)

// latencyBuckets are the upper bounds, in seconds, of the latency
// histograms: about exponential (1, 2.5, 5 a decade) from 0.1 ms, since a
// GetBalance served from DynamoDB in the same zone takes well under a
// millisecond, up to 10 s, past any timeout of ledgerd's.
var latencyBuckets = []float64{
	.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10,
}

// retryReasons are the values of pointledger_write_retries_total's reason.
var retryReasons = []string{
	dynamo.RetryTransactionConflict, dynamo.RetryVersionMoved, dynamo.RetryThrottled, dynamo.RetryStaleCache,
}

// dynamoDBOperations are the DynamoDB and DynamoDB Streams operations
// ledgerd calls once it runs (migrate's CreateTable is not measured), so
// that their series start at 0. A call of another operation is still
// counted, from its first call on.
var dynamoDBOperations = []string{
	"GetItem", "Query", "Scan", "PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "DescribeTable",
	"DescribeStream", "GetShardIterator", "GetRecords",
}

// dynamoDBOutcomes are the outcomes every operation starts with at 0: the
// ones that are not an AWS error code, which are as many as AWS has.
var dynamoDBOutcomes = []string{"ok", "canceled", "error"}

// New returns the metrics, registered with a new registry that also holds
// the Go runtime's and the process's. procedures are the RPCs this process
// serves (none for `ledgerd project`). Every series whose labels are known
// in advance (each procedure with each Connect code, each retry reason,
// each DynamoDB operation, ...) starts at 0, so that a dashboard's query
// finds a 0 before the first event rather than nothing.
func New(procedures ...string) *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		refusals: newRefusals(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pointledger_requests_total",
			Help: "RPCs handled, by procedure and Connect code (ok for success).",
		}, []string{"procedure", "code"}),
		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pointledger_request_duration_seconds",
			Help:    "Time to handle an RPC, by procedure.",
			Buckets: latencyBuckets,
		}, []string{"procedure"}),
		groupSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pointledger_group_commit_size",
			Help:    "Mutations committed per ledger transaction, as entries or recorded refusals (group commit; 1 when off).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 48},
		}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pointledger_write_retries_total",
			Help: "Write-path attempts tried again, by reason: transaction_conflict, version_moved, throttled, stale_cache.",
		}, []string{"reason"}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pointledger_transaction_conflicts_total",
			Help: "Ledger transactions DynamoDB cancelled with TransactionConflict.",
		}),
		budgetsGrown: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pointledger_budget_shards_grown_total",
			Help: "Times this process doubled a budget's escrow shards because DynamoDB throttled them (the log line \"budget shards grown\" names the budget).",
		}),
		dynamoCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pointledger_dynamodb_calls_total",
			Help: "DynamoDB and DynamoDB Streams calls (with the SDK's own retries), by operation and outcome: ok, the AWS error code, canceled or error.",
		}, []string{"operation", "outcome"}),
		dynamoDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pointledger_dynamodb_call_duration_seconds",
			Help:    "Time of a DynamoDB call (with the SDK's own retries), by operation.",
			Buckets: latencyBuckets,
		}, []string{"operation"}),
		forwarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pointledger_forwarded_total",
			Help: "Mutations sent to the instance that owns their user, which answered them (a refusal too), by procedure.",
		}, []string{"procedure"}),
		forwardFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pointledger_forward_failures_total",
			Help: "Mutations sent to their user's owner that got no answer, by reason: unreachable, timeout, refused (the peer token).",
		}, []string{"reason"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pointledger_forward_fallbacks_total",
			Help: "Mutations committed by this instance after their user's owner gave no answer, by procedure.",
		}, []string{"procedure"}),
	}
	m.registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.requests, m.refusals.counter, m.requestDuration, m.groupSize, m.retries, m.conflicts, m.budgetsGrown, m.dynamoCalls, m.dynamoDuration,
		m.forwarded, m.forwardFailures, m.fallbacks,
	)
	m.startAtZero(procedures)
	return m
}

// startAtZero makes the series of every known label value, at 0.
func (m *Metrics) startAtZero(procedures []string) {
	codes := connectCodes()
	m.byProcedure = make(map[string]procedureSeries, len(procedures))
	for _, procedure := range procedures {
		s := procedureSeries{duration: m.requestDuration.WithLabelValues(procedure), requests: make(map[string]prometheus.Counter, len(codes))}
		for _, code := range codes {
			s.requests[code] = m.requests.WithLabelValues(procedure, code)
		}
		m.byProcedure[procedure] = s
	}
	for _, reason := range retryReasons {
		m.retries.WithLabelValues(reason)
	}
	m.byOperation = make(map[string]operationSeries, len(dynamoDBOperations))
	for _, op := range dynamoDBOperations {
		s := operationSeries{duration: m.dynamoDuration.WithLabelValues(op), calls: make(map[string]prometheus.Counter, len(dynamoDBOutcomes))}
		for _, outcome := range dynamoDBOutcomes {
			s.calls[outcome] = m.dynamoCalls.WithLabelValues(op, outcome)
		}
		m.byOperation[op] = s
	}
	// Forwarding series only where the mutations are served: `ledgerd
	// project` forwards nothing.
	forwarding := false
	for _, procedure := range affinity.ForwardedProcedures() {
		if slices.Contains(procedures, procedure) {
			forwarding = true
			m.forwarded.WithLabelValues(procedure)
			m.fallbacks.WithLabelValues(procedure)
		}
	}
	if forwarding {
		for _, reason := range []string{affinity.FailUnreachable, affinity.FailTimeout, affinity.FailRefused} {
			m.forwardFailures.WithLabelValues(reason)
		}
	}
}

// connectCodes are the values of pointledger_requests_total's code: ok and
// every Connect code, as observeRequest spells them.
func connectCodes() []string {
	codes := []string{"ok"}
	for code := connect.CodeCanceled; code <= connect.CodeUnauthenticated; code++ {
		codes = append(codes, code.String())
	}
	return codes
}

// Handler serves the metrics in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{Registry: m.registry})
}

// Registry is where the metrics are registered.
func (m *Metrics) Registry() *prometheus.Registry { return m.registry }

// GroupCommitted implements dynamo.Observer.
func (m *Metrics) GroupCommitted(mutations int) { m.groupSize.Observe(float64(mutations)) }

// Retried implements dynamo.Observer.
func (m *Metrics) Retried(reason string) {
	m.retries.WithLabelValues(reason).Inc()
	if reason == dynamo.RetryTransactionConflict {
		m.conflicts.Inc()
	}
}

// BudgetGrown implements dynamo.Observer.
func (m *Metrics) BudgetGrown(int, int) { m.budgetsGrown.Inc() }

// Forwarded implements affinity.Observer.
func (m *Metrics) Forwarded(procedure string) { m.forwarded.WithLabelValues(procedure).Inc() }

// ForwardFailed implements affinity.Observer.
func (m *Metrics) ForwardFailed(reason string) { m.forwardFailures.WithLabelValues(reason).Inc() }

// FellBack implements affinity.Observer.
func (m *Metrics) FellBack(procedure string) { m.fallbacks.WithLabelValues(procedure).Inc() }

// WatchPeers exports how many of the deployment's instances this one sees
// live (itself included) and down.
func (m *Metrics) WatchPeers(count func() (live, down int)) {
	gauge := func(state string, pick func(live, down int) int) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "pointledger_peers",
			Help:        "Instances of the deployment this one sees, by state: live (itself included; they own users) or down.",
			ConstLabels: prometheus.Labels{"state": state},
		}, func() float64 { return float64(pick(count())) })
	}
	m.registry.MustRegister(
		gauge("live", func(live, _ int) int { return live }),
		gauge("down", func(_, down int) int { return down }),
	)
}

// WatchProjector exports the status of the projector running in this
// process: its lag (newest applied entry: applied time minus create time),
// the entries it applied, and whether it is caught up.
func (m *Metrics) WatchProjector(status func() history.ProjectorStatus) {
	m.registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "pointledger_projection_lag_seconds",
			Help: "Projection lag: for the newest entry applied to history, the time from its commit to its application.",
		}, func() float64 { return status().Lag.Seconds() }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "pointledger_projection_entries_applied_total",
			Help: "Ledger entries the projector in this process applied to history.",
		}, func() float64 { return float64(status().Applied) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "pointledger_projection_caught_up",
			Help: "1 when every shard this projector holds had nothing new at its last read, else 0.",
		}, func() float64 {
			if status().CaughtUp {
				return 1
			}
			return 0
		}),
	)
}

// Interceptor counts and times every RPC, unary or streamed. Put it first
// among the handler's interceptors, so that it sees the code of every
// answer, refusals by later interceptors included.
func (m *Metrics) Interceptor() connect.Interceptor { return interceptor{m} }

type interceptor struct{ m *Metrics }

func (i interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		start := time.Now()
		res, err := next(ctx, req)
		i.m.observeRequest(req.Spec().Procedure, start, err)
		return res, err
	}
}

func (i interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		start := time.Now()
		err := next(ctx, conn)
		i.m.observeRequest(conn.Spec().Procedure, start, err)
		return err
	}
}

func (m *Metrics) observeRequest(procedure string, start time.Time, err error) {
	elapsed := time.Since(start).Seconds()
	code := "ok"
	if err != nil {
		code = connect.CodeOf(err).String()
		m.refusals.observe(err)
	}
	s, known := m.byProcedure[procedure]
	if !known {
		m.requestDuration.WithLabelValues(procedure).Observe(elapsed)
		m.requests.WithLabelValues(procedure, code).Inc()
		return
	}
	s.duration.Observe(elapsed)
	if c, ok := s.requests[code]; ok {
		c.Inc()
	} else {
		m.requests.WithLabelValues(procedure, code).Inc()
	}
}

// DynamoDBMiddleware counts and times every call of an AWS SDK client it is
// added to (aws.Config.APIOptions, or a client's Options.APIOptions). It
// sits at the end of the initialize step, so that it sees the operation's
// name and one call however often the SDK retries it.
func (m *Metrics) DynamoDBMiddleware(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("pointledgerMetrics",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			start := time.Now()
			out, md, err := next.HandleInitialize(ctx, in)
			m.DynamoDBCall(awsmiddleware.GetOperationName(ctx), time.Since(start), err)
			return out, md, err
		}), middleware.After)
}

// DynamoDBCall counts and times one DynamoDB call: the middleware's, and
// those internal/ddbwire sends without the SDK's stack.
func (m *Metrics) DynamoDBCall(operation string, took time.Duration, err error) {
	outcome := outcome(err)
	s, ok := m.byOperation[operation]
	if !ok {
		m.dynamoDuration.WithLabelValues(operation).Observe(took.Seconds())
		m.dynamoCalls.WithLabelValues(operation, outcome).Inc()
		return
	}
	s.duration.Observe(took.Seconds())
	if c, ok := s.calls[outcome]; ok {
		c.Inc()
		return
	}
	m.dynamoCalls.WithLabelValues(operation, outcome).Inc() // an AWS error code
}

// outcome names how a call ended, with few enough values to be a label.
func outcome(err error) string {
	var apiErr smithy.APIError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &apiErr):
		return apiErr.ErrorCode()
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	}
	return "error"
}
