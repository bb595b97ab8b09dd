package client

import (
	"context"
	"math/rand/v2"
	"time"

	"connectrpc.com/connect"
)

// RetryPolicy says how a unary call whose outcome is unknown is sent again.
// Zero fields take DefaultRetryPolicy's values.
type RetryPolicy struct {
	// MaxAttempts bounds the attempts, the first included: 1 never retries.
	MaxAttempts int
	// The wait before retry n is random in [0, min(MaxBackoff,
	// InitialBackoff*2^(n-1))] ("full jitter"), so that clients refused
	// together do not come back together.
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	// AttemptTimeout, if positive, bounds each attempt, so that one slow
	// attempt does not use up the caller's whole deadline; an attempt that
	// runs out of it is retried like deadline_exceeded.
	AttemptTimeout time.Duration
}

// DefaultRetryPolicy is what New uses unless WithRetry says otherwise: four
// attempts within about a second of waiting.
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: 4, InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}

// NoRetry sends every call once.
var NoRetry = RetryPolicy{MaxAttempts: 1}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = DefaultRetryPolicy.MaxAttempts
	}
	if p.InitialBackoff <= 0 {
		p.InitialBackoff = DefaultRetryPolicy.InitialBackoff
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = DefaultRetryPolicy.MaxBackoff
	}
	return p
}

// backoff is the wait before retry n (1, 2, ...).
func (p RetryPolicy) backoff(n int) time.Duration {
	ceiling := p.MaxBackoff
	if shift := n - 1; shift < 30 && p.InitialBackoff<<shift < ceiling {
		ceiling = p.InitialBackoff << shift
	}
	return rand.N(ceiling + 1)
}

// Retry is a client interceptor that sends a unary call again, with the same
// request message, while it fails with a code whose outcome is unknown or
// passing: aborted (concurrent writers won the server's own retries),
// unavailable (the server or the network was not there) and
// deadline_exceeded while the caller's context is not done (an attempt's
// own deadline, or the server's). It waits a jittered, growing backoff
// between attempts, stops after p.MaxAttempts, and returns the last error.
//
// Sending the same message again is safe because of the API's idempotency:
// every mutation carries its request_id, so an attempt that did reach the
// ledger is answered again from its record (replayed) and nothing is
// written twice; reads have no effect. Other errors are answers, never
// retried: a refusal (failed_precondition, not_found) is final and would be
// replayed as it is; invalid_argument and the like would fail again.
// Streaming calls (Reconcile) are not retried.
func Retry(p RetryPolicy) connect.Interceptor { return retry(p.withDefaults()) }

type retry RetryPolicy

func (r retry) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if !req.Spec().IsClient {
			return next(ctx, req)
		}
		p := RetryPolicy(r)
		for attempt := 1; ; attempt++ {
			res, err := r.attempt(ctx, next, req)
			if err == nil || attempt >= p.MaxAttempts || !retryable(ctx, err) {
				return res, err
			}
			wait := time.NewTimer(p.backoff(attempt))
			select {
			case <-ctx.Done():
				wait.Stop()
				return nil, err // the last answer says more than the caller's own cancellation
			case <-wait.C:
			}
			if callerDone(ctx) {
				return nil, err
			}
		}
	}
}

func (r retry) attempt(ctx context.Context, next connect.UnaryFunc, req connect.AnyRequest) (connect.AnyResponse, error) {
	if r.AttemptTimeout <= 0 {
		return next(ctx, req)
	}
	ctx, cancel := context.WithTimeout(ctx, r.AttemptTimeout)
	defer cancel()
	return next(ctx, req)
}

// retryable says whether an attempt that failed with err may be sent again:
// its outcome is unknown or the failure passing, and the caller still
// waits.
func retryable(ctx context.Context, err error) bool {
	if callerDone(ctx) {
		return false
	}
	switch connect.CodeOf(err) {
	case connect.CodeAborted, connect.CodeUnavailable:
		return true
	case connect.CodeDeadlineExceeded:
		return true // the caller's own context is not done: an attempt's deadline, or the server's
	default:
		return false
	}
}

func (r retry) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (r retry) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// callerDone says whether the caller's context is done, or its deadline is
// past by the clock: a context's Err is set by a timer, which a busy
// machine runs late, after an attempt's answer has come back (issue 31).
func callerDone(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	deadline, ok := ctx.Deadline()
	return ok && !time.Now().Before(deadline)
}
