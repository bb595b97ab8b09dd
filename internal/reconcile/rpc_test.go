package reconcile_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"google.golang.org/protobuf/proto"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/api"
	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/history"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/internal/ledgertest"
	"github.com/pointledger/pointledger/internal/projection"
	"github.com/pointledger/pointledger/internal/reconcile"
)

// The admin Reconcile RPC reports what `ledgerd reconcile` reports of
// budgets (the reconciler's own report, which the command prints): the
// finding about a budget edited by hand, naming the budget, and each
// budget's books with its liability. Served as ledgerd serves it, on the
// DynamoDB store (package api's own tests run on the memory store, whose
// reconciler knows no budgets).
func TestReconcileRPCReportsBudgets(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	store := dynamo.New(env.Client, dynamo.Options{Table: env.Ledger, Logger: log})
	hist := projection.NewHistory(env.Client, env.History, store, nil)
	rec := reconcile.New(store, hist, projection.NewLeaseTable(env.Client, env.Leases, nil))

	ledgertest.CreateBudget(t, store, "spring", "100", 2)
	ledgertest.CreateBudget(t, store, "autumn", "50", 1)
	apply := func(typ ledger.EntryType, r ledger.Request) {
		t.Helper()
		ledgertest.Must(t, store, typ, r)
	}
	apply(ledger.EntryGrant, ledger.Request{UserID: "a", RequestID: "g1", Amount: "30", BudgetID: "spring"})
	apply(ledger.EntryGrant, ledger.Request{UserID: "b", RequestID: "g1", Amount: "20", BudgetID: "spring"})
	apply(ledger.EntryPurchase, ledger.Request{UserID: "b", RequestID: "p1", Amount: "12"}) // 12 of spring's 20 to b
	if _, err := hist.RebuildAll(ctx); err != nil {
		t.Fatal(err)
	}
	// By hand: autumn's shard gains 5 that no top-up put in.
	_, err := env.Client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &env.Ledger,
		Key: map[string]types.AttributeValue{
			"PK": &types.AttributeValueMemberS{Value: "BUDGET#autumn#0"}, "SK": &types.AttributeValueMemberS{Value: "S"},
		},
		UpdateExpression:          aws.String("SET remaining = remaining + :n"),
		ConditionExpression:       aws.String("attribute_exists(PK)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":n": &types.AttributeValueMemberN{Value: "5"}},
	})
	if err != nil {
		t.Fatal(err)
	}

	noProjector := func() (history.ProjectorStatus, bool) { return history.ProjectorStatus{}, false }
	path, handler := pointledgerv1connect.NewAdminServiceHandler(api.NewAdminService(store, hist, rec, noProjector, ledger.DefaultScale, log), api.HandlerOptions(log)...)
	mux := http.NewServeMux()
	mux.Handle(path, api.KnownProcedures(api.AdminServiceDescriptor(), handler, api.HandlerOptions(log)...))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	stream, err := pointledgerv1connect.NewAdminServiceClient(srv.Client(), srv.URL).Reconcile(ctx, connect.NewRequest(&pb.ReconcileRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var got *pb.ReconcileReport
	for stream.Receive() {
		if r, ok := stream.Msg().Event.(*pb.ReconcileResponse_Report); ok {
			got = r.Report
		}
	}
	if err := stream.Err(); err != nil || got == nil {
		t.Fatalf("Reconcile: report %v, %v", got, err)
	}

	open := pb.BudgetStatus_BUDGET_STATUS_OPEN
	want := []*pb.BudgetReport{
		{BudgetId: "autumn", Status: open, Total: "50", Granted: "0", Remaining: "55", GrantsSum: "0", Liability: "0", Breakage: "0"},
		{BudgetId: "spring", Status: open, Total: "100", Granted: "50", Remaining: "50", GrantsSum: "50", Liability: "38", Breakage: "0"},
	}
	if !sameBudgets(want, got.Budgets) {
		t.Errorf("the RPC's budgets %v, want %v", got.Budgets, want)
	}
	if len(got.Findings) != 1 || got.Findings[0].BudgetId != "autumn" || got.Findings[0].Kind != ledger.FindingBudgetUnbalanced || got.Clean {
		t.Errorf("findings %v (clean %v), want autumn's %s alone", got.Findings, got.Clean, ledger.FindingBudgetUnbalanced)
	}

	// What `ledgerd reconcile` prints, from the same reconciler on the same
	// ledger, says the same.
	rep, err := rec.Run(ctx, reconcile.Options{ProjectionGrace: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var cli []*pb.BudgetReport
	for _, b := range rep.Budgets {
		status := pb.BudgetStatus(pb.BudgetStatus_value["BUDGET_STATUS_"+b.Status])
		cli = append(cli, &pb.BudgetReport{BudgetId: b.BudgetID, Status: status, Total: b.Total, Granted: b.Granted,
			Remaining: b.Remaining, GrantsSum: b.GrantsSum, Liability: b.Liability, Breakage: b.Breakage})
	}
	if !sameBudgets(cli, got.Budgets) {
		t.Errorf("the RPC's budgets %v, the command's %v", got.Budgets, cli)
	}
	if len(rep.Findings) != len(got.Findings) || rep.Findings[0].BudgetID != got.Findings[0].BudgetId || rep.Findings[0].Found != got.Findings[0].Found {
		t.Errorf("the command's findings %v, the RPC's %v", rep.Findings, got.Findings)
	}
}

func sameBudgets(a, b []*pb.BudgetReport) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}
