package auth_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

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
	srv := servetest.New(tb, servetest.Options{Auth: a, Limiter: limiter})
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
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return ""
	}
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if info, ok := v.(*errdetails.ErrorInfo); ok {
				return info.Reason
			}
		}
	}
	return ""
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

var calls = []struct {
	name string
	call call
	hold bool // it acts on the hold "h-"+id, which the test authorizes first (authorize)
}{
	{"Grant", func(ctx context.Context, l pointledgerv1connect.LedgerServiceClient, _ pointledgerv1connect.AdminServiceClient, id string) error {
		_, err := l.Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: "alice", Amount: "5", RequestId: "g-" + id}))
		return err
	}, false},
	{"Purchase", func(ctx context.Context, l pointledgerv1connect.LedgerServiceClient, _ pointledgerv1connect.AdminServiceClient, id string) error {
		_, err := l.Purchase(ctx, connect.NewRequest(&pb.PurchaseRequest{UserId: "alice", Amount: "1", RequestId: "p-" + id}))
		return err
	}, false},
	{"Refund", func(ctx context.Context, l pointledgerv1connect.LedgerServiceClient, _ pointledgerv1connect.AdminServiceClient, id string) error {
		_, err := l.Refund(ctx, connect.NewRequest(&pb.RefundRequest{UserId: "alice", Amount: "1", RequestId: "r-" + id, PurchaseRequestId: "setup-p"}))
		return err
	}, false},
	{"GetBalance", func(ctx context.Context, l pointledgerv1connect.LedgerServiceClient, _ pointledgerv1connect.AdminServiceClient, _ string) error {
		_, err := l.GetBalance(ctx, connect.NewRequest(&pb.GetBalanceRequest{UserId: "alice"}))
		return err
	}, false},
	{"ListEntries", func(ctx context.Context, l pointledgerv1connect.LedgerServiceClient, _ pointledgerv1connect.AdminServiceClient, _ string) error {
		_, err := l.ListEntries(ctx, connect.NewRequest(&pb.ListEntriesRequest{UserId: "alice"}))
		return err
	}, false},
	{"ListHistory", func(ctx context.Context, l pointledgerv1connect.LedgerServiceClient, _ pointledgerv1connect.AdminServiceClient, _ string) error {
		_, err := l.ListHistory(ctx, connect.NewRequest(&pb.ListHistoryRequest{UserId: "alice"}))
		return err
	}, false},
	{"Authorize", func(ctx context.Context, l pointledgerv1connect.LedgerServiceClient, _ pointledgerv1connect.AdminServiceClient, id string) error {
		_, err := l.Authorize(ctx, connect.NewRequest(&pb.AuthorizeRequest{UserId: "alice", Amount: "1", RequestId: "au-" + id}))
		if err == nil { // let it go, so that alice's holds stay within the limit
			_, err = l.Void(ctx, connect.NewRequest(&pb.VoidRequest{UserId: "alice", HoldRequestId: "au-" + id, RequestId: "auv-" + id}))
		}
		return err
	}, false},
	{"Capture", func(ctx context.Context, l pointledgerv1connect.LedgerServiceClient, _ pointledgerv1connect.AdminServiceClient, id string) error {
		_, err := l.Capture(ctx, connect.NewRequest(&pb.CaptureRequest{UserId: "alice", HoldRequestId: "h-" + id, RequestId: "c-" + id}))
		return err
	}, true},
	{"Void", func(ctx context.Context, l pointledgerv1connect.LedgerServiceClient, _ pointledgerv1connect.AdminServiceClient, id string) error {
		_, err := l.Void(ctx, connect.NewRequest(&pb.VoidRequest{UserId: "alice", HoldRequestId: "h-" + id, RequestId: "v-" + id}))
		return err
	}, true},
	{"ListHolds", func(ctx context.Context, l pointledgerv1connect.LedgerServiceClient, _ pointledgerv1connect.AdminServiceClient, _ string) error {
		_, err := l.ListHolds(ctx, connect.NewRequest(&pb.ListHoldsRequest{UserId: "alice"}))
		return err
	}, false},
	{"Reconcile", func(ctx context.Context, _ pointledgerv1connect.LedgerServiceClient, a pointledgerv1connect.AdminServiceClient, _ string) error {
		// A user with no entries: quick, and the role is what is tested.
		stream, err := a.Reconcile(ctx, connect.NewRequest(&pb.ReconcileRequest{UserId: "nobody"}))
		if err != nil {
			return err
		}
		for stream.Receive() {
		}
		return stream.Err()
	}, false},
	{"Adjust", func(ctx context.Context, _ pointledgerv1connect.LedgerServiceClient, a pointledgerv1connect.AdminServiceClient, id string) error {
		_, err := a.Adjust(ctx, connect.NewRequest(&pb.AdjustRequest{UserId: "alice", Amount: "1", RequestId: "a-" + id, Reason: "test"}))
		return err
	}, false},
	{"SetAccountStatus", func(ctx context.Context, _ pointledgerv1connect.LedgerServiceClient, a pointledgerv1connect.AdminServiceClient, _ string) error {
		_, err := a.SetAccountStatus(ctx, connect.NewRequest(&pb.SetAccountStatusRequest{UserId: "alice", Status: pb.AccountStatus_ACCOUNT_STATUS_ACTIVE, Reason: "test"}))
		return err
	}, false},
	{"RebuildProjection", func(ctx context.Context, _ pointledgerv1connect.LedgerServiceClient, a pointledgerv1connect.AdminServiceClient, _ string) error {
		_, err := a.RebuildProjection(ctx, connect.NewRequest(&pb.RebuildProjectionRequest{UserId: "alice"}))
		return err
	}, false},
	{"GetProjectionStatus", func(ctx context.Context, _ pointledgerv1connect.LedgerServiceClient, a pointledgerv1connect.AdminServiceClient, _ string) error {
		_, err := a.GetProjectionStatus(ctx, connect.NewRequest(&pb.GetProjectionStatusRequest{UserId: "alice"}))
		return err
	}, false},
}

const (
	ok     = connect.Code(0)
	denied = connect.CodePermissionDenied
	unauth = connect.CodeUnauthenticated
)

// Each caller against each procedure, acting for alice: the access table of
// docs/operations.md, answered the same over Connect, gRPC and gRPC-Web. A refused
// call writes nothing.
func TestRolesPerProcedure(t *testing.T) {
	t.Parallel()
	s := newSecureServer(t)
	ctx := context.Background()
	s.setup(t, s.creds.ServiceToken)
	expired, err := auth.MintUserToken(s.creds.Credentials, "alice", time.Minute, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	callers := []struct {
		name  string
		token string
		want  map[string]connect.Code // missing: denied
	}{
		{"service", s.creds.ServiceToken, map[string]connect.Code{
			"Grant": ok, "Purchase": ok, "Refund": ok, "GetBalance": ok, "ListEntries": ok, "ListHistory": ok,
			"Authorize": ok, "Capture": ok, "Void": ok, "ListHolds": ok,
		}},
		{"admin", s.creds.AdminToken, map[string]connect.Code{
			"GetBalance": ok, "ListEntries": ok, "ListHistory": ok, "ListHolds": ok, "Void": ok,
			"Reconcile": ok, "Adjust": ok, "SetAccountStatus": ok, "RebuildProjection": ok, "GetProjectionStatus": ok,
		}},
		{"user alice", s.userToken(t, "alice", time.Hour), map[string]connect.Code{
			"Purchase": ok, "GetBalance": ok, "ListEntries": ok, "ListHistory": ok,
			"Authorize": ok, "Void": ok, "ListHolds": ok,
		}},
		{"user bob, for alice", s.userToken(t, "bob", time.Hour), map[string]connect.Code{}},
		// Another instance forwarding a mutation to alice's owner: the
		// mutations that queue per user, and nothing else.
		{"peer", s.creds.PeerToken, map[string]connect.Code{
			"Grant": ok, "Purchase": ok, "Refund": ok, "Authorize": ok, "Capture": ok, "Void": ok, "Adjust": ok,
		}},
		{"no token", "", allCodes(unauth)},
		{"expired user token", expired, allCodes(unauth)},
		{"unknown opaque token", auth.NewSecret(), allCodes(unauth)},
	}
	protocols := []struct {
		name string
		opts []connect.ClientOption
	}{{"connect", nil}, {"grpc", []connect.ClientOption{connect.WithGRPC()}}, {"grpcweb", []connect.ClientOption{connect.WithGRPCWeb()}}}
	svc, _ := s.clients(s.creds.ServiceToken)
	for _, p := range protocols {
		for _, c := range callers {
			l, a := s.clients(c.token, p.opts...)
			for _, proc := range calls {
				want, listed := c.want[proc.name]
				if !listed {
					want = denied
				}
				id := p.name + "-" + strings.NewReplacer(" ", "_", ",", "").Replace(c.name) + "-" + proc.name
				if proc.hold {
					authorize(t, svc, id)
				}
				before := s.srv.Snapshot()
				err := proc.call(ctx, l, a, id)
				if got := connect.CodeOf(err); err == nil && want != ok || err != nil && got != want {
					t.Errorf("%s: %s calls %s: %v, want %v", p.name, c.name, proc.name, err, want)
				}
				if want != ok {
					if reason(err) == "" {
						t.Errorf("%s: %s calls %s: %v has no reason", p.name, c.name, proc.name, err)
					}
					if w := s.written(before); w != "" {
						t.Errorf("%s: %s calls %s: refused, yet it wrote: %s", p.name, c.name, proc.name, w)
					}
				}
				if proc.hold && err != nil { // let it go, so that alice's holds stay within the limit
					if _, err := svc.Void(ctx, connect.NewRequest(&pb.VoidRequest{UserId: "alice", HoldRequestId: "h-" + id, RequestId: "cleanup-" + id})); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
}

// authorize holds 1 of alice's points as hold "h-"+id, for a call that
// acts on it.
func authorize(tb testing.TB, svc pointledgerv1connect.LedgerServiceClient, id string) {
	tb.Helper()
	if _, err := svc.Authorize(context.Background(), connect.NewRequest(&pb.AuthorizeRequest{UserId: "alice", Amount: "1", RequestId: "h-" + id})); err != nil {
		tb.Fatal(err)
	}
}

func allCodes(c connect.Code) map[string]connect.Code {
	m := map[string]connect.Code{}
	for _, call := range calls {
		m[call.name] = c
	}
	return m
}

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
