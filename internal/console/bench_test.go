package console_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/api"
	"github.com/pointledger/pointledger/internal/auth"
	"github.com/pointledger/pointledger/internal/console"
	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/history"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/internal/projection"
	"github.com/pointledger/pointledger/internal/reconcile"
)

func TestMain(m *testing.M) { dynamotest.MainWithoutStreams(m) }

// The user page of a user with 10,000 entries, on DynamoDB Local: the
// server's time to answer GET /console/users/{user_id} (the console and the
// API's handlers in this process, called without a socket: GetBalance,
// ListHistory's newest 50, ListHolds), then the next page through its
// page_token. Run:
//
//	go test -run '^$' -bench ConsoleUserPage -benchtime 20x ./internal/console/
func BenchmarkConsoleUserPage(b *testing.B) {
	const user, entries = "busy-user", 10_000
	env := dynamotest.NewFresh(b)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	store := dynamo.New(env.Client, dynamo.Options{Table: env.Ledger, Logger: log})
	hist := projection.NewHistory(env.Client, env.History, store, nil)
	ctx := context.Background()
	// Grants from 16 writers at once: the store commits them in groups.
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < entries; i += 16 {
				m, err := ledger.NewMutation(ledger.EntryGrant, ledger.Request{UserID: user, RequestID: fmt.Sprintf("g%d", i), Amount: "1", OrderID: fmt.Sprintf("order-%d", i)}, ledger.DefaultScale)
				if err == nil {
					_, err = store.Apply(ctx, m)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	if err := hist.Rebuild(ctx, user); err != nil {
		b.Fatal(err)
	}

	creds := auth.GenerateDev()
	a, err := auth.NewAuthenticator(creds.Credentials)
	if err != nil {
		b.Fatal(err)
	}
	c, err := console.New(console.Options{API: apiOn(store, hist, a, env, log), Auth: a, Log: log})
	if err != nil {
		b.Fatal(err)
	}
	cookie := signedIn(b, c, creds.AdminToken)
	get := func(path string) string {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.AddCookie(cookie)
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("GET %s: %d\n%.2000s", path, rec.Code, rec.Body)
		}
		return rec.Body.String()
	}
	page := get("/console/users/" + user)
	if n := strings.Count(page, "data-version="); n != console.EntriesPerPage || !strings.Contains(page, fmt.Sprintf(`data-version="%d"`, entries)) {
		b.Fatalf("the first page has %d entries; want %d, newest (%d) first", n, console.EntriesPerPage, entries)
	}
	next := regexp.MustCompile(`page_token=([^"]+)" rel="next"`).FindStringSubmatch(page)
	if next == nil {
		b.Fatal("the first page links no next page")
	}
	nextPath := "/console/users/" + user + "?page_token=" + next[1]
	if p2 := get(strings.ReplaceAll(nextPath, "&amp;", "&")); !strings.Contains(p2, fmt.Sprintf(`data-version="%d"`, entries-console.EntriesPerPage)) {
		b.Fatal("the second page does not go on from the first")
	}

	var first, second time.Duration
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		get("/console/users/" + user)
		first += time.Since(start)
		start = time.Now()
		get(strings.ReplaceAll(nextPath, "&amp;", "&"))
		second += time.Since(start)
	}
	b.ReportMetric(float64(first)/float64(time.Millisecond)/float64(b.N), "ms/first-page")
	b.ReportMetric(float64(second)/float64(time.Millisecond)/float64(b.N), "ms/next-page")
}

// apiOn is ledgerd's API on the DynamoDB store, behind its authentication,
// as cmd/ledgerd wires it (without webhooks and budgets' growth).
func apiOn(store *dynamo.Ledger, hist *projection.History, a *auth.Authenticator, env *dynamotest.Env, log *slog.Logger) http.Handler {
	options := append(api.HandlerOptions(log), connect.WithInterceptors(auth.Interceptor()))
	protect := func(h http.Handler) http.Handler { return auth.Middleware(a, nil, log, h, options...) }
	mux := http.NewServeMux()
	path, h := pointledgerv1connect.NewLedgerServiceHandler(api.NewLedgerService(store, hist, ledger.DefaultScale, log), options...)
	mux.Handle(path, protect(h))
	none := func() (history.ProjectorStatus, bool) { return history.ProjectorStatus{}, false }
	admin := api.NewAdminService(store, hist, reconcile.New(store, hist, projection.NewLeaseTable(env.Client, env.Leases, nil)), none, ledger.DefaultScale, log)
	path, h = pointledgerv1connect.NewAdminServiceHandler(admin, options...)
	mux.Handle(path, protect(h))
	return mux
}

// signedIn signs in to c with token and returns the session's cookie.
func signedIn(tb testing.TB, c http.Handler, token string) *http.Cookie {
	tb.Helper()
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/console/signin", nil))
	form := rec.Result().Cookies()[0]
	req := httptest.NewRequest(http.MethodPost, "/console/signin", strings.NewReader(url.Values{"token": {token}, "csrf": {form.Value}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(form)
	rec = httptest.NewRecorder()
	c.ServeHTTP(rec, req)
	for _, ck := range rec.Result().Cookies() {
		if ck.Name == "pl_console" && ck.Value != "" {
			return ck
		}
	}
	tb.Fatalf("sign-in: %d %s", rec.Code, rec.Body)
	return nil
}
