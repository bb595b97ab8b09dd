package stream

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/pointledger/pointledger/internal/api"
	"github.com/pointledger/pointledger/internal/ddbwire"
	"github.com/pointledger/pointledger/internal/dispatch"
	dispatchmemory "github.com/pointledger/pointledger/internal/dispatch/memory"
	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	ledgermemory "github.com/pointledger/pointledger/internal/ledger/memory"
	"github.com/pointledger/pointledger/internal/ledgertest"
	"github.com/pointledger/pointledger/internal/webhook"
)

// BenchmarkDeliveryPerEvent is the dispatcher's path for the stream's
// events in one process (issue 37: what delivery costs ledgerd an event):
// GetRecords' answers, as DynamoDB Local gave them for purchases of 1 over
// users granted first (captured once, at the start), read by the streams
// client the consumer is given, through the consumer's apply, into the
// dispatcher's Apply (a store in memory, no queues: every event sent
// directly), each event's body encoded with api.EntryJSON, signed, and
// POSTed to a receiver on 127.0.0.1 (httptest, answering 204). An op is
// one GetRecords page; cpu-ns/event and allocs/event divide the process's
// CPU (the receiver's included) and its allocations by the events sent.
// getrecords=lean reads the pages with ddbwire.LeanGetRecords, as ledgerd
// does by default (-lean-writes); getrecords=sdk with the SDK's
// deserializer.
func BenchmarkDeliveryPerEvent(b *testing.B) {
	for _, lean := range []bool{true, false} {
		name := "getrecords=sdk"
		if lean {
			name = "getrecords=lean"
		}
		b.Run(name, func(b *testing.B) { benchmarkDeliveryPerEvent(b, lean) })
	}
}

func benchmarkDeliveryPerEvent(b *testing.B, lean bool) {
	var received, dialed atomic.Int64
	receiver := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		received.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	receiver.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			dialed.Add(1)
		}
	}
	receiver.Start()
	b.Cleanup(receiver.Close)

	ctx := context.Background()
	// The endpoint made an hour ago: it receives the entries captured.
	store := dispatchmemory.New(func() time.Time { return time.Now().Add(-time.Hour) })
	if _, _, err := store.Create(ctx, dispatch.Endpoint{URL: receiver.URL, EventTypes: []string{"*"}, Subscription: allEvents(b)}); err != nil {
		b.Fatal(err)
	}
	captureOnce.Do(func() { captured.pages, captured.events = capturePurchasePages(b, 200) })
	pages, events := captured.pages, captured.events
	if len(pages) == 0 {
		b.Fatal("no pages captured")
	}
	d, err := dispatch.New(store, ledgermemory.New(nil), dispatch.Options{
		Sender:      webhook.NewSender(webhook.Options{Policy: webhook.URLPolicy{AllowHTTP: true, AllowLoopback: true}}),
		EncodeEntry: api.EntryJSON,
		Log:         quiet,
	})
	if err != nil {
		b.Fatal(err)
	}
	c := NewConsumer("ledger", nil, nil, nil, d, Options{Name: "deliveries", Logger: quiet})
	replay := &replayer{pages: pages}
	streams := benchStreamsClient(replay, lean)

	iter := aws.String("replayed")
	// One round first: connections made, the endpoint read.
	for range pages {
		out, err := streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter}, entryImages)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.apply(ctx, out.Records); err != nil {
			b.Fatal(err)
		}
	}
	received.Store(0)
	dialed.Store(0)
	sent := int64(0)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	cpu := dynamotest.CPU(b)
	cpuBefore := processCPU(b)
	b.ResetTimer()
	for i := range b.N {
		out, err := streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter}, entryImages)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.apply(ctx, out.Records); err != nil {
			b.Fatal(err)
		}
		sent += int64(events[i%len(pages)])
	}
	b.StopTimer()
	cpu()
	cpuUsed := processCPU(b) - cpuBefore
	runtime.ReadMemStats(&after)
	if got := received.Load(); got != sent {
		b.Fatalf("the receiver got %d events, want %d", got, sent)
	}
	b.ReportMetric(float64(sent)/float64(b.N), "events/op")
	b.ReportMetric(float64(dialed.Load())/float64(sent), "conns/event")
	b.ReportMetric(float64(cpuUsed.Nanoseconds())/float64(sent), "cpu-ns/event")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(sent), "allocs/event")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(sent), "B/event")
}

// captured is what capturePurchasePages read, once a process: runs of
// the benchmark (-count) replay the same pages, and a profile of them has
// the emulator's writes once.
var (
	captureOnce sync.Once
	captured    struct {
		pages  [][]byte
		events []int
	}
)

// capturePurchasePages grants n users 1000 points each in DynamoDB Local,
// reads the stream past the grants, then has each user purchase 1 and
// returns the GetRecords answers that carry the purchases, as their bodies
// came, and how many entries each carries.
func capturePurchasePages(b testing.TB, n int) (pages [][]byte, entries []int) {
	b.Helper()
	env := dynamotest.New(b)
	store := dynamo.New(env.Client, dynamo.Options{Table: env.Ledger, Logger: quiet})
	users := ledgertest.Users("bench-user-", n)
	for _, u := range users {
		ledgertest.Must(b, store, ledger.EntryGrant, ledger.Request{UserID: u, RequestID: "grant-" + u, Amount: "1000"})
	}
	rec := &recording{}
	streams := dynamodbstreams.New(dynamodbstreams.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(env.Endpoint),
		Credentials: credentials.NewStaticCredentialsProvider("local", "local", ""),
		HTTPClient:  rec,
	})
	ctx := context.Background()
	shards := shardIterators(b, ctx, env, streams)
	drain := func(count bool) {
		for i, iter := range shards {
			for {
				out, err := streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter})
				if err != nil {
					b.Fatal(err)
				}
				iter = out.NextShardIterator
				if count && len(out.Records) > 0 {
					pages = append(pages, rec.last)
					entries = append(entries, countInserts(out.Records))
				}
				if len(out.Records) == 0 || iter == nil {
					break
				}
			}
			shards[i] = iter
		}
	}
	drain(false)
	for i, u := range users {
		ledgertest.Must(b, store, ledger.EntryPurchase, ledger.Request{UserID: u, RequestID: fmt.Sprint("purchase-", i), Amount: "1", OrderID: fmt.Sprint("order-", i)})
	}
	drain(true)
	total := 0
	for _, e := range entries {
		total += e
	}
	if total != n {
		b.Fatalf("read %d purchases' entries from the stream, want %d", total, n)
	}
	return pages, entries
}

func shardIterators(b testing.TB, ctx context.Context, env *dynamotest.Env, streams *dynamodbstreams.Client) []*string {
	b.Helper()
	arn, err := NewConsumer(env.Ledger, env.Client, streams, nil, nil, Options{Name: "bench"}).streamArn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	out, err := streams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: &arn})
	if err != nil {
		b.Fatal(err)
	}
	var iters []*string
	for _, sh := range out.StreamDescription.Shards {
		it, err := streams.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{StreamArn: &arn, ShardId: sh.ShardId, ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
		if err != nil {
			b.Fatal(err)
		}
		iters = append(iters, it.ShardIterator)
	}
	return iters
}

func countInserts(records []types.Record) int {
	n := 0
	for _, r := range records {
		sk, _ := r.Dynamodb.Keys["SK"].(*types.AttributeValueMemberS)
		if sk != nil && dynamo.IsEntryKey(sk.Value) && r.EventName == types.OperationTypeInsert {
			n++
		}
	}
	return n
}

// recording is an HTTP client that keeps the body of the last answer.
type recording struct{ last []byte }

func (r *recording) Do(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".GetRecords") {
		r.last = body
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

// replayer answers every request with the next captured page, in turn.
type replayer struct {
	pages [][]byte
	next  int
}

func (r *replayer) Do(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	body := r.pages[r.next%len(r.pages)]
	r.next++
	return &http.Response{
		StatusCode: http.StatusOK, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/x-amz-json-1.0"}, "X-Amzn-Requestid": {"bench"}},
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)), Request: req,
	}, nil
}

// benchStreamsClient is the streams client the consumer reads with, its
// answers replayed.
func benchStreamsClient(r *replayer, lean bool) StreamsAPI {
	var opts []func(*dynamodbstreams.Options)
	if lean {
		opts = append(opts, ddbwire.LeanGetRecords)
	}
	return dynamodbstreams.New(dynamodbstreams.Options{
		Region: "us-east-1", BaseEndpoint: aws.String("http://127.0.0.1:1"),
		Credentials: credentials.NewStaticCredentialsProvider("local", "local", ""),
		HTTPClient:  r,
	}, opts...)
}

func allEvents(b *testing.B) ledger.Subscription {
	b.Helper()
	sub, err := ledger.ParseSubscription([]string{"*"})
	if err != nil {
		b.Fatal(err)
	}
	return sub
}

// processCPU is the CPU this process has used so far, user and system.
func processCPU(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// The emulator's own GetRecords pages (grants, accounts, request records,
// purchases) are read by ddbwire.LeanGetRecords as the SDK reads them.
func TestLeanGetRecordsReadsTheEmulatorsPagesAsTheSDK(t *testing.T) {
	t.Parallel()
	pages, _ := capturePurchasePages(t, 30)
	ctx := context.Background()
	in := &dynamodbstreams.GetRecordsInput{ShardIterator: aws.String("replayed")}
	for i, page := range pages {
		sdk, err := benchStreamsClient(&replayer{pages: [][]byte{page}}, false).GetRecords(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		var lean dynamodbstreams.GetRecordsOutput
		if err := ddbwire.DecodeGetRecords(page, &lean); err != nil {
			t.Fatalf("page %d: DecodeGetRecords: %v", i, err)
		}
		if len(lean.Records) == 0 || !reflect.DeepEqual(sdk.Records, lean.Records) || !reflect.DeepEqual(sdk.NextShardIterator, lean.NextShardIterator) {
			t.Errorf("page %d: lean read %d records %+v, the SDK %d %+v", i, len(lean.Records), lean.Records, len(sdk.Records), sdk.Records)
		}
	}
}
