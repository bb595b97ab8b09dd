package reconcile

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/history"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/internal/ledgertest"
	"github.com/pointledger/pointledger/internal/projection"
)

func TestMain(m *testing.M) { dynamotest.Main(m) }

type fixture struct {
	env     *dynamotest.Env
	store   *dynamo.Ledger
	history *projection.History
	leases  *projection.LeaseTable
	rec     *Reconciler
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	env := dynamotest.New(t)
	store := dynamo.New(env.Client, dynamo.Options{Table: env.Ledger, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	history := projection.NewHistory(env.Client, env.History, store, nil)
	leases := projection.NewLeaseTable(env.Client, env.Leases, nil)
	return &fixture{env: env, store: store, history: history, leases: leases, rec: New(store, history, leases)}
}

// seed writes a storm over users and projects it (by rebuild: the projector
// is tested in package projection).
func (f *fixture) seed(t *testing.T, users []string, ops int) {
	t.Helper()
	ledgertest.Storm(t, f.store, users, 8, ops, 1)
	if _, err := f.history.RebuildAll(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) run(t *testing.T, o Options) Report {
	t.Helper()
	o.ProjectionGrace = time.Millisecond // nothing projects in these tests
	rep, err := f.rec.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func key(user, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"PK": &types.AttributeValueMemberS{Value: dynamo.PartitionKey(user)},
		"SK": &types.AttributeValueMemberS{Value: sk},
	}
}

func entrySK(v int64) string   { return fmt.Sprintf("E#%020d", v) }
func historySK(v int64) string { return fmt.Sprintf("H#%020d", v) }

func (f *fixture) get(t *testing.T, table, user, sk string) map[string]types.AttributeValue {
	t.Helper()
	out, err := f.env.Client.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &table, Key: key(user, sk), ConsistentRead: aws.Bool(true)})
	if err != nil || len(out.Item) == 0 {
		t.Fatalf("get %s %s %s: %v (found %d attributes)", table, user, sk, err, len(out.Item))
	}
	return out.Item
}

func (f *fixture) put(t *testing.T, table string, item map[string]types.AttributeValue) {
	t.Helper()
	if _, err := f.env.Client.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &table, Item: item}); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) set(t *testing.T, table, user, sk, attr string, v types.AttributeValue) {
	t.Helper()
	_, err := f.env.Client.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName: &table, Key: key(user, sk),
		UpdateExpression:          aws.String("SET #a = :v"),
		ExpressionAttributeNames:  map[string]string{"#a": attr},
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": v},
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) apply(t *testing.T, typ ledger.EntryType, r ledger.Request) ledger.Result {
	t.Helper()
	m, err := ledger.NewMutation(typ, r, ledger.DefaultScale)
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.store.Apply(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func num(s string) types.AttributeValue { return &types.AttributeValueMemberN{Value: s} }
func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

func TestACleanLedgerReconcilesWithoutFindings(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	users := ledgertest.Users("u", 30)
	for _, u := range users { // every user has a ledger, whatever the storm's racing workers pick
		f.apply(t, ledger.EntryGrant, ledger.Request{UserID: u, RequestID: "first", Amount: "1"})
	}
	f.seed(t, users, 600)
	var last Progress
	rep := f.run(t, Options{Segments: 3, Progress: func(p Progress) { last = p }})
	if !rep.Clean || len(rep.Findings) != 0 || len(rep.Proposed) != 0 {
		t.Fatalf("report = %+v, want clean", rep)
	}
	if rep.Users != 30 || rep.SumOfEntries != rep.SumOfBalances || rep.Entries < 30 {
		t.Errorf("users %d entries %d sums %s / %s; want 30 users and equal sums", rep.Users, rep.Entries, rep.SumOfEntries, rep.SumOfBalances)
	}
	if last.Users != 30 || last.TotalUsers != 30 {
		t.Errorf("last progress = %+v, want 30 of 30 users", last)
	}
}

// Each kind of corruption, written straight to the tables, on a user of its
// own; one reconciliation must name each with its kind and versions.
func TestEveryCorruptionIsFound(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	users := []string{"clean", "balance", "deleted", "gap", "duprequest", "projection", "overcap"}
	for _, u := range users {
		f.apply(t, ledger.EntryGrant, ledger.Request{UserID: u, RequestID: "g", Amount: "100"})
		f.apply(t, ledger.EntryPurchase, ledger.Request{UserID: u, RequestID: "p", Amount: "10"})
		f.apply(t, ledger.EntryRefund, ledger.Request{UserID: u, RequestID: "r", Amount: "10", PurchaseRequestID: "p"})
	}
	if _, err := f.history.RebuildAll(ctx); err != nil {
		t.Fatal(err)
	}

	// balance: the account says 107 where its entries add up to 100.
	f.set(t, f.env.Ledger, "balance", "A", "balance", num("107"))
	// deleted: entry 2 is gone.
	if _, err := f.env.Client.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &f.env.Ledger, Key: key("deleted", entrySK(2))}); err != nil {
		t.Fatal(err)
	}
	// gap: entry 3 moved to version 4, and the account to version 4.
	e3 := f.get(t, f.env.Ledger, "gap", entrySK(3))
	if _, err := f.env.Client.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &f.env.Ledger, Key: key("gap", entrySK(3))}); err != nil {
		t.Fatal(err)
	}
	e3["SK"], e3["version"] = str(entrySK(4)), num("4")
	f.put(t, f.env.Ledger, e3)
	f.set(t, f.env.Ledger, "gap", "A", "version", num("4"))
	f.set(t, f.env.Ledger, "gap", "R#r", "version", num("4"))
	// duprequest: a second request record claims the purchase.
	dup := f.get(t, f.env.Ledger, "duprequest", "R#p")
	dup["SK"], dup["request_id"] = str("R#p2"), str("p2")
	f.put(t, f.env.Ledger, dup)
	// projection: the history's purchase shows another amount.
	f.set(t, f.env.History, "projection", historySK(2), "amount", num("-11"))
	// overcap: a forged second refund of the purchase, consistent in every
	// other way (entry, request record, account, purchase, history).
	r2 := f.get(t, f.env.Ledger, "overcap", entrySK(3))
	r2["SK"], r2["version"], r2["request_id"], r2["balance_after"], r2["entry_id"] = str(entrySK(4)), num("4"), str("r2"), num("110"), str("01FORGED")
	f.put(t, f.env.Ledger, r2)
	rr2 := f.get(t, f.env.Ledger, "overcap", "R#r")
	rr2["SK"], rr2["request_id"], rr2["version"] = str("R#r2"), str("r2"), num("4")
	f.put(t, f.env.Ledger, rr2)
	f.set(t, f.env.Ledger, "overcap", "A", "balance", num("110"))
	f.set(t, f.env.Ledger, "overcap", "A", "buckets", &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"never": num("110")}})
	f.set(t, f.env.Ledger, "overcap", "A", "version", num("4"))
	f.set(t, f.env.Ledger, "overcap", entrySK(2), "refunded_amount", num("20"))
	if err := f.history.Rebuild(ctx, "overcap"); err != nil {
		t.Fatal(err)
	}

	rep := f.run(t, Options{})
	if rep.Clean {
		t.Fatal("a corrupted ledger reconciled clean")
	}
	byUser := map[string][]ledger.Finding{}
	for _, fd := range rep.Findings {
		byUser[fd.UserID] = append(byUser[fd.UserID], fd)
	}
	want := []struct {
		user, kind      string
		expected, found string // "" = any
		version         int64  // 0 = any
	}{
		{"balance", ledger.FindingBalanceMismatch, "100", "107", 3},
		{"deleted", ledger.FindingVersionGap, "2", "3", 3},
		{"deleted", ledger.FindingVersionMismatch, "2", "3", 0},
		{"deleted", ledger.FindingRequestWithoutEntry, "", "", 2},
		{"gap", ledger.FindingVersionGap, "3", "4", 4},
		{"duprequest", ledger.FindingDuplicateRequest, "", "p, p2", 2},
		{"projection", ledger.FindingProjectionMismatch, "", "", 2},
		{"overcap", ledger.FindingRefundOverCap, "<= 10", "20", 2},
		{"", ledger.FindingSumMismatch, "", "", 0},
	}
	for _, w := range want {
		found := slices.ContainsFunc(byUser[w.user], func(fd ledger.Finding) bool {
			return fd.Kind == w.kind && (w.expected == "" || fd.Expected == w.expected) && (w.found == "" || fd.Found == w.found) &&
				(w.version == 0 || slices.Contains(fd.Versions, w.version))
		})
		if !found {
			t.Errorf("no %s finding for %q (expected %q, found %q, version %d); its findings: %v", w.kind, w.user, w.expected, w.found, w.version, byUser[w.user])
		}
	}
	if len(byUser["clean"]) != 0 {
		t.Errorf("findings for the clean user: %v", byUser["clean"])
	}
	if len(byUser["overcap"]) != 1 {
		t.Errorf("the forged refund should break only the cap; findings: %v", byUser["overcap"])
	}
	if !slices.ContainsFunc(rep.Proposed, func(a Adjustment) bool {
		return a.UserID == "balance" && a.Amount == "7" && !a.Debit && a.ExplainBalance && a.ExpectedBalance == "107"
	}) {
		t.Errorf("proposed adjustments = %+v, want one explaining 7 of balance's 107", rep.Proposed)
	}
}

// Holds reconcile: a ledger with holds captured (and a capture refunded,
// whose refunded amount history keeps as a purchase's), voided and open is
// clean; the same with a hold's record edited by hand in DynamoDB, to say
// voided where its entries say captured, is found.
func TestAHoldRecordEditedByHandIsFound(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	expire := time.Now().Add(time.Hour)
	for _, u := range []string{"sound", "edited"} {
		f.apply(t, ledger.EntryGrant, ledger.Request{UserID: u, RequestID: "g", Amount: "100"})
		f.apply(t, ledger.EntryHold, ledger.Request{UserID: u, RequestID: "h1", Amount: "30", Expire: expire})
		f.apply(t, ledger.EntryCapture, ledger.Request{UserID: u, RequestID: "c1", HoldRequestID: "h1"})
		f.apply(t, ledger.EntryRefund, ledger.Request{UserID: u, RequestID: "r1", Amount: "12", PurchaseRequestID: "c1"})
		f.apply(t, ledger.EntryHold, ledger.Request{UserID: u, RequestID: "h2", Amount: "20", Expire: expire})
		f.apply(t, ledger.EntryRelease, ledger.Request{UserID: u, RequestID: "v2", HoldRequestID: "h2"})
		f.apply(t, ledger.EntryHold, ledger.Request{UserID: u, RequestID: "h3", Amount: "5", Expire: expire})
	}
	if _, err := f.history.RebuildAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rep := f.run(t, Options{}); !rep.Clean || len(rep.Findings) != 0 {
		t.Fatalf("a ledger with holds: %+v, want clean", rep.Findings)
	}
	f.set(t, f.env.Ledger, "edited", fmt.Sprintf("H#%020d", 2), "state", str(string(ledger.HoldVoided)))
	rep := f.run(t, Options{})
	if rep.Clean || len(rep.Findings) != 1 {
		t.Fatalf("findings %v, want one", rep.Findings)
	}
	if fd := rep.Findings[0]; fd.UserID != "edited" || fd.Kind != ledger.FindingHoldRecord || !slices.Equal(fd.Versions, []int64{2}) ||
		!strings.Contains(fd.Expected, "CAPTURED") || !strings.Contains(fd.Found, "VOIDED") {
		t.Errorf("finding %+v, want the edited user's hold record at version 2, captured, found voided", fd)
	}
}

func TestRepairProjectionThenASecondRunIsClean(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	users := ledgertest.Users("u", 5)
	f.seed(t, users, 100)
	f.set(t, f.env.History, "u1", historySK(1), "balance_after", num("999"))
	extra := f.get(t, f.env.History, "u2", historySK(1))
	extra["SK"], extra["version"] = str(historySK(9999)), num("9999")
	f.put(t, f.env.History, extra)

	rep := f.run(t, Options{})
	if rep.Clean || len(rep.Findings) == 0 {
		t.Fatalf("an altered projection reconciled clean: %+v", rep)
	}
	rep = f.run(t, Options{RepairProjection: true})
	if !rep.Clean || rep.Unrepaired() != 0 || len(rep.Findings) == 0 {
		t.Fatalf("repair report = %+v, want findings, all repaired", rep.Findings)
	}
	rep = f.run(t, Options{})
	if !rep.Clean || len(rep.Findings) != 0 {
		t.Fatalf("second run = %+v, want no findings", rep.Findings)
	}
}

func TestOnlyOneReconciliationRunsAtATime(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	held, err := f.leases.Acquire(context.Background(), LeaseKey, "someone-else", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.rec.Run(context.Background(), Options{})
	if ledger.ReasonOf(err) != ledger.ReasonReconcileRunning {
		t.Fatalf("Run while another holds the lease: %v, want %s", err, ledger.ReasonReconcileRunning)
	}
	if err := f.leases.Release(context.Background(), held); err != nil {
		t.Fatal(err)
	}
	f.run(t, Options{})
	// A finished run releases its lease: the next need not wait.
	f.run(t, Options{})
}

// writeAfterAudit is another client of the ledger: it commits once, right
// after the first read of a partition (the audit's), as purchases and
// refunds commit while a reconciliation runs.
type writeAfterAudit struct {
	*dynamo.Ledger
	after func(user string)
	once  atomic.Bool
}

func (w *writeAfterAudit) Partition(ctx context.Context, user string) (ledger.Partition, error) {
	a, err := w.Ledger.Partition(ctx, user)
	if err == nil && w.once.CompareAndSwap(false, true) {
		w.after(user)
	}
	return a, err
}

// A refund commits after the user's audit, and the projector applies it
// before the projection is compared: the history is ahead of the audit, and
// a healthy ledger still reconciles clean.
func TestAProjectionAheadOfTheAuditIsNoFinding(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.apply(t, ledger.EntryGrant, ledger.Request{UserID: "u", RequestID: "g", Amount: "100"})
	f.apply(t, ledger.EntryPurchase, ledger.Request{UserID: "u", RequestID: "p", Amount: "10"})
	if err := f.history.Rebuild(ctx, "u"); err != nil {
		t.Fatal(err)
	}
	store := &writeAfterAudit{Ledger: f.store, after: func(user string) {
		res := f.apply(t, ledger.EntryRefund, ledger.Request{UserID: user, RequestID: "r", Amount: "4", PurchaseRequestID: "p"})
		if err := f.history.Apply(ctx, []ledger.Entry{res.Entry}); err != nil { // as the projector does
			t.Error(err)
		}
	}}
	rep, err := New(store, f.history, f.leases).Run(ctx, Options{User: "u", ProjectionGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean {
		t.Errorf("a healthy ledger under a concurrent refund: %v", rep.Findings)
	}
	// The history still must be right: one ahead with a wrong refund is found.
	f.set(t, f.env.History, "u", fmt.Sprintf("H#%020d", 2), "refunded_amount", num("9"))
	store.once.Store(false)
	store.after = func(user string) {
		res := f.apply(t, ledger.EntryGrant, ledger.Request{UserID: user, RequestID: "g2", Amount: "1"})
		if err := f.history.Apply(ctx, []ledger.Entry{res.Entry}); err != nil {
			t.Error(err)
		}
	}
	rep, err = New(store, f.history, f.leases).Run(ctx, Options{User: "u", ProjectionGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) != 1 || rep.Findings[0].Kind != ledger.FindingProjectionMismatch {
		t.Errorf("a history ahead of the audit with a refunded amount of 9 for 4: %v, want one projection_mismatch", rep.Findings)
	}
}

// projectAfterState is the history as the projector moves it: once, right
// after a read of the state, it commits another entry's history.
type projectAfterState struct {
	*projection.History
	after func(user string)
	once  atomic.Bool
}

func (h *projectAfterState) State(ctx context.Context, user string) (history.State, error) {
	st, err := h.History.State(ctx, user)
	if err == nil && h.once.CompareAndSwap(false, true) {
		h.after(user)
	}
	return st, err
}

// The projector commits between the reads of the history's state and of its
// items (a user written while reconciliation runs): the items are ahead of
// the state, and a healthy ledger still reconciles clean.
func TestHistoryMovingBetweenItsReadsIsNoFinding(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.apply(t, ledger.EntryGrant, ledger.Request{UserID: "u", RequestID: "g", Amount: "100"})
	f.apply(t, ledger.EntryPurchase, ledger.Request{UserID: "u", RequestID: "p", Amount: "10"})
	if err := f.history.Rebuild(ctx, "u"); err != nil {
		t.Fatal(err)
	}
	history := &projectAfterState{History: f.history, after: func(user string) {
		for _, r := range []ledger.Request{
			{UserID: user, RequestID: "g2", Amount: "1"},
			{UserID: user, RequestID: "r", Amount: "4", PurchaseRequestID: "p"},
		} {
			typ := ledger.EntryGrant
			if r.PurchaseRequestID != "" {
				typ = ledger.EntryRefund
			}
			res := f.apply(t, typ, r)
			if err := f.history.Apply(ctx, []ledger.Entry{res.Entry}); err != nil { // as the projector does
				t.Error(err)
			}
		}
	}}
	rep, err := New(f.store, history, f.leases).Run(ctx, Options{User: "u", ProjectionGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !history.once.Load() {
		t.Fatal("the history never moved: the test tests nothing")
	}
	if !rep.Clean {
		t.Errorf("a healthy ledger whose history moved between its reads: %v", rep.Findings)
	}
}
