package auth_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/shopspring/decimal"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/api"
	"github.com/pointledger/pointledger/internal/auth"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/memory"
	"github.com/pointledger/pointledger/internal/servetest"
)

// server is ledgerd's API behind auth, as `ledgerd serve` wires it, on a
// fresh in-memory ledger (servetest).
type server struct {
	url   string
	srv   *servetest.Server
	creds auth.DevCredentials
	h2c   *http.Client
}

func newServer(tb testing.TB, a *auth.Authenticator, creds auth.DevCredentials, limiter *auth.Limiter) *server {
	tb.Helper()
	srv := servetest.New(tb, servetest.Options{Auth: a, Limiter: limiter, Support: &auth.SupportLimits{
		PerAdjustment: decimal.RequireFromString("100"), PerDay: decimal.RequireFromString("1000"), Allowances: auth.NewMemoryAllowances(),
	}})
	return &server{url: srv.URL, srv: srv, creds: creds, h2c: srv.H2C}
}

func newSecureServer(tb testing.TB) *server {
	tb.Helper()
	creds := auth.GenerateDev()
	a, err := auth.NewAuthenticator(creds.Credentials)
	if err != nil {
		tb.Fatal(err)
	}
	return newServer(tb, a, creds, nil)
}

func (s *server) userToken(tb testing.TB, user string, ttl time.Duration) string {
	tb.Helper()
	tok, err := auth.MintUserToken(s.creds.Credentials, user, ttl, time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

// clients send token ("" for none) over protocol.
func (s *server) clients(token string, protocol ...connect.ClientOption) (pointledgerv1connect.LedgerServiceClient, pointledgerv1connect.AdminServiceClient) {
	opts := append([]connect.ClientOption{}, protocol...)
	if token != "" {
		opts = append(opts, connect.WithInterceptors(auth.Bearer(token)))
	}
	return pointledgerv1connect.NewLedgerServiceClient(s.h2c, s.url, opts...), pointledgerv1connect.NewAdminServiceClient(s.h2c, s.url, opts...)
}

// written says what the store and the history hold that they did not
// before, or hold otherwise ("" if nothing).
func (s *server) written(before memory.Snapshot) string {
	added, changed, removed := before.Diff(s.srv.Snapshot())
	if len(added)+len(changed)+len(removed) == 0 {
		return ""
	}
	return fmt.Sprintf("added %v, changed %v, removed %v", added, changed, removed)
}

func reason(err error) string {
	_, info := servetest.ErrorInfo(err)
	return info.GetReason()
}

// setup gives alice 100 points and a purchase of 50 ("setup-p") to refund.
func (s *server) setup(tb testing.TB, token string) {
	tb.Helper()
	ctx := context.Background()
	svc, _ := s.clients(token)
	if _, err := svc.Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: "alice", Amount: "100", RequestId: "setup-g"})); err != nil {
		tb.Fatal(err)
	}
	if _, err := svc.Purchase(ctx, connect.NewRequest(&pb.PurchaseRequest{UserId: "alice", Amount: "50", RequestId: "setup-p"})); err != nil {
		tb.Fatal(err)
	}
}

// call makes one valid call of a procedure for user alice; id makes its
// request id unique.
type call func(ctx context.Context, l pointledgerv1connect.LedgerServiceClient, a pointledgerv1connect.AdminServiceClient, id string) error

// A user token for another user's id is refused with its own reason, also
// for a purchase that would otherwise succeed, and spends nothing.
func TestUserTokenForAnotherUser(t *testing.T) {
	t.Parallel()
	s := newSecureServer(t)
	ctx := context.Background()
	svc, _ := s.clients(s.creds.ServiceToken)
	if _, err := svc.Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: "alice", Amount: "10", RequestId: "g"})); err != nil {
		t.Fatal(err)
	}
	bob, _ := s.clients(s.userToken(t, "bob", time.Hour))
	_, err := bob.Purchase(ctx, connect.NewRequest(&pb.PurchaseRequest{UserId: "alice", Amount: "10", RequestId: "steal"}))
	if connect.CodeOf(err) != connect.CodePermissionDenied || reason(err) != auth.ReasonOtherUser {
		t.Errorf("bob purchases for alice: %v (%s), want permission_denied OTHER_USER", err, reason(err))
	}
	res, err := svc.GetBalance(ctx, connect.NewRequest(&pb.GetBalanceRequest{UserId: "alice"}))
	if err != nil || res.Msg.Balance != "10" || res.Msg.Version != 1 {
		t.Errorf("alice after bob's attempt: %v, %v; want balance 10, version 1", res, err)
	}
}

// A malformed body is refused for what it is, MALFORMED_REQUEST, before
// the interceptor checks the user_id it names: the body that names bob with
// alice's token is not a request at all, whatever its user. Nothing is
// written.
func TestMalformedBodyBeforeItsUser(t *testing.T) {
	t.Parallel()
	s := newSecureServer(t)
	before := s.srv.Snapshot()
	for _, body := range []string{`{"user_id":"bob","amount":"1","request_id":"m","bogus":1}`, `{"user_id":"bob","amount":1,"request_id":"m"}`} {
		req, err := http.NewRequest(http.MethodPost, s.url+"/pointledger.v1.LedgerService/Purchase", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+s.userToken(t, "alice", time.Hour))
		res, err := s.h2c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		// The detail's debug copy is protojson's, spaced at random.
		var answer bytes.Buffer
		_ = json.Compact(&answer, raw)
		if res.StatusCode != http.StatusBadRequest || !strings.Contains(answer.String(), `"reason":"`+api.ReasonMalformedRequest+`"`) {
			t.Errorf("alice's token, %s: %s %s, want 400 with reason %s", body, res.Status, raw, api.ReasonMalformedRequest)
		}
	}
	if added, changed, removed := before.Diff(s.srv.Snapshot()); len(added)+len(changed)+len(removed) != 0 {
		t.Errorf("written: added %v, changed %v, removed %v", added, changed, removed)
	}
}

// A refund is the shop's decision: a user token may not refund even its own
// purchase (it would undo the purchase and keep the goods), and the refusal
// is by role, before anything is written.
func TestUserMayNotRefund(t *testing.T) {
	t.Parallel()
	s := newSecureServer(t)
	ctx := context.Background()
	s.setup(t, s.creds.ServiceToken)
	alice, _ := s.clients(s.userToken(t, "alice", time.Hour))
	before := s.srv.Snapshot()
	_, err := alice.Refund(ctx, connect.NewRequest(&pb.RefundRequest{UserId: "alice", Amount: "50", RequestId: "undo", PurchaseRequestId: "setup-p"}))
	if connect.CodeOf(err) != connect.CodePermissionDenied || reason(err) != auth.ReasonRoleDenied {
		t.Errorf("alice refunds her own purchase: %v (%s), want permission_denied %s", err, reason(err), auth.ReasonRoleDenied)
	}
	if w := s.written(before); w != "" {
		t.Errorf("a refused refund wrote: %s", w)
	}
	svc, _ := s.clients(s.creds.ServiceToken)
	if _, err := svc.Refund(ctx, connect.NewRequest(&pb.RefundRequest{UserId: "alice", Amount: "50", RequestId: "shop-refund", PurchaseRequestId: "setup-p"})); err != nil {
		t.Errorf("the service refunds alice's purchase: %v", err)
	}
}

// Garbled, forged and misaddressed tokens are unauthenticated.
func TestBadTokens(t *testing.T) {
	t.Parallel()
	s := newSecureServer(t)
	good := s.userToken(t, "alice", time.Hour)
	other := auth.GenerateDev() // another deployment's keys
	forged, err := auth.MintUserToken(other.Credentials, "alice", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	wrongAudience := *s.creds.Credentials
	wrongAudience.Audience = "someone-else"
	misaddressed, err := auth.MintUserToken(&wrongAudience, "alice", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(good, ".")
	for _, tc := range []struct{ name, header, reason string }{
		{"no header", "", auth.ReasonMissingToken},
		{"garbled", "Bearer not.a.jwt", auth.ReasonInvalidToken},
		{"wrong scheme", "Basic " + s.creds.ServiceToken, auth.ReasonInvalidToken},
		{"no token", "Bearer ", auth.ReasonInvalidToken},
		{"signed with another key", "Bearer " + forged, auth.ReasonInvalidToken},
		{"another audience", "Bearer " + misaddressed, auth.ReasonInvalidToken},
		{"alg none", "Bearer eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0." + parts[1] + ".", auth.ReasonInvalidToken},
		{"tampered claims", "Bearer " + parts[0] + "." + parts[1] + "x." + parts[2], auth.ReasonInvalidToken},
		{"admin token hash", "Bearer " + auth.HashToken(s.creds.AdminToken), auth.ReasonInvalidToken},
		{"huge", "Bearer " + strings.Repeat("a", auth.MaxTokenBytes), auth.ReasonInvalidToken},
	} {
		req, _ := http.NewRequest(http.MethodPost, s.url+pointledgerv1connect.LedgerServiceGetBalanceProcedure, strings.NewReader(`{"user_id":"alice"}`))
		req.Header.Set("Content-Type", "application/json")
		if tc.header != "" {
			req.Header.Set("Authorization", tc.header)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), `"code":"unauthenticated"`) || !strings.Contains(string(body), tc.reason) {
			t.Errorf("%s: HTTP %d %s, want 401 unauthenticated %s", tc.name, res.StatusCode, body, tc.reason)
		}
	}
}

// Without the middleware in front, the interceptor refuses: no identity.
func TestInterceptorAloneRefuses(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	opts := append(api.HandlerOptions(log), connect.WithInterceptors(auth.Interceptor()))
	mux := http.NewServeMux()
	mux.Handle(pointledgerv1connect.NewLedgerServiceHandler(api.NewLedgerService(nil, nil, ledger.DefaultScale, log), opts...))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c := pointledgerv1connect.NewLedgerServiceClient(http.DefaultClient, srv.URL, connect.WithInterceptors(auth.Bearer("anything")))
	if _, err := c.GetBalance(context.Background(), connect.NewRequest(&pb.GetBalanceRequest{UserId: "alice"})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("GetBalance without the middleware: %v, want unauthenticated", err)
	}
}

// -insecure-dev: no token needed, and the caller may do what service and
// admin may.
func TestInsecureDevLetsEveryoneIn(t *testing.T) {
	t.Parallel()
	s := newServer(t, auth.InsecureDev(), auth.DevCredentials{}, nil)
	s.setup(t, "")
	l, a := s.clients("")
	for _, proc := range calls {
		id := "dev-" + proc.name
		if proc.hold {
			authorize(t, l, id)
		}
		if err := proc.call(context.Background(), l, a, id); err != nil {
			t.Errorf("insecure dev: %s: %v", proc.name, err)
		}
	}
	w := s.webhookClient("")
	for _, proc := range webhookCalls {
		if err := proc.call(context.Background(), w); connect.CodeOf(err) != reached {
			t.Errorf("insecure dev: %s: %v, want it to reach the method (%v)", proc.name, err, reached)
		}
	}
}

// Each caller has its own bucket; an empty one answers resource_exhausted
// before anything is read or written.
func TestRateLimitPerCaller(t *testing.T) {
	t.Parallel()
	creds := auth.GenerateDev()
	a, err := auth.NewAuthenticator(creds.Credentials)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1e9, 0) // frozen: no refill during the test
	s := newServer(t, a, creds, auth.NewLimiter(1, 3, func() time.Time { return now }))
	ctx := context.Background()
	svc, _ := s.clients(creds.ServiceToken)
	for i := range 3 {
		if _, err := svc.Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: "alice", Amount: "1", RequestId: fmt.Sprint("g", i)})); err != nil {
			t.Fatalf("grant %d of a burst of 3: %v", i, err)
		}
	}
	before := s.srv.Snapshot()
	_, err = svc.Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: "alice", Amount: "1", RequestId: "g3"}))
	if connect.CodeOf(err) != connect.CodeResourceExhausted || reason(err) != auth.ReasonRateLimited {
		t.Errorf("4th grant in a burst of 3: %v, want resource_exhausted RATE_LIMITED", err)
	}
	if w := s.written(before); w != "" {
		t.Errorf("a rate-limited grant wrote: %s", w)
	}
	alice, _ := s.clients(s.userToken(t, "alice", time.Hour))
	if _, err := alice.GetBalance(ctx, connect.NewRequest(&pb.GetBalanceRequest{UserId: "alice"})); err != nil {
		t.Errorf("another caller, with a full bucket: %v", err)
	}
	// A peer forwards the calls of every caller of its instance, which
	// limited each of them: it has no bucket of its own to empty.
	peer, _ := s.clients(creds.PeerToken)
	for i := range 10 {
		if _, err := peer.Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: "alice", Amount: "1", RequestId: fmt.Sprint("peer-g", i)})); err != nil {
			t.Fatalf("grant %d forwarded by a peer: %v", i, err)
		}
	}
}

// A call is forwarded when a peer makes it, or, without authentication,
// when it says so; a service that says so is not believed.
func TestForwarded(t *testing.T) {
	t.Parallel()
	creds := auth.GenerateDev()
	secure, err := auth.NewAuthenticator(creds.Credentials)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		name   string
		authn  *auth.Authenticator
		token  string
		header bool
		want   bool
	}{
		{"peer", secure, creds.PeerToken, true, true},
		{"peer without the header", secure, creds.PeerToken, false, true},
		{"service with the header", secure, creds.ServiceToken, true, false},
		{"insecure dev with the header", auth.InsecureDev(), "", true, true},
		{"insecure dev without it", auth.InsecureDev(), "", false, false},
	} {
		var got bool
		h := auth.Middleware(tc.authn, nil, log, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			got = auth.Forwarded(r.Context(), r.Header)
		}))
		req := httptest.NewRequest(http.MethodPost, pointledgerv1connect.LedgerServicePurchaseProcedure, nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		if tc.header {
			req.Header.Set(auth.ForwardedHeader, "http://10.0.0.1:8080")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || got != tc.want {
			t.Errorf("%s: HTTP %d, forwarded %v; want 200, %v", tc.name, rec.Code, got, tc.want)
		}
	}
	if auth.Forwarded(context.Background(), http.Header{auth.ForwardedHeader: {"x"}}) {
		t.Error("a call that did not pass the middleware is forwarded")
	}
}
