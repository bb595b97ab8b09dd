package auth_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/auth"
)

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

// roleCaller is a caller of TestRolesPerProcedure: its token and what each
// procedure answers it.
type roleCaller struct {
	name  string
	token string
	want  map[string]connect.Code // missing: denied
}

// rolesCallers is TestRolesPerProcedure's table: each caller, acting for
// alice, and the code each procedure answers it.
func rolesCallers(t *testing.T, s *server) []roleCaller {
	t.Helper()
	expired, err := auth.MintUserToken(s.creds.Credentials, "alice", time.Minute, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return []roleCaller{
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
}

// Each caller against each procedure, acting for alice: the access table of
// docs/operations.md, answered the same over Connect, gRPC and gRPC-Web. A refused
// call writes nothing.
func TestRolesPerProcedure(t *testing.T) {
	t.Parallel()
	s := newSecureServer(t)
	ctx := context.Background()
	s.setup(t, s.creds.ServiceToken)
	callers := rolesCallers(t, s)
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
