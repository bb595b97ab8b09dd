package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/internal/auth"
	"github.com/pointledger/pointledger/internal/dynamotest"
)

// BenchmarkPurchasePath is ledgerd's whole purchase path in one process:
// the API's handler as serve builds it (authentication and the rate
// limiter, the metrics, request logging, Connect's decoding), the write
// path's decision and its TransactWriteItems to DynamoDB Local as serve
// sends them (through internal/ddbwire, with -lean-writes' default: its
// signing, the SDK's retryer, the metrics hook, with -lean-conns' default
// its own connections with ddbhttp's client's settings; LEDGER_LEAN_WRITES
// and LEDGER_LEAN_CONNS in the environment apply). The load tool calls as here: Connect, the protobuf encoding, a
// service token, purchases of 1 spread over 1000 users granted first
// (`uniform`). A request goes to the handler without TCP on the API's
// side, so what is counted is ledgerd's work but for net/http's reading of
// a connection; the benchmark's own (a request, its body) is a few
// allocations of it.
//
// cpu-ns/op is this process's CPU (user and system) per purchase, the
// emulator's not included; allocs/op and B/op count every goroutine's. Run:
//
//	go test -run '^$' -bench PurchasePath -benchmem -benchtime 3000x ./cmd/ledgerd/
func BenchmarkPurchasePath(b *testing.B) {
	for _, clients := range []int{1, 16} {
		b.Run("clients="+strconv.Itoa(clients), func(b *testing.B) {
			h, token := benchLedgerd(b)
			users := benchUsers(b, h, token, 1000)
			var next atomic.Int64
			var failed atomic.Value
			reportCPU := dynamotest.CPU(b)
			b.ResetTimer()
			var wg sync.WaitGroup
			for range clients {
				wg.Go(func() {
					for {
						i := next.Add(1) - 1
						if i >= int64(b.N) {
							return
						}
						req := &pb.PurchaseRequest{UserId: users[i%int64(len(users))], RequestId: "p-" + strconv.FormatInt(i, 10), Amount: "1", OrderId: "o"}
						if err := benchCall(h, token, "Purchase", req); err != nil {
							failed.CompareAndSwap(nil, err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			if err, _ := failed.Load().(error); err != nil {
				b.Fatal(err)
			}
			reportCPU()
		})
	}
}

// benchLedgerd is serve's API handler, built by serve's own steps on fresh
// tables of a fresh DynamoDB Local, with no projector, dispatcher or
// sweeper (as the load test's `-webhooks=false` with LEDGER_PROJECTOR=false),
// and a service token for it.
func benchLedgerd(b *testing.B) (http.Handler, string) {
	b.Helper()
	env := dynamotest.NewFresh(b)
	creds := auth.GenerateDev()
	vars := map[string]string{
		"LEDGER_DYNAMODB_ENDPOINT": env.Endpoint, "LEDGER_TABLE_PREFIX": env.Prefix, "LEDGER_AUTH_JSON": string(creds.Credentials.JSON()),
		"LEDGER_LOG_LEVEL": "warn", "LEDGER_PROJECTOR": "false", "LEDGER_DISPATCHER": "false",
	}
	// The write path's settings from the environment, to compare them in
	// one binary (LEDGER_LEAN_CONNS=false: through net/http's Transport).
	for _, k := range []string{"LEDGER_LEAN_WRITES", "LEDGER_LEAN_CONNS"} {
		if v := os.Getenv(k); v != "" {
			vars[k] = v
		}
	}
	getenv := func(k string) string { return vars[k] }
	c, err := serveFlags(nil, getenv, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	log, err := c.logger(io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	setGCPercent(os.Getenv)
	authn, err := c.auth.authenticator(getenv)
	if err != nil {
		b.Fatal(err)
	}
	if c.pageTokenKey, err = servedPageTokenKey(authn, getenv); err != nil {
		b.Fatal(err)
	}
	c.metrics = servedMetrics()
	parts, err := c.parts(context.Background(), getenv, log)
	if err != nil {
		b.Fatal(err)
	}
	dl, err := c.newDelivery(parts, c.delivery, false, log)
	if err != nil {
		b.Fatal(err)
	}
	health := &cachedPing{store: parts.store, ttl: time.Second}
	h, err := c.apiHandler(parts, nil, dl.dispatcher, health, authn, auth.SupportLimits{}, nil, log)
	if err != nil {
		b.Fatal(err)
	}
	return h, creds.ServiceToken
}

// benchUsers grants n users points enough for any benchmark.
func benchUsers(b *testing.B, h http.Handler, token string, n int) []string {
	b.Helper()
	users := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	for i := range users {
		users[i] = fmt.Sprintf("bench-user-%d", i)
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs <- benchCall(h, token, "Grant", &pb.GrantRequest{UserId: users[i], RequestId: "g-" + users[i], Amount: "100000000"})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	return users
}

// benchCall sends msg to LedgerService's method as the load tool does
// (Connect, application/proto) and wants a 200.
func benchCall(h http.Handler, token, method string, msg proto.Message) error {
	body, err := proto.Marshal(msg)
	if err != nil {
		return err
	}
	req, err := http.NewRequest(http.MethodPost, "http://ledgerd/pointledger.v1.LedgerService/"+method, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/proto")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("Authorization", "Bearer "+token)
	w := &benchWriter{header: http.Header{}}
	h.ServeHTTP(w, req)
	if w.status != 0 && w.status != http.StatusOK {
		return fmt.Errorf("%s: HTTP %d: %s", method, w.status, w.body.String())
	}
	return nil
}

// benchWriter keeps what an answer needs for the check and little else.
type benchWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *benchWriter) Header() http.Header { return w.header }

func (w *benchWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *benchWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	if w.status != http.StatusOK {
		return w.body.Write(p)
	}
	return len(p), nil
}
