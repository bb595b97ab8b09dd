package console_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/shopspring/decimal"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/api"
	"github.com/pointledger/pointledger/internal/auth"
	"github.com/pointledger/pointledger/internal/console"
	"github.com/pointledger/pointledger/internal/dispatch"
	dispatchmemory "github.com/pointledger/pointledger/internal/dispatch/memory"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/servetest"
	"github.com/pointledger/pointledger/internal/webhook"
)

// site is ledgerd's API and the console on one port, as ledgerd serves
// them, on the memory store, with a log to search for tokens.
type site struct {
	url   string
	srv   *servetest.Server
	creds auth.DevCredentials
	now   *atomic.Int64 // the console's clock, unix seconds
	log   *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newSite(tb testing.TB, with ...func(*servetest.Options)) *site {
	tb.Helper()
	creds := auth.GenerateDev()
	a, err := auth.NewAuthenticator(creds.Credentials)
	if err != nil {
		tb.Fatal(err)
	}
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	o := servetest.Options{Auth: a, Log: log, Support: &auth.SupportLimits{
		PerAdjustment: decimal.RequireFromString("100"), PerDay: decimal.RequireFromString("150"), Allowances: auth.NewMemoryAllowances(),
	}}
	for _, f := range with {
		f(&o)
	}
	srv := servetest.New(tb, o)
	now := &atomic.Int64{}
	now.Store(time.Now().Unix())
	key, _ := a.DeriveKey("console test")
	c, err := console.New(console.Options{API: srv.Handler, Auth: a, Key: key, SessionTTL: time.Hour, Log: log,
		Now: func() time.Time { return time.Unix(now.Load(), 0) }})
	if err != nil {
		tb.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(console.Prefix, c)
	mux.Handle("/", srv.Handler)
	hs := httptest.NewServer(mux)
	tb.Cleanup(hs.Close)
	return &site{url: hs.URL, srv: srv, creds: creds, now: now, log: logs}
}

// browser is a cookie-keeping client that follows redirects.
type browser struct {
	tb     testing.TB
	s      *site
	client *http.Client
	csrf   string
	pages  []string // every body and Location seen, to search for tokens
}

func (s *site) browser(tb testing.TB) *browser {
	jar, _ := cookiejar.New(nil)
	b := &browser{tb: tb, s: s}
	b.client = &http.Client{Jar: jar, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		b.pages = append(b.pages, req.URL.String())
		return nil
	}}
	return b
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (b *browser) get(path string) (int, string) {
	b.tb.Helper()
	res, err := b.client.Get(b.s.url + path)
	if err != nil {
		b.tb.Fatal(err)
	}
	return b.read(res)
}

func (b *browser) read(res *http.Response) (int, string) {
	b.tb.Helper()
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		b.tb.Fatal(err)
	}
	b.pages = append(b.pages, string(body), res.Request.URL.String())
	if m := csrfField.FindStringSubmatch(string(body)); m != nil {
		b.csrf = m[1]
	}
	return res.StatusCode, string(body)
}

// post sends form with the page's CSRF token (unless form has one).
func (b *browser) post(path string, form url.Values) (int, string) {
	b.tb.Helper()
	if _, ok := form["csrf"]; !ok {
		form.Set("csrf", b.csrf)
	}
	res, err := b.client.PostForm(b.s.url+path, form)
	if err != nil {
		b.tb.Fatal(err)
	}
	return b.read(res)
}

func (b *browser) signIn(token string) (int, string) {
	b.tb.Helper()
	b.get("/console/signin")
	return b.post("/console/signin", url.Values{"token": {token}})
}

func (s *site) grant(tb testing.TB, user, amount, requestID, orderID string, md map[string]string) {
	tb.Helper()
	l := s.ledger()
	if _, err := l.Grant(context.Background(), connect.NewRequest(&pb.GrantRequest{UserId: user, Amount: amount, RequestId: requestID, OrderId: orderID, Metadata: md})); err != nil {
		tb.Fatal(err)
	}
}

func (s *site) ledger() interface {
	Grant(context.Context, *connect.Request[pb.GrantRequest]) (*connect.Response[pb.GrantResponse], error)
	ListEntries(context.Context, *connect.Request[pb.ListEntriesRequest]) (*connect.Response[pb.ListEntriesResponse], error)
} {
	return clientFor(s, s.creds.ServiceToken)
}

func field(body, name string) string {
	m := regexp.MustCompile(`data-field="` + name + `">([^<]*)<`).FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return m[1]
}

// An admin signs in, looks a user up, adjusts, and sees the entry, with
// the operator on it; signs out and is signed out.
func TestAdminAdjusts(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	s.grant(t, "alice", "10", "g1", "order-1", nil)
	b := s.browser(t)
	status, body := b.signIn(s.creds.AdminToken)
	if status != http.StatusOK || !strings.Contains(body, "dev-admin (admin)") {
		t.Fatalf("signed in: %d\n%s", status, body)
	}
	_, body = b.get("/console/users?user_id=alice")
	if field(body, "balance") != "10" || !strings.Contains(body, `data-version="1"`) {
		t.Fatalf("alice's page: balance %q\n%s", field(body, "balance"), body)
	}
	requestID := regexp.MustCompile(`name="request_id" value="([^"]+)"`).FindStringSubmatch(body)[1]
	status, body = b.post("/console/users/alice/adjust", url.Values{"user_id": {"alice"}, "amount": {"5"}, "reason": {"goodwill"}, "request_id": {requestID}})
	if status != http.StatusOK || field(body, "balance") != "15" || !strings.Contains(body, `data-version="2"`) {
		t.Fatalf("after adjusting: %d, balance %q\n%s", status, field(body, "balance"), body)
	}
	res, err := clientFor(s, s.creds.ServiceToken).ListEntries(context.Background(), connect.NewRequest(&pb.ListEntriesRequest{UserId: "alice"}))
	if err != nil {
		t.Fatal(err)
	}
	if e := res.Msg.Entries[1]; e.Metadata["operator"] != "dev-admin" || e.Reason != "goodwill" {
		t.Errorf("the console's adjustment: %v", e)
	}
	// The same form again (a double click) is a replay: nothing new.
	b.post("/console/users/alice/adjust", url.Values{"user_id": {"alice"}, "amount": {"5"}, "reason": {"goodwill"}, "request_id": {requestID}})
	if _, body = b.get("/console/users/alice"); field(body, "balance") != "15" {
		t.Errorf("after the same form twice: balance %q, want 15", field(body, "balance"))
	}
	// Refused: a debit past the balance, shown with its reason.
	status, body = b.post("/console/users/alice/adjust", url.Values{"user_id": {"alice"}, "amount": {"50"}, "debit": {"true"}, "reason": {"r"}, "request_id": {"x1"}})
	if status != http.StatusUnprocessableEntity || field(body, "reason") != "INSUFFICIENT_BALANCE" {
		t.Errorf("a debit past the balance: %d, reason %q", status, field(body, "reason"))
	}
	// Freeze, then unfreeze.
	b.post("/console/users/alice/status", url.Values{"user_id": {"alice"}, "status": {"frozen"}, "reason": {"chargeback"}})
	if _, body = b.get("/console/users/alice"); field(body, "status") != "frozen" {
		t.Errorf("after freezing: status %q", field(body, "status"))
	}
	b.post("/console/signout", url.Values{})
	if status, body = b.get("/console/users/alice"); !strings.Contains(body, `name="token"`) {
		t.Errorf("after signing out, alice's page: %d\n%s", status, body)
	}
}

// A support operator is refused past its limits, with the reason shown;
// the operator is on what it writes.
func TestSupportOverItsLimit(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	b := s.browser(t)
	b.signIn(s.creds.SupportToken)
	_, body := b.post("/console/users/bob/adjust", url.Values{"amount": {"100.01"}, "reason": {"r"}, "request_id": {"s1"}})
	if field(body, "reason") != auth.ReasonAdjustmentOverLimit {
		t.Errorf("over one adjustment's limit: reason %q", field(body, "reason"))
	}
	for i, want := range []string{"", auth.ReasonDailyLimitReached} {
		_, body = b.post("/console/users/bob/adjust", url.Values{"amount": {"100"}, "reason": {"r"}, "request_id": {"s" + string(rune('a'+i))}})
		if got := field(body, "reason"); got != want {
			t.Errorf("adjustment %d of 100 (150 a day): reason %q, want %q", i+1, got, want)
		}
	}
	if _, body = b.get("/console/users/bob"); field(body, "balance") != "100" || !strings.Contains(body, "operator=dev-support") {
		t.Errorf("bob after a support operator: balance %q\n%s", field(body, "balance"), body)
	}
}

// Only admin and support tokens sign in; a wrong one says so, without the
// token, and gets no session.
func TestWhoMaySignIn(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	userToken, err := auth.MintUserToken(s.creds.Credentials, "alice", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for name, token := range map[string]string{"user": userToken, "service": s.creds.ServiceToken, "peer": s.creds.PeerToken, "unknown": auth.NewSecret(), "empty": ""} {
		b := s.browser(t)
		status, body := b.signIn(token)
		if status != http.StatusUnauthorized || !strings.Contains(body, "cannot sign in") || (token != "" && strings.Contains(body, token)) {
			t.Errorf("%s token: %d\n%s", name, status, body)
		}
		if status, _ := b.get("/console/users/alice"); status != http.StatusOK || b.pages[len(b.pages)-1] != s.url+"/console/signin" {
			t.Errorf("%s token: a user page after the refused sign-in: %d at %s, want the sign-in page", name, status, b.pages[len(b.pages)-1])
		}
	}
}

// A change without the session's CSRF token, or from another origin,
// writes nothing.
func TestCSRF(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	b := s.browser(t)
	b.signIn(s.creds.AdminToken)
	before := s.srv.Snapshot()
	for name, form := range map[string]url.Values{
		"no token":    {"amount": {"5"}, "reason": {"r"}, "request_id": {"c1"}, "csrf": {""}},
		"wrong token": {"amount": {"5"}, "reason": {"r"}, "request_id": {"c2"}, "csrf": {"x" + b.csrf}},
	} {
		if status, _ := b.post("/console/users/alice/adjust", form); status != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", name, status)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, s.url+"/console/users/alice/adjust",
		strings.NewReader(url.Values{"amount": {"5"}, "reason": {"r"}, "request_id": {"c3"}, "csrf": {b.csrf}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://evil.example")
	res, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("from another origin: %d, want 403", res.StatusCode)
	}
	// Signing in needs the sign-in form's token too.
	other := s.browser(t)
	if status, _ := other.post("/console/signin", url.Values{"token": {s.creds.AdminToken}}); status != http.StatusForbidden {
		t.Errorf("a sign-in without the form's token: %d, want 403", status)
	}
	added, changed, removed := before.Diff(s.srv.Snapshot())
	if len(added)+len(changed)+len(removed) > 0 {
		t.Errorf("refused changes wrote %v %v %v", added, changed, removed)
	}
}

// What users and clients wrote is text on the page, never markup; the
// pages forbid script and framing, and the cookie is HttpOnly and
// SameSite=Strict; the token is in no URL, page or log line.
func TestHostileTextAndHeaders(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	hostile := `"><script>alert(1)</script><img src=x onerror=alert(2)>`
	s.grant(t, "mallory", "10", "g-"+"x", hostile, map[string]string{"note": hostile})
	b := s.browser(t)
	b.get("/console/signin")
	res, err := b.client.PostForm(s.url+"/console/signin", url.Values{"token": {s.creds.AdminToken}, "csrf": {b.csrf}})
	if err != nil {
		t.Fatal(err)
	}
	b.read(res)
	u, _ := url.Parse(s.url + "/console/")
	cookies := b.client.Jar.Cookies(u)
	if len(cookies) != 1 {
		t.Fatalf("cookies after sign-in: %v", cookies)
	}
	// The jar keeps names and values only: read the flags from the answer.
	b2 := s.browser(t)
	b2.get("/console/signin")
	noRedirect := &http.Client{Jar: b2.client.Jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err = noRedirect.PostForm(s.url+"/console/signin", url.Values{"token": {s.creds.AdminToken}, "csrf": {b2.csrf}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	var session *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == "pl_console" {
			session = c
		}
	}
	if session == nil || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode || session.Path != "/console/" || session.MaxAge != 3600 {
		t.Errorf("session cookie: %+v, want HttpOnly, SameSite=Strict, Path=/console/, an hour", session)
	}
	if strings.Contains(session.Value, s.creds.AdminToken) || strings.Contains(res.Header.Get("Location"), s.creds.AdminToken) {
		t.Error("the token is readable in the cookie or the redirect")
	}

	b.post("/console/users/mallory/adjust", url.Values{"amount": {"1"}, "reason": {hostile}, "request_id": {"h1"}})
	_, body := b.get("/console/users/mallory")
	for _, raw := range []string{"<script>alert(1)", "<img src=x"} {
		if strings.Contains(body, raw) {
			t.Errorf("the page has %q unescaped", raw)
		}
	}
	if !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Errorf("the hostile order id is not on the page as text:\n%s", body)
	}
	res, err = b.client.Get(s.url + "/console/users/mallory")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "script-src") {
		t.Errorf("CSP: %q", csp)
	}
	// Nothing the console showed or was sent to, and nothing logged,
	// has the token.
	b.pages = append(b.pages, s.log.String())
	for _, p := range b.pages {
		if strings.Contains(p, s.creds.AdminToken) {
			t.Fatalf("the token is in a page, URL or log:\n%.400s", p)
		}
	}
	if !strings.Contains(s.log.String(), "console: signed in") {
		t.Error("the sign-in was not logged")
	}
	// A refusal of the API's authentication, logged with the browser's
	// address.
	support := s.browser(t)
	support.signIn(s.creds.SupportToken)
	support.post("/console/budgets/close", url.Values{"budget_id": {"none"}})
	if !regexp.MustCompile(`rpc refused.*remote_addr=127\.0\.0\.1:\d+`).MatchString(s.log.String()) {
		t.Errorf("the API's log names no browser address:\n%s", s.log.String())
	}
}

// A session ends: after its time, the console asks to sign in again.
func TestSessionExpires(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	b := s.browser(t)
	b.signIn(s.creds.AdminToken)
	if _, body := b.get("/console/users/alice"); !strings.Contains(body, `data-field="balance"`) {
		t.Fatal("not signed in")
	}
	s.now.Add(3601)
	if _, body := b.get("/console/users/alice"); !strings.Contains(body, `name="token"`) {
		t.Error("an hour later, still signed in")
	}
	if status, _ := b.post("/console/users/alice/adjust", url.Values{"amount": {"1"}, "reason": {"r"}, "request_id": {"late"}}); status != http.StatusUnauthorized {
		t.Errorf("a change after the session ended: %d, want 401", status)
	}
}

var _ = api.HandlerOptions

func clientFor(s *site, token string) pointledgerv1connect.LedgerServiceClient {
	return pointledgerv1connect.NewLedgerServiceClient(http.DefaultClient, s.url, connect.WithInterceptors(auth.Bearer(token)))
}

// Budgets: what is left as a bar, a top-up and a close through the forms,
// each the admin's (a support operator's is refused with its reason); the
// books: a reconciliation's report with its charts.
func TestBudgetsAndBooks(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	budgets := pointledgerv1connect.NewBudgetServiceClient(http.DefaultClient, s.url, connect.WithInterceptors(auth.Bearer(s.creds.AdminToken)))
	if _, err := budgets.CreateBudget(context.Background(), connect.NewRequest(&pb.CreateBudgetRequest{BudgetId: "spring", Amount: "1000", RequestId: "c", Description: "<b>spring</b> campaign"})); err != nil {
		t.Fatal(err)
	}
	g := pointledgerv1connect.NewLedgerServiceClient(http.DefaultClient, s.url, connect.WithInterceptors(auth.Bearer(s.creds.ServiceToken)))
	if _, err := g.Grant(context.Background(), connect.NewRequest(&pb.GrantRequest{UserId: "alice", Amount: "250", RequestId: "g", BudgetId: "spring",
		Ttl: durationpb.New(30 * 24 * time.Hour)})); err != nil {
		t.Fatal(err)
	}
	support := s.browser(t)
	support.signIn(s.creds.SupportToken)
	_, body := support.get("/console/budgets")
	if !strings.Contains(body, `data-budget="spring"`) || !strings.Contains(body, `width="75.0"`) || strings.Contains(body, "<b>spring") {
		t.Errorf("the budgets page: want spring with 75%% left as a bar, its description as text\n%s", body)
	}
	status, body := support.post("/console/budgets/topup", url.Values{"budget_id": {"spring"}, "amount": {"100"}, "request_id": {"t1"}})
	if status != http.StatusForbidden || field(body, "reason") != "ROLE_NOT_ALLOWED" {
		t.Errorf("a support operator tops up: %d %q", status, field(body, "reason"))
	}
	admin := s.browser(t)
	admin.signIn(s.creds.AdminToken)
	if _, body = admin.post("/console/budgets/topup", url.Values{"budget_id": {"spring"}, "amount": {"1000"}, "request_id": {"t2"}}); !strings.Contains(body, "topped up") ||
		field(body, "remaining") != "1750" {
		t.Errorf("after a top-up of 1000: remaining %q\n%s", field(body, "remaining"), body)
	}
	if _, body = admin.post("/console/budgets/close", url.Values{"budget_id": {"spring"}}); !strings.Contains(body, "<td>closed</td>") {
		t.Errorf("after closing:\n%s", body)
	}
	_, body = support.post("/console/books/reconcile", url.Values{"user_id": {""}})
	if field(body, "clean") != "Clean: the books balance." || !strings.Contains(body, "Liability by month") {
		t.Errorf("the books after a reconciliation:\n%s", body)
	}
	// Webhooks: this server keeps no endpoints; the page says so with
	// the API's reason.
	if status, body = admin.get("/console/webhooks"); field(body, "reason") != "NOT_CONFIGURED" {
		t.Errorf("webhooks without endpoints' store: %d %q", status, field(body, "reason"))
	}
}

// deliveries stands in for the dispatcher: one failed delivery to show,
// and the redeliveries asked of it.
type deliveries struct {
	mu     sync.Mutex
	failed []dispatch.Delivery
	asked  []dispatch.Redelivery
}

func (d *deliveries) ListDeliveries(_ context.Context, q dispatch.DeliveryQuery) ([]dispatch.Delivery, string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []dispatch.Delivery
	for _, x := range d.failed {
		if x.EndpointID == q.EndpointID {
			out = append(out, x)
		}
	}
	return out, "", nil
}

func (d *deliveries) Redeliver(_ context.Context, r dispatch.Redelivery) (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.asked = append(d.asked, r)
	return 3, nil
}

// The webhooks page lists each endpoint's failed deliveries, their errors
// as text, and sends one again from its version (an admin's; a support
// operator reads, and is refused the button's call).
func TestWebhooksPage(t *testing.T) {
	t.Parallel()
	d := &deliveries{}
	s := newSite(t, func(o *servetest.Options) {
		o.Webhooks, o.Deliveries = dispatchmemory.New(nil), d
		o.Webhook.URLPolicy = webhook.URLPolicy{AllowHTTP: true, AllowLoopback: true}
	})
	w := pointledgerv1connect.NewWebhookServiceClient(http.DefaultClient, s.url, connect.WithInterceptors(auth.Bearer(s.creds.AdminToken)))
	ep, err := w.CreateWebhookEndpoint(context.Background(), connect.NewRequest(&pb.CreateWebhookEndpointRequest{Url: "http://127.0.0.1:9/hook", EventTypes: []string{"*"}, Description: "<i>crm</i>"}))
	if err != nil {
		t.Fatal(err)
	}
	id := ep.Msg.Endpoint.EndpointId
	d.failed = []dispatch.Delivery{{EndpointID: id, EventID: "01KAXQ4V0SR0Z7Y2M3N4P5Q6R8", Type: ledger.EventPointsSpent, UserID: "alice", Version: 7,
		State: dispatch.DeliveryFailed, Attempts: 8, LastStatusCode: 502, LastError: "<script>alert(1)</script> bad gateway"}}
	support := s.browser(t)
	support.signIn(s.creds.SupportToken)
	_, body := support.get("/console/webhooks")
	if !strings.Contains(body, `data-endpoint="`+id+`"`) || !strings.Contains(body, "01KAXQ4V0SR0Z7Y2M3N4P5Q6R8") || strings.Contains(body, "<script>") || strings.Contains(body, "<i>crm") {
		t.Errorf("the webhooks page: want the endpoint, its failed delivery, everything as text\n%s", body)
	}
	if status, body := support.post("/console/webhooks/redeliver", url.Values{"endpoint_id": {id}, "user_id": {"alice"}, "from_version": {"7"}}); status != http.StatusForbidden ||
		field(body, "reason") != "ROLE_NOT_ALLOWED" {
		t.Errorf("a support operator redelivers: %d %q", status, field(body, "reason"))
	}
	admin := s.browser(t)
	admin.signIn(s.creds.AdminToken)
	admin.get("/console/webhooks")
	if _, body := admin.post("/console/webhooks/redeliver", url.Values{"endpoint_id": {id}, "user_id": {"alice"}, "from_version": {"7"}}); !strings.Contains(body, "Queued again: 3 events.") {
		t.Errorf("after redelivering:\n%s", body)
	}
	want := []dispatch.Redelivery{{EndpointID: id, UserID: "alice", FromVersion: 7}}
	if fmt.Sprint(d.asked) != fmt.Sprint(want) {
		t.Errorf("the dispatcher was asked %v, want %v", d.asked, want)
	}
}

// Point kinds through the console: an admin creates and changes a kind
// (its hostile description shown as text), a support operator reads and
// is refused the change.
func TestKindsPage(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	hostile := `"><script>alert(1)</script><img src=x onerror=alert(2)>`
	admin := s.browser(t)
	admin.signIn(s.creds.AdminToken)
	_, body := admin.get("/console/kinds")
	if field(body, "kind_id") != "standard" || !strings.Contains(body, `id="create-kind"`) {
		t.Fatalf("the kinds page: want standard and the create form\n%s", body)
	}
	createID := regexp.MustCompile(`name="request_id" value="([^"]+)"`).FindStringSubmatch(body)[1]
	status, body := admin.post("/console/kinds/create", url.Values{"kind_id": {"limited"}, "description": {hostile}, "priority": {"10"},
		"merchants": {"m1, m2"}, "request_id": {createID}})
	if status != http.StatusOK || !strings.Contains(body, `data-kind="limited"`) || !strings.Contains(body, "<td data-field=\"merchants\">m1, m2</td>") {
		t.Fatalf("after creating limited: %d\n%s", status, body)
	}
	for _, raw := range []string{"<script>alert(1)", "<img src=x"} {
		if strings.Contains(body, raw) {
			t.Errorf("the kinds page has the description's %q unescaped", raw)
		}
	}
	if !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Errorf("the hostile description is not on the page as text:\n%s", body)
	}
	if status, body = admin.post("/console/kinds/create", url.Values{"kind_id": {"bad kind!"}, "request_id": {"k-bad"}}); status != http.StatusUnprocessableEntity || field(body, "reason") != "INVALID_KIND" {
		t.Errorf("a kind id that is no id: %d %q", status, field(body, "reason"))
	}
	updateID := regexp.MustCompile(`id="update-limited">[^$]*?name="request_id" value="([^"]+)"`).FindStringSubmatch(body)
	if updateID == nil {
		t.Fatalf("no update form for limited\n%s", body)
	}
	// Unrestricted now: any merchant, so that a purchase without one draws it.
	if _, body = admin.post("/console/kinds/update", url.Values{"kind_id": {"limited"}, "description": {"spring"}, "priority": {"10"},
		"categories": {""}, "excluded_categories": {"tobacco,\nalcohol"}, "request_id": {updateID[1]}}); !strings.Contains(body, "The kind is changed") ||
		!strings.Contains(body, `<td data-field="excluded_categories">alcohol, tobacco</td>`) || strings.Contains(body, "m1, m2</td>") {
		t.Errorf("after changing limited:\n%s", body)
	}
	support := s.browser(t)
	support.signIn(s.creds.SupportToken)
	if _, body = support.get("/console/kinds"); strings.Contains(body, `id="create-kind"`) || !strings.Contains(body, `data-kind="limited"`) {
		t.Errorf("a support operator's kinds page: want the kinds, no forms\n%s", body)
	}
	if status, body = support.post("/console/kinds/create", url.Values{"kind_id": {"gold"}, "request_id": {"k-s"}}); status != http.StatusForbidden || field(body, "reason") != "ROLE_NOT_ALLOWED" {
		t.Errorf("a support operator creates a kind: %d %q", status, field(body, "reason"))
	}
}

// The user page shows each kind with its hooks, spendable, an adjustment
// of a kind, draws by kind; a month's statement with its totals and
// entries, paged.
func TestUserPageKindsAndStatement(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	kinds := pointledgerv1connect.NewPointKindServiceClient(http.DefaultClient, s.url, connect.WithInterceptors(auth.Bearer(s.creds.AdminToken)))
	if _, err := kinds.CreatePointKind(context.Background(), connect.NewRequest(&pb.CreatePointKindRequest{KindId: "limited", Priority: proto.Int32(10), RequestId: "k1"})); err != nil {
		t.Fatal(err)
	}
	admin := s.browser(t)
	admin.signIn(s.creds.AdminToken)
	// An adjustment of a kind, then a purchase drawing it first.
	s.grant(t, "alice", "10", "g1", "", nil)
	_, body := admin.get("/console/users/alice")
	if !strings.Contains(body, `<option value="limited">limited</option>`) {
		t.Errorf("the adjust form offers no kind limited\n%s", body)
	}
	if _, body = admin.post("/console/users/alice/adjust", url.Values{"amount": {"30"}, "kind": {"limited"}, "reason": {"spring"}, "request_id": {"a1"}}); field(body, "balance") != "40" {
		t.Fatalf("after adjusting 30 limited: balance %q\n%s", field(body, "balance"), body)
	}
	if status, body := admin.post("/console/users/alice/adjust", url.Values{"amount": {"1"}, "kind": {"gold"}, "reason": {"r"}, "request_id": {"a2"}}); status != http.StatusNotFound || field(body, "reason") != "KIND_NOT_FOUND" {
		t.Errorf("an adjustment of a kind there is none of: %d %q", status, field(body, "reason"))
	}
	l := clientFor(s, s.creds.ServiceToken)
	if _, err := l.Purchase(context.Background(), connect.NewRequest(&pb.PurchaseRequest{UserId: "alice", Amount: "35", RequestId: "p1", OrderId: "o1"})); err != nil {
		t.Fatal(err)
	}
	_, body = admin.get("/console/users/alice")
	kindRow := func(kind string) []string {
		m := regexp.MustCompile(`<tr data-kind="` + kind + `"><td data-field="kind">` + kind + `</td><td class="amount" data-field="kind-balance">([^<]*)</td><td class="amount" data-field="kind-available">([^<]*)</td><td class="amount" data-field="kind-held">([^<]*)</td><td class="amount" data-field="kind-pending">([^<]*)</td>`).FindStringSubmatch(body)
		if m == nil {
			return nil
		}
		return m[1:]
	}
	if got := kindRow("standard"); fmt.Sprint(got) != "[5 5 0 0]" {
		t.Errorf("standard's row %v, want balance, available 5, held, pending 0\n%s", got, body)
	}
	if got := kindRow("limited"); got != nil {
		t.Errorf("limited's row %v: all spent, want none", got)
	}
	if field(body, "spendable") != "5" || field(body, "balance") != "5" {
		t.Errorf("spendable %q, balance %q; want 5, 5", field(body, "spendable"), field(body, "balance"))
	}
	if !strings.Contains(body, "30 limited never expiring; 5 standard never expiring") {
		t.Errorf("the purchase's draws by kind are not shown\n%s", body)
	}

	// The month's statement: 10 granted, 30 adjusted, 35 spent; then more
	// entries than a page.
	for i := range console.EntriesPerPage {
		s.grant(t, "alice", "1", fmt.Sprintf("more-%d", i), "", nil)
	}
	entries, err := l.ListEntries(context.Background(), connect.NewRequest(&pb.ListEntriesRequest{UserId: "alice", PageSize: 1}))
	if err != nil {
		t.Fatal(err)
	}
	month := entries.Msg.Entries[0].CreateTime.AsTime().UTC().Format("2006-01")
	status, body := admin.get("/console/users/alice?statement=" + month)
	if status != http.StatusOK || field(body, "opening_balance") != "0" || field(body, "closing_balance") != "55" || field(body, "granted") != "60" ||
		field(body, "adjusted") != "30" || field(body, "spent") != "-35" || field(body, "unrecorded_change") != "0" {
		t.Errorf("the statement of %s: %d, opening %q closing %q granted %q adjusted %q spent %q unrecorded %q\n%s", month, status, field(body, "opening_balance"),
			field(body, "closing_balance"), field(body, "granted"), field(body, "adjusted"), field(body, "spent"), field(body, "unrecorded_change"), body)
	}
	stmt := body[strings.Index(body, `<section class="statement"`):]
	if !strings.Contains(stmt, `data-version="1"`) || strings.Contains(stmt, `data-version="53"`) {
		t.Errorf("the statement's first page: want entries 1 to 50, oldest first\n%s", stmt)
	}
	next := regexp.MustCompile(`href="(/console/users/alice\?statement=[^"]+statement_page_token=[^"#]+)`).FindStringSubmatch(stmt)
	if next == nil {
		t.Fatalf("the statement has no link to its next page\n%s", stmt)
	}
	_, body = admin.get(strings.ReplaceAll(next[1], "&amp;", "&"))
	stmt = body[strings.Index(body, `<section class="statement"`):]
	if !strings.Contains(stmt, `data-version="53"`) || strings.Contains(stmt, `data-version="1"`) || field(body, "closing_balance") != "55" {
		t.Errorf("the statement's second page: want entries 51 to 53, the same totals\n%s", stmt)
	}
	if _, body = admin.get("/console/users/alice?statement=2001-01"); field(body, "closing_balance") != "0" || !strings.Contains(body, "No entries in the month.") {
		t.Errorf("the statement of a month before alice:\n%s", body)
	}
	hostile := `"><script>alert(1)</script>`
	if status, body = admin.get("/console/users/alice?statement=" + url.QueryEscape(hostile)); status != http.StatusUnprocessableEntity ||
		!strings.Contains(body, "YYYY-MM") || strings.Contains(body, "<script>alert(1)") {
		t.Errorf("a month that is no month: %d\n%s", status, body)
	}
}
