package client_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/pointledger/pointledger/client"
	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
)

// flaky answers Grant with its errors in turn, then with success; it keeps
// what each attempt sent.
type flaky struct {
	pointledgerv1connect.UnimplementedLedgerServiceHandler
	errs  []error
	delay time.Duration // of the first attempt

	mu       sync.Mutex
	attempts []attempt
}

type attempt struct{ requestID, authorization string }

func (f *flaky) Grant(ctx context.Context, req *connect.Request[pb.GrantRequest]) (*connect.Response[pb.GrantResponse], error) {
	f.mu.Lock()
	n := len(f.attempts)
	f.attempts = append(f.attempts, attempt{req.Msg.RequestId, req.Header().Get("Authorization")})
	f.mu.Unlock()
	if n == 0 && f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if n < len(f.errs) {
		return nil, f.errs[n]
	}
	return connect.NewResponse(&pb.GrantResponse{Balance: req.Msg.Amount}), nil
}

func (f *flaky) sent() []attempt {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]attempt(nil), f.attempts...)
}

func serveFlaky(t *testing.T, f *flaky) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(pointledgerv1connect.NewLedgerServiceHandler(f))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// fast retries, so that the tests take no time.
var fast = client.RetryPolicy{MaxAttempts: 4, InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}

func grant(ctx context.Context, c *client.Client, requestID string) error {
	_, err := c.Ledger.Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: "alice", Amount: "1", RequestId: requestID}))
	return err
}

func TestRetrySendsTheSameRequestWhileTheOutcomeIsUnknown(t *testing.T) {
	t.Parallel()
	for _, code := range []connect.Code{connect.CodeAborted, connect.CodeUnavailable, connect.CodeDeadlineExceeded} {
		for _, protocol := range []client.Protocol{client.ProtocolConnect, client.ProtocolGRPC, client.ProtocolGRPCWeb} {
			t.Run(code.String()+"/"+protocol.String(), func(t *testing.T) {
				t.Parallel()
				f := &flaky{errs: []error{connect.NewError(code, errors.New("once")), connect.NewError(code, errors.New("twice"))}}
				c := client.New(serveFlaky(t, f), client.WithToken("secret"), client.WithProtocol(protocol), client.WithRetry(fast))
				id := client.NewRequestID()
				if err := grant(context.Background(), c, id); err != nil {
					t.Fatalf("grant after two %v: %v", code, err)
				}
				want := attempt{id, "Bearer secret"}
				got := f.sent()
				if len(got) != 3 {
					t.Fatalf("%d attempts, want 3", len(got))
				}
				for i, a := range got {
					if a != want {
						t.Errorf("attempt %d sent %+v, want %+v", i+1, a, want)
					}
				}
			})
		}
	}
}

func TestRetryStopsAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	unavailable := connect.NewError(connect.CodeUnavailable, errors.New("down"))
	f := &flaky{errs: []error{unavailable, unavailable, unavailable, unavailable, unavailable}}
	c := client.New(serveFlaky(t, f), client.WithRetry(fast))
	if err := grant(context.Background(), c, "g"); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("grant: %v, want unavailable", err)
	}
	if n := len(f.sent()); n != fast.MaxAttempts {
		t.Errorf("%d attempts, want %d", n, fast.MaxAttempts)
	}

	f = &flaky{errs: []error{unavailable}}
	c = client.New(serveFlaky(t, f), client.WithRetry(client.NoRetry))
	if err := grant(context.Background(), c, "g"); connect.CodeOf(err) != connect.CodeUnavailable || len(f.sent()) != 1 {
		t.Errorf("NoRetry: %v after %d attempts, want unavailable after 1", err, len(f.sent()))
	}
}

// Answers are not retried: a refusal is final, a malformed request would
// fail again.
func TestRetryLeavesAnswersAlone(t *testing.T) {
	t.Parallel()
	for _, code := range []connect.Code{
		connect.CodeFailedPrecondition, connect.CodeNotFound, connect.CodeInvalidArgument, connect.CodeAlreadyExists,
		connect.CodeInternal, connect.CodeUnauthenticated, connect.CodePermissionDenied, connect.CodeResourceExhausted,
		connect.CodeCanceled, connect.CodeUnknown,
	} {
		t.Run(code.String(), func(t *testing.T) {
			t.Parallel()
			f := &flaky{errs: []error{connect.NewError(code, errors.New("no"))}}
			c := client.New(serveFlaky(t, f), client.WithRetry(fast))
			if err := grant(context.Background(), c, "g"); connect.CodeOf(err) != code {
				t.Errorf("grant: %v, want %v", err, code)
			}
			if n := len(f.sent()); n != 1 {
				t.Errorf("%d attempts, want 1", n)
			}
		})
	}
}

// The caller's context bounds everything: its deadline is not retried, and
// a cancellation ends the wait between attempts.
func TestRetryEndsWithTheCallersContext(t *testing.T) {
	t.Parallel()
	t.Run("deadline", func(t *testing.T) {
		t.Parallel()
		f := &flaky{delay: time.Minute}
		c := client.New(serveFlaky(t, f), client.WithRetry(fast))
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if err := grant(ctx, c, "g"); connect.CodeOf(err) != connect.CodeDeadlineExceeded {
			t.Errorf("grant: %v, want deadline_exceeded", err)
		}
		// One attempt, or none if the deadline came first (a busy machine).
		if n := len(f.sent()); n > 1 {
			t.Errorf("%d attempts: retried after the caller's deadline", n)
		}
	})
	// A busy machine runs the context's timer late: its deadline is past
	// while Err is still nil, and an answer may come back in between (issue
	// 31: an attempt answered deadline_exceeded by the server, and a second
	// one sent, after the caller's 50 ms). The clock decides, not the timer.
	t.Run("deadline past, timer not run", func(t *testing.T) {
		t.Parallel()
		unavailable := connect.NewError(connect.CodeUnavailable, errors.New("down"))
		f := &flaky{errs: []error{unavailable}}
		c := client.New(serveFlaky(t, f), client.WithRetry(fast))
		ctx := lateTimer{context.Background(), time.Now().Add(-time.Second)}
		if err := grant(ctx, c, "g"); connect.CodeOf(err) != connect.CodeUnavailable {
			t.Errorf("grant: %v, want the attempt's unavailable", err)
		}
		if n := len(f.sent()); n > 1 {
			t.Errorf("%d attempts: retried after the caller's deadline", n)
		}
	})
	t.Run("backoff", func(t *testing.T) {
		t.Parallel()
		aborted := connect.NewError(connect.CodeAborted, errors.New("conflict"))
		f := &flaky{errs: []error{aborted, aborted}}
		c := client.New(serveFlaky(t, f), client.WithRetry(client.RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Hour, MaxBackoff: time.Hour}))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() { // once the first attempt is in, and most likely answered
			for len(f.sent()) == 0 {
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(100 * time.Millisecond)
			cancel()
		}()
		start := time.Now()
		err := grant(ctx, c, "g")
		if code := connect.CodeOf(err); code != connect.CodeAborted && code != connect.CodeCanceled {
			t.Errorf("grant: %v, want the last answer, aborted (or canceled, if the cancellation came first)", err)
		}
		// The wait is random in [0, 1 h]: one of less than a minute is
		// most unlikely.
		if took := time.Since(start); took > time.Minute {
			t.Errorf("grant took %v: the backoff outlived the caller's context", took)
		}
	})
}

// An attempt that runs out of its own time is retried within the caller's.
func TestRetryBoundsEachAttempt(t *testing.T) {
	t.Parallel()
	f := &flaky{delay: time.Minute} // the first attempt only
	// Attempts of half a second, and many: on a busy machine an answer may
	// take longer than one attempt.
	policy := client.RetryPolicy{MaxAttempts: 10, InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, AttemptTimeout: 500 * time.Millisecond}
	c := client.New(serveFlaky(t, f), client.WithRetry(policy))
	if err := grant(context.Background(), c, "g"); err != nil {
		t.Fatalf("grant: %v, want success after the first attempt timed out", err)
	}
	if n := len(f.sent()); n < 2 {
		t.Errorf("%d attempts, want the slow one and more", n)
	}
}

// A server that is not there is unavailable: retried.
func TestRetryReachesForAServerThatIsNotThere(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close()
	var dials atomic.Int32
	transport := http.DefaultTransport.(*http.Transport).Clone()
	dial := transport.DialContext
	transport.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return dial(ctx, network, addr)
	}
	c := client.New(url, client.WithRetry(fast), client.WithHTTPClient(&http.Client{Transport: transport}))
	if err := grant(context.Background(), c, "g"); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("grant: %v, want unavailable", err)
	}
	if n := dials.Load(); n != int32(fast.MaxAttempts) {
		t.Errorf("%d dials, want %d", n, fast.MaxAttempts)
	}
}

// lateTimer is a context whose deadline is past and whose timer has not
// run yet: Done and Err say nothing of it.
type lateTimer struct {
	context.Context
	deadline time.Time
}

func (c lateTimer) Deadline() (time.Time, bool) { return c.deadline, true }
