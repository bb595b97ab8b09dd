package auth

import (
	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
)

// rule is who may call one procedure.
type rule struct {
	service bool // any user
	admin   bool // any user
	user    bool // only for the user id of the token
	// peer: forwarded by another ledgerd to the user's owner, for any
	// user; the caller was checked where it called.
	peer bool
	// support: the people who answer members, for any user: they read
	// everything an admin reads, adjust within SupportLimits, freeze and
	// unfreeze, void holds.
	support bool
}

// policy is the access table. A procedure not in it is refused to everyone.
// The peer role may call exactly the mutations that go through a user's
// queue of the write path, which are what an instance forwards to the
// user's owner (package affinity); SetAccountStatus does not queue.
// Refund is the service's alone: a refund is the shop's decision, not the
// buyer's, or a user could undo any purchase of its own and keep the goods;
// an admin gives points back through Adjust, with a reason.
var policy = map[string]rule{
	pointledgerv1connect.LedgerServiceGrantProcedure:       {service: true, peer: true},
	pointledgerv1connect.LedgerServicePurchaseProcedure:    {service: true, user: true, peer: true},
	pointledgerv1connect.LedgerServiceRefundProcedure:      {service: true, peer: true},
	pointledgerv1connect.LedgerServiceGetBalanceProcedure:  {service: true, admin: true, user: true, support: true},
	pointledgerv1connect.LedgerServiceListEntriesProcedure: {service: true, admin: true, user: true, support: true},
	pointledgerv1connect.LedgerServiceListHistoryProcedure: {service: true, admin: true, user: true, support: true},
	// A user reads its own statement (the user_id check of every user rule).
	pointledgerv1connect.LedgerServiceGetStatementProcedure: {service: true, admin: true, user: true, support: true},
	// A user holds its own points at a checkout and may let go of its own
	// holds; capturing is the shop's decision. An admin may read and void.
	pointledgerv1connect.LedgerServiceAuthorizeProcedure: {service: true, user: true, peer: true},
	pointledgerv1connect.LedgerServiceCaptureProcedure:   {service: true, peer: true},
	pointledgerv1connect.LedgerServiceVoidProcedure:      {service: true, admin: true, user: true, peer: true, support: true},
	pointledgerv1connect.LedgerServiceListHoldsProcedure: {service: true, admin: true, user: true, support: true},
	// Taking back a grant is the shop's decision, as granting is.
	pointledgerv1connect.LedgerServiceReverseGrantProcedure: {service: true, peer: true},

	pointledgerv1connect.AdminServiceReconcileProcedure:           {admin: true, support: true},
	pointledgerv1connect.AdminServiceAdjustProcedure:              {admin: true, peer: true, support: true},
	pointledgerv1connect.AdminServiceSetAccountStatusProcedure:    {admin: true, support: true},
	pointledgerv1connect.AdminServiceRebuildProjectionProcedure:   {admin: true},
	pointledgerv1connect.AdminServiceGetProjectionStatusProcedure: {admin: true, support: true},

	// Where the ledger's events go is the operator's decision: an endpoint
	// receives every user's entries.
	pointledgerv1connect.WebhookServiceCreateWebhookEndpointProcedure:  {admin: true},
	pointledgerv1connect.WebhookServiceListWebhookEndpointsProcedure:   {admin: true, support: true},
	pointledgerv1connect.WebhookServiceUpdateWebhookEndpointProcedure:  {admin: true},
	pointledgerv1connect.WebhookServiceDeleteWebhookEndpointProcedure:  {admin: true},
	pointledgerv1connect.WebhookServiceRotateWebhookSecretProcedure:    {admin: true},
	pointledgerv1connect.WebhookServiceListWebhookDeliveriesProcedure:  {admin: true, support: true},
	pointledgerv1connect.WebhookServiceRedeliverWebhookEventsProcedure: {admin: true},
	// Budgets: an admin's to change; the service that grants from them may
	// read them (what is left of a campaign), never change them.
	pointledgerv1connect.BudgetServiceCreateBudgetProcedure: {admin: true},
	pointledgerv1connect.BudgetServiceTopUpBudgetProcedure:  {admin: true},
	pointledgerv1connect.BudgetServiceCloseBudgetProcedure:  {admin: true},
	pointledgerv1connect.BudgetServiceGetBudgetProcedure:    {service: true, admin: true, support: true},
	pointledgerv1connect.BudgetServiceListBudgetsProcedure:  {service: true, admin: true, support: true},
	// Point kinds: program-wide rules, an admin's to change; the services
	// that grant and spend (and support, who reads everything) may read
	// them. Not per user: no peer routing.
	pointledgerv1connect.PointKindServiceCreatePointKindProcedure: {admin: true},
	pointledgerv1connect.PointKindServiceUpdatePointKindProcedure: {admin: true},
	pointledgerv1connect.PointKindServiceGetPointKindProcedure:    {service: true, admin: true, support: true},
	pointledgerv1connect.PointKindServiceListPointKindsProcedure:  {service: true, admin: true, support: true},
}

// allowProcedure decides by role alone, before the request is read.
func allowProcedure(id Identity, procedure string) error {
	r, ok := policy[procedure]
	if !ok {
		return denied(ReasonRoleDenied, "no role may call "+procedure)
	}
	if id.Role == roleInsecureDev || (r.service && id.is(RoleService)) || (r.admin && id.is(RoleAdmin)) || (r.user && id.Role == RoleUser) ||
		(r.peer && id.Role == RolePeer) || (r.support && id.Role == RoleSupport) {
		return nil
	}
	return denied(ReasonRoleDenied, "role "+string(id.Role)+" may not call "+procedure)
}

// userIDMessage is a request naming the user it acts for.
type userIDMessage interface{ GetUserId() string }

// allowMessage decides on the decoded request: a user acts for itself only.
func allowMessage(id Identity, procedure string, msg any) error {
	if err := allowProcedure(id, procedure); err != nil {
		return err
	}
	if id.Role == RoleSupport {
		// Reading the books is support's; repairing them is an admin's.
		if r, ok := msg.(*pb.ReconcileRequest); ok && r.RepairProjection {
			return denied(ReasonRoleDenied, "role support may run a reconciliation, not repair the projection")
		}
		return nil
	}
	if id.Role != RoleUser {
		return nil
	}
	m, ok := msg.(userIDMessage)
	if !ok || m.GetUserId() != id.Subject {
		return denied(ReasonOtherUser, "a user token may only act for its own user_id")
	}
	return nil
}

// PeerMayCall reports whether the peer role may call procedure: whether it
// is a mutation that one instance forwards to the user's owner.
func PeerMayCall(procedure string) bool { return policy[procedure].peer }
