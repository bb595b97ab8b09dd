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
	"google.golang.org/protobuf/types/known/timestamppb"

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
	{"GetStatement", func(ctx context.Context, l pointledgerv1connect.LedgerServiceClient, _ pointledgerv1connect.AdminServiceClient, _ string) error {
		_, err := l.GetStatement(ctx, connect.NewRequest(&pb.GetStatementRequest{
			UserId: "alice", StartTime: timestamppb.New(time.Unix(0, 0)), EndTime: timestamppb.New(time.Now().Add(time.Hour)),
		}))
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
	{"ReverseGrant", func(ctx context.Context, l pointledgerv1connect.LedgerServiceClient, _ pointledgerv1connect.AdminServiceClient, id string) error {
		_, err := l.ReverseGrant(ctx, connect.NewRequest(&pb.ReverseGrantRequest{UserId: "alice", GrantRequestId: "setup-g", Amount: "0.01", RequestId: "rg-" + id}))
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

// webhookCalls are a valid call of each WebhookService procedure. These
// tests' servers keep no webhook endpoints (servetest without the
// emulator: the endpoint store is DynamoDB's), so a call the roles let
// through reaches its method, which answers it unimplemented
// (NOT_CONFIGURED): what the roles decide is whether it gets there.
var webhookCalls = []struct {
	name string
	call func(ctx context.Context, w pointledgerv1connect.WebhookServiceClient) error
}{
	{"CreateWebhookEndpoint", func(ctx context.Context, w pointledgerv1connect.WebhookServiceClient) error {
		_, err := w.CreateWebhookEndpoint(ctx, connect.NewRequest(&pb.CreateWebhookEndpointRequest{Url: "https://198.51.100.7/hook", EventTypes: []string{"*"}}))
		return err
	}},
	{"ListWebhookEndpoints", func(ctx context.Context, w pointledgerv1connect.WebhookServiceClient) error {
		_, err := w.ListWebhookEndpoints(ctx, connect.NewRequest(&pb.ListWebhookEndpointsRequest{}))
		return err
	}},
	{"UpdateWebhookEndpoint", func(ctx context.Context, w pointledgerv1connect.WebhookServiceClient) error {
		_, err := w.UpdateWebhookEndpoint(ctx, connect.NewRequest(&pb.UpdateWebhookEndpointRequest{EndpointId: webhookEndpointID, Disabled: new(true)}))
		return err
	}},
	{"DeleteWebhookEndpoint", func(ctx context.Context, w pointledgerv1connect.WebhookServiceClient) error {
		_, err := w.DeleteWebhookEndpoint(ctx, connect.NewRequest(&pb.DeleteWebhookEndpointRequest{EndpointId: webhookEndpointID}))
		return err
	}},
	{"RotateWebhookSecret", func(ctx context.Context, w pointledgerv1connect.WebhookServiceClient) error {
		_, err := w.RotateWebhookSecret(ctx, connect.NewRequest(&pb.RotateWebhookSecretRequest{EndpointId: webhookEndpointID}))
		return err
	}},
	{"ListWebhookDeliveries", func(ctx context.Context, w pointledgerv1connect.WebhookServiceClient) error {
		_, err := w.ListWebhookDeliveries(ctx, connect.NewRequest(&pb.ListWebhookDeliveriesRequest{EndpointId: webhookEndpointID, UserId: "alice"}))
		return err
	}},
	{"RedeliverWebhookEvents", func(ctx context.Context, w pointledgerv1connect.WebhookServiceClient) error {
		_, err := w.RedeliverWebhookEvents(ctx, connect.NewRequest(&pb.RedeliverWebhookEventsRequest{EndpointId: webhookEndpointID, UserId: "alice", FromVersion: 1}))
		return err
	}},
}

// webhookEndpointID is an endpoint id, well formed (there is no endpoint).
const webhookEndpointID = "01KAXQ4V0SR0Z7Y2M3N4P5Q6R7"

const (
	ok     = connect.Code(0)
	denied = connect.CodePermissionDenied
	unauth = connect.CodeUnauthenticated
	// reached: the call got to its method (webhookCalls).
	reached = connect.CodeUnimplemented
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
			"Grant": ok, "Purchase": ok, "Refund": ok, "GetBalance": ok, "ListEntries": ok, "ListHistory": ok, "GetStatement": ok,
			"Authorize": ok, "Capture": ok, "Void": ok, "ListHolds": ok, "ReverseGrant": ok,
		}},
		{"admin", s.creds.AdminToken, map[string]connect.Code{
			"GetBalance": ok, "ListEntries": ok, "ListHistory": ok, "GetStatement": ok, "ListHolds": ok, "Void": ok,
			"Reconcile": ok, "Adjust": ok, "SetAccountStatus": ok, "RebuildProjection": ok, "GetProjectionStatus": ok,
			"CreateWebhookEndpoint": reached, "ListWebhookEndpoints": reached, "UpdateWebhookEndpoint": reached,
			"DeleteWebhookEndpoint": reached, "RotateWebhookSecret": reached, "ListWebhookDeliveries": reached,
			"RedeliverWebhookEvents": reached,
		}},
		// The people who answer members: read, adjust (within limits),
		// freeze, void.
		{"support", s.creds.SupportToken, map[string]connect.Code{
			"GetBalance": ok, "ListEntries": ok, "ListHistory": ok, "GetStatement": ok, "ListHolds": ok, "Void": ok,
			"Reconcile": ok, "Adjust": ok, "SetAccountStatus": ok, "GetProjectionStatus": ok,
			"ListWebhookEndpoints": reached, "ListWebhookDeliveries": reached,
		}},
		{"user alice", s.userToken(t, "alice", time.Hour), map[string]connect.Code{
			"Purchase": ok, "GetBalance": ok, "ListEntries": ok, "ListHistory": ok, "GetStatement": ok,
			"Authorize": ok, "Void": ok, "ListHolds": ok,
		}},
		{"user bob, for alice", s.userToken(t, "bob", time.Hour), map[string]connect.Code{}},
		// Another instance forwarding a mutation to alice's owner: the
		// mutations that queue per user, and nothing else.
		{"peer", s.creds.PeerToken, map[string]connect.Code{
			"Grant": ok, "Purchase": ok, "Refund": ok, "Authorize": ok, "Capture": ok, "Void": ok, "ReverseGrant": ok, "Adjust": ok,
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
			w := s.webhookClient(c.token, p.opts...)
			for _, proc := range webhookCalls {
				want, listed := c.want[proc.name]
				if !listed {
					want = denied
				}
				before := s.srv.Snapshot()
				err := proc.call(ctx, w)
				if got := connect.CodeOf(err); err == nil || got != want {
					t.Errorf("%s: %s calls %s: %v, want %v", p.name, c.name, proc.name, err, want)
				}
				if reason(err) == "" {
					t.Errorf("%s: %s calls %s: %v has no reason", p.name, c.name, proc.name, err)
				}
				if w := s.written(before); w != "" {
					t.Errorf("%s: %s calls %s: refused, yet it wrote: %s", p.name, c.name, proc.name, w)
				}
			}
		}
	}
}

// webhookClient calls WebhookService with token ("" for none) over protocol.
func (s *server) webhookClient(token string, protocol ...connect.ClientOption) pointledgerv1connect.WebhookServiceClient {
	opts := append([]connect.ClientOption{}, protocol...)
	if token != "" {
		opts = append(opts, connect.WithInterceptors(auth.Bearer(token)))
	}
	return pointledgerv1connect.NewWebhookServiceClient(s.h2c, s.url, opts...)
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
	for _, call := range webhookCalls {
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

// A procedure that does not exist is told so, unimplemented, over every
// protocol, before any token is asked for; a token changes nothing. Found
// by an integrator (issue 16): a mistyped method got permission_denied
// ROLE_NOT_ALLOWED, as if it existed and the caller's role could not call it.
func TestUnknownProcedures(t *testing.T) {
	t.Parallel()
	s := newSecureServer(t)
	ctx := context.Background()
	paths := []struct{ name, path string }{
		{"unknown method", "/pointledger.v1.LedgerService/Nope"},
		{"method in another case", "/pointledger.v1.LedgerService/getBalance"},
		{"method of the other service", "/pointledger.v1.AdminService/GetBalance"},
		{"unknown admin method", "/pointledger.v1.AdminService/Nope"},
		{"unknown service", "/pointledger.v1.NopeService/GetBalance"},
		{"unknown package", "/pointledger.v2.LedgerService/GetBalance"},
		{"the service's path alone", "/pointledger.v1.LedgerService/"},
	}
	protocols := []struct {
		name string
		opts []connect.ClientOption
	}{{"connect", nil}, {"grpc", []connect.ClientOption{connect.WithGRPC()}}, {"grpcweb", []connect.ClientOption{connect.WithGRPCWeb()}}}
	tokens := []struct{ name, token string }{{"no token", ""}, {"service", s.creds.ServiceToken}, {"user alice", s.userToken(t, "alice", time.Hour)}}
	for _, p := range paths {
		for _, proto := range protocols {
			for _, tok := range tokens {
				opts := append([]connect.ClientOption{}, proto.opts...)
				if tok.token != "" {
					opts = append(opts, connect.WithInterceptors(auth.Bearer(tok.token)))
				}
				c := connect.NewClient[pb.GetBalanceRequest, pb.GetBalanceResponse](s.h2c, s.url+p.path, opts...)
				_, err := c.CallUnary(ctx, connect.NewRequest(&pb.GetBalanceRequest{UserId: "alice"}))
				if connect.CodeOf(err) != connect.CodeUnimplemented || reason(err) != api.ReasonUnknownProcedure {
					t.Errorf("%s (%s) over %s with %s: %v (%s), want unimplemented %s", p.name, p.path, proto.name, tok.name, err, reason(err), api.ReasonUnknownProcedure)
				}
			}
		}
		// What curl sees: HTTP 404 and a Connect error.
		res, err := s.h2c.Post(s.url+p.path, "application/json", strings.NewReader(`{"user_id":"alice"}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusNotFound || !strings.Contains(string(body), `"code":"unimplemented"`) {
			t.Errorf("%s: POST %s without a token: %s %s, want 404 unimplemented", p.name, p.path, res.Status, body)
		}
		// gRPC-Web says it in its own status, as a gRPC server would.
		res, err = s.h2c.Post(s.url+p.path, "application/grpc-web+proto", strings.NewReader("\x00\x00\x00\x00\x00"))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK || res.Header.Get("Grpc-Status") != "12" {
			t.Errorf("%s: gRPC-Web to %s without a token: %s grpc-status %q, want 200 and 12 (unimplemented)", p.name, p.path, res.Status, res.Header.Get("Grpc-Status"))
		}
	}
}

// Every procedure of the services has a rule in the policy table (one
// without would be refused to everyone), and every rule is for a procedure
// that exists.
func TestPolicyCoversEveryProcedure(t *testing.T) {
	t.Parallel()
	procedures := append(api.Procedures(api.LedgerServiceDescriptor()), api.Procedures(api.AdminServiceDescriptor())...)
	procedures = append(procedures, api.Procedures(api.WebhookServiceDescriptor())...)
	if len(procedures) != len(calls)+len(webhookCalls) {
		t.Errorf("the services have %d procedures, TestRolesPerProcedure calls %d: add the new ones to calls", len(procedures), len(calls)+len(webhookCalls))
	}
	if budgets := api.Procedures(api.BudgetServiceDescriptor()); len(budgets) != len(budgetCalls) {
		t.Errorf("BudgetService has %d procedures, TestBudgetRoles calls %d: add the new ones to budgetCalls", len(budgets), len(budgetCalls))
	} else {
		procedures = append(append(procedures, budgets...), api.Procedures(api.PointKindServiceDescriptor())...)
	}
	ruled := map[string]bool{}
	for _, p := range auth.PolicyProcedures() {
		ruled[p] = true
	}
	for _, p := range procedures {
		if !ruled[p] {
			t.Errorf("%s has no rule in policy.go: no role may call it", p)
		}
		delete(ruled, p)
	}
	for p := range ruled {
		t.Errorf("policy.go has a rule for %s, which is no procedure of the services", p)
	}
}

// A procedure missing from the policy table is refused to every role,
// -insecure-dev's included.
func TestProcedureWithoutRuleIsRefused(t *testing.T) {
	t.Parallel()
	for _, id := range []auth.Identity{
		{Role: auth.RoleService, Subject: "checkout"},
		{Role: auth.RoleAdmin, Subject: "ops"},
		{Role: auth.RoleUser, Subject: "alice"},
		auth.InsecureDevIdentity,
	} {
		err := auth.AllowProcedure(id, "/pointledger.v1.LedgerService/Transfer")
		if auth.ReasonOf(err) != auth.ReasonRoleDenied {
			t.Errorf("%s calls a procedure without a rule: %v, want %s", id.Role, err, auth.ReasonRoleDenied)
		}
	}
}
