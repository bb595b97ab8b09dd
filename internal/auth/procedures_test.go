package auth_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/internal/api"
	"github.com/pointledger/pointledger/internal/auth"
)

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
