package ddbwire_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/ddbhttp"
	"github.com/pointledger/pointledger/internal/ddbwire"
	"github.com/pointledger/pointledger/internal/dynamotest"
)

// countingClient is ddbhttp's client with its dials counted.
func countingClient(dials *atomic.Int64) *awshttp.BuildableClient {
	return ddbhttp.Client().WithTransportOptions(func(tr *http.Transport) {
		dial := tr.DialContext
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return dial(ctx, network, addr)
		}
	})
}

// ownConns is ddbwire on its own connections over db, built from client;
// it fails the test if ddbwire fell back to the HTTP client.
func ownConns(t *testing.T, db *dynamodb.Client, client ddbwire.Doer) *ddbwire.Client {
	t.Helper()
	wire, err := ddbwire.New(context.Background(), db, ddbwire.Options{HTTPClient: client, OwnConns: true})
	if err != nil {
		t.Fatal(err)
	}
	if !wire.OwnConns() {
		t.Fatal("ddbwire sends through the HTTP client, want its own connections")
	}
	t.Cleanup(wire.CloseIdleConnections)
	return wire
}

// TestOwnConnsOnDynamoDBLocal: on ddbwire's own connections, transactions
// commit on DynamoDB Local, a GetItem reads what they wrote, a cancelled
// transaction is the SDK's error, and calls one after another take one
// connection (keep-alive); 16 at once take at most 16.
func TestOwnConnsOnDynamoDBLocal(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	ctx := context.Background()
	var dials atomic.Int64
	wire := ownConns(t, env.Client, countingClient(&dials))
	table := aws.String(env.Ledger)
	key := func(i int) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{"PK": str(fmt.Sprint("U#own-", i)), "SK": str("ACCOUNT")}
	}
	for i := range 20 {
		item := key(i)
		item["balance"] = &types.AttributeValueMemberN{Value: fmt.Sprint(i)}
		if _, err := wire.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
			{Put: &types.Put{TableName: table, Item: item, ConditionExpression: aws.String("attribute_not_exists(PK)")}}}}); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		out, err := wire.GetItem(ctx, &dynamodb.GetItemInput{TableName: table, Key: key(i), ConsistentRead: aws.Bool(true)})
		if err != nil || !reflect.DeepEqual(out.Item, item) {
			t.Fatalf("read %d: %v (%v), want %v", i, out.Item, err, item)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("40 calls one after another dialed %d connections, want 1", n)
	}

	again := &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: table, Item: key(3), ConditionExpression: aws.String("attribute_not_exists(PK)"),
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}}}}
	_, want := env.Client.TransactWriteItems(ctx, again)
	_, got := wire.TransactWriteItems(ctx, again)
	sameError(t, got, want)

	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			for j := range 5 {
				k := key(100 + i*10 + j)
				if _, err := wire.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
					{Put: &types.Put{TableName: table, Item: k}}}}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := dials.Load(); n > 17 {
		t.Errorf("16 callers dialed %d connections in all, want at most 17", n)
	}
}

// rawServer is a fake DynamoDB on 127.0.0.1 that speaks HTTP/1.1 on raw
// connections, for the faults of a connection DynamoDB Local cannot be made
// to give (a kept-alive connection closed while idle, an answer cut short,
// chunked answers, an answer that never comes). serve is called for each
// request with the connection's and the request's numbers (from 0) and
// writes the answer; closeAfter closes the connection after it.
type rawServer struct {
	ln       net.Listener
	conns    atomic.Int64
	requests atomic.Int64
	closed   chan int // the number of each connection the server closed
	serve    func(conn, req int, r *http.Request, w *bufio.Writer) (closeAfter bool)
	wg       sync.WaitGroup
	mu       sync.Mutex
	open     map[net.Conn]bool
}

func newRawServer(t testing.TB, serve func(conn, req int, r *http.Request, w *bufio.Writer) bool) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{ln: ln, serve: serve, closed: make(chan int, 100), open: map[net.Conn]bool{}}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := int(s.conns.Add(1) - 1)
			s.mu.Lock()
			s.open[c] = true
			s.mu.Unlock()
			s.wg.Go(func() { s.handle(n, c) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		for c := range s.open {
			_ = c.Close() // a client's idle connection
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *rawServer) handle(n int, c net.Conn) {
	defer func() {
		_ = c.Close()
		s.mu.Lock()
		delete(s.open, c)
		s.mu.Unlock()
		select {
		case s.closed <- n:
		default:
		}
	}()
	br, bw := bufio.NewReader(c), bufio.NewWriter(c)
	for i := 0; ; i++ {
		r, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return
		}
		s.requests.Add(1)
		closeAfter := s.serve(n, i, r, bw)
		if bw.Flush() != nil || closeAfter {
			return
		}
	}
}

func (s *rawServer) url() string { return "http://" + s.ln.Addr().String() }

// okAnswer writes a success with body, by Content-Length.
func okAnswer(w *bufio.Writer, body string) {
	fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Type: application/x-amz-json-1.0\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

// oneAttempt is an SDK client for endpoint whose retryer makes one
// attempt: what ddbwire's connections do alone shows.
func oneAttempt(endpoint string) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		HTTPClient: ddbhttp.Client(), Region: "eu-west-1", BaseEndpoint: aws.String(endpoint),
		Credentials:                     credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""),
		Retryer:                         retry.AddWithMaxAttempts(retry.NewStandard(), 1),
		DisableValidateResponseChecksum: true,
	})
}

func aPut() *dynamodb.TransactWriteItemsInput {
	return &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{{Put: &types.Put{TableName: aws.String("t"), Item: map[string]types.AttributeValue{"PK": str("a")}}}}}
}

// A kept-alive connection the server closed while it was idle: the next
// call's request is sent again on a new connection (no answer came), and
// succeeds with the retryer's one attempt.
func TestOwnConnsResendAfterIdleClose(t *testing.T) {
	t.Parallel()
	s := newRawServer(t, func(conn, req int, r *http.Request, w *bufio.Writer) bool {
		okAnswer(w, "{}")
		return conn == 0 // the first connection closed after its answer, without saying so
	})
	wire := ownConns(t, oneAttempt(s.url()), ddbhttp.Client())
	if _, err := wire.TransactWriteItems(context.Background(), aPut()); err != nil {
		t.Fatal(err)
	}
	<-s.closed // the idle connection is closed before the next call takes it
	if _, err := wire.TransactWriteItems(context.Background(), aPut()); err != nil {
		t.Fatalf("on a connection closed while idle: %v, want the request sent again", err)
	}
	if c, r := s.conns.Load(), s.requests.Load(); c != 2 || r != 2 {
		t.Errorf("%d connections, %d requests answered; want 2 and 2", c, r)
	}
}

// Where an answer may have begun, or the connection was new, the request is
// not sent again by the connections: the error goes to the retryer (here
// of one attempt, so the call fails).
func TestOwnConnsNoResendOnceAnswered(t *testing.T) {
	t.Parallel()
	t.Run("an answer cut short on a reused connection", func(t *testing.T) {
		t.Parallel()
		s := newRawServer(t, func(conn, req int, r *http.Request, w *bufio.Writer) bool {
			if req == 0 {
				okAnswer(w, "{}")
				return false
			}
			_, _ = w.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{")
			return true
		})
		wire := ownConns(t, oneAttempt(s.url()), ddbhttp.Client())
		if _, err := wire.TransactWriteItems(context.Background(), aPut()); err != nil {
			t.Fatal(err)
		}
		if _, err := wire.TransactWriteItems(context.Background(), aPut()); err == nil {
			t.Fatal("an answer cut short, and no error")
		}
		if c, r := s.conns.Load(), s.requests.Load(); c != 1 || r != 2 {
			t.Errorf("%d connections, %d requests; want 1 and 2 (nothing sent again)", c, r)
		}
	})
	t.Run("closed without an answer on a new connection", func(t *testing.T) {
		t.Parallel()
		s := newRawServer(t, func(conn, req int, r *http.Request, w *bufio.Writer) bool { return true })
		wire := ownConns(t, oneAttempt(s.url()), ddbhttp.Client())
		if _, err := wire.TransactWriteItems(context.Background(), aPut()); err == nil {
			t.Fatal("no answer, and no error")
		}
		if c, r := s.conns.Load(), s.requests.Load(); c != 1 || r != 1 {
			t.Errorf("%d connections, %d requests; want 1 and 1 (nothing sent again)", c, r)
		}
	})
	t.Run("with the standard retryer", func(t *testing.T) {
		t.Parallel()
		s := newRawServer(t, func(conn, req int, r *http.Request, w *bufio.Writer) bool { return true })
		db := sdkClient(s.url(), ddbhttp.Client(), credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""))
		wire := ownConns(t, db, ddbhttp.Client())
		_, err := wire.TransactWriteItems(context.Background(), aPut())
		var maxAttempts *retry.MaxAttemptsError
		if !errors.As(err, &maxAttempts) {
			t.Errorf("%v, want the retryer's MaxAttemptsError", err)
		}
		if r := s.requests.Load(); r != 3 {
			t.Errorf("%d requests, want the retryer's 3", r)
		}
	})
}

// Chunked answers are read (a success, an item, an error the SDK reads),
// and the connection is kept; an answer saying Connection: close closes it.
func TestOwnConnsChunkedAndClose(t *testing.T) {
	t.Parallel()
	chunked := func(w *bufio.Writer, status string, body string) {
		fmt.Fprintf(w, "HTTP/1.1 %s\r\nContent-Type: application/x-amz-json-1.0\r\nTransfer-Encoding: chunked\r\n\r\n", status)
		half := len(body) / 2
		fmt.Fprintf(w, "%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n", half, body[:half], len(body)-half, body[half:])
	}
	s := newRawServer(t, func(conn, req int, r *http.Request, w *bufio.Writer) bool {
		switch r.Header.Get("X-Amz-Target") {
		case "DynamoDB_20120810.GetItem":
			chunked(w, "200 OK", account)
		default:
			if req == 2 {
				chunked(w, "400 Bad Request", conflict.body)
				return false
			}
			if req == 3 {
				_, _ = w.WriteString("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}")
				return false // the client closes it
			}
			chunked(w, "200 OK", "{}")
		}
		return false
	})
	wire := ownConns(t, oneAttempt(s.url()), ddbhttp.Client())
	ctx := context.Background()
	if _, err := wire.TransactWriteItems(ctx, aPut()); err != nil {
		t.Fatal(err)
	}
	out, err := wire.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("t"), Key: map[string]types.AttributeValue{"PK": str("a")}})
	if err != nil || len(out.Item) != 7 || !reflect.DeepEqual(out.Item["balance"], &types.AttributeValueMemberN{Value: "958"}) {
		t.Fatalf("a chunked item: %v (%v)", out, err)
	}
	_, err = wire.TransactWriteItems(ctx, aPut())
	var cancelled *types.TransactionCanceledException
	if !errors.As(err, &cancelled) || len(cancelled.CancellationReasons) != 2 {
		t.Fatalf("a chunked cancellation: %v", err)
	}
	if c := s.conns.Load(); c != 1 {
		t.Errorf("%d connections for three chunked answers, want 1", c)
	}
	if _, err := wire.TransactWriteItems(ctx, aPut()); err != nil { // answered with Connection: close
		t.Fatal(err)
	}
	if _, err := wire.TransactWriteItems(ctx, aPut()); err != nil {
		t.Fatal(err)
	}
	if c := s.conns.Load(); c != 2 {
		t.Errorf("%d connections after an answer with Connection: close, want 2", c)
	}
}

// An answer slower than the context's deadline ends the call with the
// deadline, at once; the connection is not used again.
func TestOwnConnsSlowAnswerPastDeadline(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	s := newRawServer(t, func(conn, req int, r *http.Request, w *bufio.Writer) bool {
		if conn == 0 && req == 1 {
			<-release
			return true
		}
		okAnswer(w, "{}")
		return false
	})
	defer close(release)
	wire := ownConns(t, oneAttempt(s.url()), ddbhttp.Client())
	if _, err := wire.TransactWriteItems(context.Background(), aPut()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := wire.TransactWriteItems(ctx, aPut())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v, want the context's deadline", err)
	}
	if _, err := wire.TransactWriteItems(context.Background(), aPut()); err != nil {
		t.Fatal(err)
	}
	if c := s.conns.Load(); c != 2 {
		t.Errorf("%d connections, want 2 (the one the deadline ended not used again)", c)
	}
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if _, err := wire.TransactWriteItems(ctx, aPut()); !errors.Is(err, context.Canceled) {
		t.Errorf("with a cancelled context: %v", err)
	}
}

// Over TLS (a test server's certificate, trusted through the HTTP client's
// TLS configuration, as a CA bundle would be), with a session token: the
// request's SigV4 signature is accepted by a server's check, and calls
// share one connection.
func TestOwnConnsTLS(t *testing.T) {
	t.Parallel()
	creds := aws.Credentials{AccessKeyID: "AKID", SecretAccessKey: "SECRET", SessionToken: "SESSION-TOKEN"}
	var bad atomic.Int64
	var mu sync.Mutex
	var sent []*http.Request
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.TLS == nil || !verify(t, r, body, creds) || r.Header.Get("X-Amz-Security-Token") != creds.SessionToken {
			bad.Add(1)
		}
		mu.Lock()
		sent = append(sent, r)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		_, _ = w.Write([]byte("{}"))
	}))
	var conns atomic.Int64
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	defer srv.Close()
	trusted := srv.Client().Transport.(*http.Transport).TLSClientConfig
	client := ddbhttp.Client().WithTransportOptions(func(tr *http.Transport) { tr.TLSClientConfig = trusted.Clone() })
	db := sdkClient(srv.URL, client, credentials.StaticCredentialsProvider{Value: creds})
	wire := ownConns(t, db, client)
	for range 3 {
		if _, err := wire.TransactWriteItems(context.Background(), aPut()); err != nil {
			t.Fatal(err)
		}
	}
	if n := bad.Load(); n != 0 {
		t.Errorf("%d requests not over TLS or not signed right", n)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for 3 calls, want 1", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sent) != 3 {
		t.Fatalf("%d requests, want 3", len(sent))
	}
	if sent[0].Host != strings.TrimPrefix(srv.URL, "https://") || sent[0].ProtoMajor != 1 {
		t.Errorf("the first request to host %q over HTTP/%d", sent[0].Host, sent[0].ProtoMajor)
	}
}

// With a proxy for the endpoint, or an HTTP client whose settings ddbwire
// cannot read, the requests go through the HTTP client.
func TestOwnConnsFallBack(t *testing.T) {
	t.Parallel()
	proxied := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "127.0.0.1:3128"})}}
	for _, c := range []struct {
		name   string
		client ddbwire.Doer
		own    bool
	}{
		{"the SDK's client", ddbhttp.Client(), true},
		{"an http.Client", &http.Client{}, true},
		{"a proxy", proxied, false},
		{"another Doer", &recorder{}, false},
	} {
		db := sdkClient("http://127.0.0.1:1", c.client, credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""))
		wire, err := ddbwire.New(context.Background(), db, ddbwire.Options{HTTPClient: c.client, OwnConns: true})
		if err != nil {
			t.Fatal(err)
		}
		if wire.OwnConns() != c.own {
			t.Errorf("%s: own connections %v, want %v", c.name, wire.OwnConns(), c.own)
		}
	}
}
