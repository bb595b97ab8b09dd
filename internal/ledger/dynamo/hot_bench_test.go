package dynamo

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/pointledger/pointledger/internal/ddbhttp"
	"github.com/pointledger/pointledger/internal/ddbproxy"
	"github.com/pointledger/pointledger/internal/ddbwire"
	"github.com/pointledger/pointledger/internal/dynamolocal"
	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
)

// BenchmarkHotUserGroups is the load test's hot user without the service
// around the write path: 128 goroutines purchase 1 at a time on one user
// through Apply, with the transactions sent by ddbwire on its own
// connections as ledgerd sends them, through the proxy at -bench-latency,
// on a fresh emulator warmed up as BenchmarkGroupLayout's are. Run:
//
//	go test -run '^$' -bench HotUserGroups -benchtime 20000x ./internal/ledger/dynamo/ -args -bench-latency 10ms
//
// It times each group's transaction at four points: the write path calls
// TransactWriteItems (call), the request's first byte is written to the
// connection (sent), the answer's first byte is read (answered), and the
// call returns (returned); and when the Observer hears the group committed
// (observed). Besides purchases/s and purchases a group it reports, as
// means per group, in ms:
//
//   - flight-ms: sent to answered, the proxy's latency and the emulator's
//     transaction (what BenchmarkGroupLayout's ms/txn is, with its HTTP);
//   - gap-ms: answered to the next group's sent, what the write path adds
//     between two transactions of one user, and its parts:
//   - decode-ms: answered to returned (ddbwire reads and decodes the answer);
//   - between-ms: returned to the next call (answering the group's callers,
//     taking the next calls, planning them, its items);
//   - encode-ms: call to sent (ddbwire encodes and signs the request and
//     takes a connection).
//
// gap-ms p50 and p90 are reported too: a busy machine's preemptions show in
// the tail.
func BenchmarkHotUserGroups(b *testing.B) {
	const clients = 128
	env := dynamotest.NewFresh(b)
	ctx := context.Background()
	endpoint := env.Endpoint
	if *benchLatency > 0 {
		p, err := ddbproxy.Start(ddbproxy.Options{Target: env.Endpoint, Latency: *benchLatency})
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		endpoint = p.URL
	}
	tl := &timeline{}
	sdk := dynamolocal.NewClient(endpoint)
	wire, err := ddbwire.New(ctx, sdk, ddbwire.Options{OwnConns: true,
		HTTPClient: ddbhttp.Client().WithTransportOptions(func(t *http.Transport) { t.DialContext = tl.dial })})
	if err != nil || !wire.OwnConns() {
		b.Fatalf("ddbwire on its own connections: %v", err)
	}
	l := New(&timedAPI{API: wire, tl: tl}, Options{Table: env.Ledger, Observer: tl})
	for _, user := range []string{"warm", "hot"} {
		mustApply(b, l, mutation(b, ledger.EntryGrant, user, "g", "1000000000"))
	}
	purchases := func(user string, n int64, stop func() bool) {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range clients {
			wg.Go(func() {
				for i := next.Add(1); i <= n && !stop(); i = next.Add(1) {
					if _, err := l.Apply(ctx, mutation(b, ledger.EntryPurchase, user, fmt.Sprint("p", i), "1")); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	// The emulator's JIT compiler takes tens of seconds to reach its
	// steady speed (see BenchmarkGroupLayout).
	warm := time.Now()
	purchases("warm", 1<<40, func() bool { return time.Since(warm) > benchWarmup })
	tl.reset()
	b.ResetTimer()
	start := time.Now()
	purchases("hot", int64(b.N), func() bool { return false })
	elapsed := time.Since(start)
	b.StopTimer()
	tl.report(b, elapsed)
}

// timedAPI notes when the write path calls TransactWriteItems and when the
// call returns.
type timedAPI struct {
	API
	tl *timeline
}

func (a *timedAPI) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	a.tl.mark(func(t *txnTimes) { t.call = time.Now() })
	out, err := a.API.TransactWriteItems(ctx, in, opts...)
	a.tl.mark(func(t *txnTimes) { t.returned = time.Now() })
	a.tl.done()
	return out, err
}

// txnTimes are the moments of one transaction (see BenchmarkHotUserGroups).
type txnTimes struct {
	call, sent, answered, returned, observed time.Time
	mutations                                int
}

// timeline collects the transactions' moments. It relies on one
// transaction at a time, as one hot user has: a write or read on a
// connection belongs to the transaction under way.
type timeline struct {
	mu   sync.Mutex
	cur  txnTimes
	txns []txnTimes
}

func (tl *timeline) mark(f func(*txnTimes)) {
	tl.mu.Lock()
	f(&tl.cur)
	tl.mu.Unlock()
}

func (tl *timeline) done() {
	tl.mu.Lock()
	tl.txns = append(tl.txns, tl.cur)
	tl.cur = txnTimes{}
	tl.mu.Unlock()
}

func (tl *timeline) reset() {
	tl.mu.Lock()
	tl.txns = nil
	tl.mu.Unlock()
}

// GroupCommitted is the Observer's: the last transaction committed.
func (tl *timeline) GroupCommitted(n int) {
	now := time.Now()
	tl.mu.Lock()
	if k := len(tl.txns) - 1; k >= 0 && tl.txns[k].observed.IsZero() {
		tl.txns[k].observed, tl.txns[k].mutations = now, n
	}
	tl.mu.Unlock()
}
func (*timeline) Retried(string)       {}
func (*timeline) BudgetGrown(int, int) {}

func (tl *timeline) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &timedConn{Conn: c, tl: tl}, nil
}

// timedConn notes a transaction's first write and its answer's first read.
type timedConn struct {
	net.Conn
	tl *timeline
}

func (c *timedConn) Write(p []byte) (int, error) {
	c.tl.mark(func(t *txnTimes) {
		if t.sent.IsZero() {
			t.sent = time.Now()
		}
	})
	return c.Conn.Write(p)
}

func (c *timedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.tl.mark(func(t *txnTimes) {
			if !t.sent.IsZero() && t.answered.IsZero() {
				t.answered = time.Now()
			}
		})
	}
	return n, err
}

func (tl *timeline) report(b *testing.B, elapsed time.Duration) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var flight, decode, between, encode, gaps []time.Duration
	mutations := 0
	for i, t := range tl.txns {
		if t.sent.IsZero() || t.answered.IsZero() {
			b.Fatalf("transaction %d: no write or no answer seen on the connection", i)
		}
		mutations += t.mutations
		flight = append(flight, t.answered.Sub(t.sent))
		decode = append(decode, t.returned.Sub(t.answered))
		encode = append(encode, t.sent.Sub(t.call))
		if i > 0 {
			prev := tl.txns[i-1]
			between = append(between, t.call.Sub(prev.returned))
			gaps = append(gaps, t.sent.Sub(prev.answered))
		}
	}
	ms := func(ds []time.Duration) float64 {
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		return float64(sum.Microseconds()) / 1000 / float64(max(len(ds), 1))
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "purchases/s")
	b.ReportMetric(float64(mutations)/float64(max(len(tl.txns), 1)), "purchases/group")
	b.ReportMetric(float64(elapsed.Microseconds())/1000/float64(max(len(tl.txns), 1)), "ms/txn")
	b.ReportMetric(ms(flight), "flight-ms")
	b.ReportMetric(ms(gaps), "gap-ms")
	b.ReportMetric(ms(decode), "decode-ms")
	b.ReportMetric(ms(between), "between-ms")
	b.ReportMetric(ms(encode), "encode-ms")
	sort.Slice(gaps, func(i, j int) bool { return gaps[i] < gaps[j] })
	if len(gaps) > 0 {
		b.ReportMetric(float64(gaps[len(gaps)/2].Microseconds())/1000, "gap-p50-ms")
		b.ReportMetric(float64(gaps[len(gaps)*9/10].Microseconds())/1000, "gap-p90-ms")
	}
}
