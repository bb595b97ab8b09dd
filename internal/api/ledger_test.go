package api_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"github.com/shopspring/decimal"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/memory"
	"github.com/pointledger/pointledger/internal/ledgertest"
	"github.com/pointledger/pointledger/internal/servetest"
)

type testServer struct {
	srv    *servetest.Server
	client pointledgerv1connect.LedgerServiceClient
	admin  pointledgerv1connect.AdminServiceClient
	url    string       // for raw HTTP requests (hostile_test.go)
	http   *http.Client // the clients' own
}

// newServer serves the API over HTTP on a fresh in-memory ledger.
func newServer(tb testing.TB) *testServer { return newServerWith(tb, servetest.Options{}) }

// newServerWith is the one place the API's test servers are built
// (servetest.New: ledgerd's handlers with ledgerd's handler options).
func newServerWith(tb testing.TB, o servetest.Options) *testServer {
	tb.Helper()
	srv := servetest.New(tb, o)
	return &testServer{srv: srv, client: srv.Ledger, admin: srv.Admin, url: srv.URL, http: srv.HTTP}
}

func (s *testServer) grant(tb testing.TB, user, requestID, amount string) *pb.GrantResponse {
	tb.Helper()
	res, err := s.client.Grant(context.Background(), connect.NewRequest(&pb.GrantRequest{UserId: user, RequestId: requestID, Amount: amount}))
	if err != nil {
		tb.Fatalf("grant %s to %s: %v", amount, user, err)
	}
	return res.Msg
}

func (s *testServer) purchase(user, requestID, amount string) (*pb.PurchaseResponse, error) {
	res, err := s.client.Purchase(context.Background(), connect.NewRequest(&pb.PurchaseRequest{UserId: user, RequestId: requestID, Amount: amount}))
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

func (s *testServer) refund(user, requestID, purchaseRequestID, amount string) (*pb.RefundResponse, error) {
	res, err := s.client.Refund(context.Background(), connect.NewRequest(&pb.RefundRequest{
		UserId: user, RequestId: requestID, PurchaseRequestId: purchaseRequestID, Amount: amount,
	}))
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

// entries returns all of a user's entries, read through the API.
func (s *testServer) entries(tb testing.TB, user string) []*pb.Entry {
	tb.Helper()
	var all []*pb.Entry
	token := ""
	for {
		res, err := s.client.ListEntries(context.Background(), connect.NewRequest(&pb.ListEntriesRequest{UserId: user, PageSize: 100, PageToken: token}))
		if err != nil {
			tb.Fatalf("list entries of %s: %v", user, err)
		}
		all = append(all, res.Msg.Entries...)
		if token = res.Msg.NextPageToken; token == "" {
			return all
		}
	}
}

// assertSound checks the user's account against the fold of all its
// entries in the store (ledgertest.Sound: versions 1..N, the fold's
// version, balance and buckets), and that the balance read through the API
// is the fold of the entries read through the API, each balance_after the
// fold so far. It returns that balance.
func (s *testServer) assertSound(tb testing.TB, user string) decimal.Decimal {
	tb.Helper()
	ledgertest.Sound(tb, s.srv.Store, user)
	fold := decimal.Zero
	for i, e := range s.entries(tb, user) {
		if e.Version != int64(i+1) {
			tb.Errorf("%s: entry %d has version %d", user, i+1, e.Version)
		}
		fold = fold.Add(decimal.RequireFromString(e.Amount))
		if !fold.Equal(decimal.RequireFromString(e.BalanceAfter)) {
			tb.Errorf("%s: entry %d balance_after %s, fold %s", user, e.Version, e.BalanceAfter, fold)
		}
	}
	bal, err := s.client.GetBalance(context.Background(), connect.NewRequest(&pb.GetBalanceRequest{UserId: user}))
	if err != nil {
		tb.Fatal(err)
	}
	if !decimal.RequireFromString(bal.Msg.Balance).Equal(fold) {
		tb.Errorf("%s: balance %s, fold of entries %s", user, bal.Msg.Balance, fold)
	}
	return fold
}

// assertWroteNothing fails unless the store and the history hold exactly
// what before held.
func (s *testServer) assertWroteNothing(tb testing.TB, what string, before memory.Snapshot) {
	tb.Helper()
	added, changed, removed := before.Diff(s.srv.Snapshot())
	if len(added)+len(changed)+len(removed) > 0 {
		tb.Errorf("%s wrote: added %v, changed %v, removed %v", what, added, changed, removed)
	}
}

// reason returns the Connect code and ErrorInfo reason of err.
func reason(err error) (connect.Code, string) {
	code, info := servetest.ErrorInfo(err)
	return code, info.GetReason()
}

// replayedRefusal says whether err's ErrorInfo marks it a replayed refusal
// (metadata replayed: "true").
func replayedRefusal(err error) bool {
	_, info := servetest.ErrorInfo(err)
	return info.GetMetadata()["replayed"] == "true"
}

// A refused request sent again is refused again, with the same code, reason
// and message, marked replayed, even once the balance would cover it.
func TestARefusalIsReplayed(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.grant(t, "u1", "g", "10")
	_, first := s.purchase("u1", "p", "30")
	if code, why := reason(first); code != connect.CodeFailedPrecondition || why != ledger.ReasonInsufficientBalance || replayedRefusal(first) {
		t.Fatalf("purchase of 30 from 10: %v, want failed_precondition/%s, not replayed", first, ledger.ReasonInsufficientBalance)
	}
	s.grant(t, "u1", "g2", "50")
	res, again := s.purchase("u1", "p", "30")
	if code, why := reason(again); code != connect.CodeFailedPrecondition || why != ledger.ReasonInsufficientBalance || !replayedRefusal(again) {
		t.Fatalf("the same purchase after a grant: %v, %v; want failed_precondition/%s, replayed", res, again, ledger.ReasonInsufficientBalance)
	}
	if again.Error() != first.Error() {
		t.Errorf("the replayed refusal says %q, the first said %q", again, first)
	}
	if bal := s.assertSound(t, "u1"); bal.String() != "60" {
		t.Errorf("balance = %s, want 60: the refused purchase must not apply", bal)
	}
}

func TestDoubleSpendAttack(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.grant(t, "victim", "grant", "500")

	const attackers = 100
	var succeeded, refused atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range attackers {
		wg.Go(func() {
			<-start
			_, err := s.purchase("victim", fmt.Sprint("spend-", i), "10")
			code, why := reason(err)
			switch {
			case err == nil:
				succeeded.Add(1)
			case code == connect.CodeFailedPrecondition && why == ledger.ReasonInsufficientBalance:
				refused.Add(1)
			default:
				t.Errorf("purchase %d: %v", i, err)
			}
		})
	}
	close(start)
	wg.Wait()

	if succeeded.Load() != 50 || refused.Load() != 50 {
		t.Errorf("%d purchases succeeded and %d were refused, want exactly 50 and 50", succeeded.Load(), refused.Load())
	}
	if bal := s.assertSound(t, "victim"); !bal.IsZero() {
		t.Errorf("balance = %s, want 0", bal)
	}
	if got := len(s.entries(t, "victim")); got != 51 {
		t.Errorf("%d entries, want 51 (versions 1..51)", got)
	}
}

// storm runs ops concurrent workers, each doing a random grant, purchase or
// refund on a random user, and checks afterwards that every acknowledged
// request was applied exactly once: each user's balance is what the
// acknowledged responses add up to.
func storm(t *testing.T, s *testServer, users []string, workers, ops int) {
	t.Helper()
	type book struct {
		mu        sync.Mutex
		expected  decimal.Decimal
		purchases []string // acknowledged purchases, to refund
	}
	books := map[string]*book{}
	for _, u := range users {
		s.grant(t, u, "seed", "200")
		books[u] = &book{expected: decimal.NewFromInt(200)}
	}
	var counts [3]atomic.Int64 // ok, refused, other
	var wg sync.WaitGroup
	var next atomic.Int64
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for {
				i := next.Add(1)
				if i > int64(ops) {
					return
				}
				u := users[rng.IntN(len(users))]
				b := books[u]
				id := fmt.Sprint("op-", i)
				amount := decimal.NewFromInt(int64(1 + rng.IntN(30)))
				var delta decimal.Decimal
				var err error
				switch k := rng.IntN(10); {
				case k < 2:
					_, err = s.client.Grant(context.Background(), connect.NewRequest(&pb.GrantRequest{UserId: u, RequestId: id, Amount: amount.String()}))
					delta = amount
				case k < 7:
					_, err = s.purchase(u, id, amount.String())
					delta = amount.Neg()
					if err == nil {
						b.mu.Lock()
						b.purchases = append(b.purchases, id+":"+amount.String())
						b.mu.Unlock()
					}
				default:
					b.mu.Lock()
					if len(b.purchases) == 0 {
						b.mu.Unlock()
						continue
					}
					p := b.purchases[rng.IntN(len(b.purchases))]
					b.mu.Unlock()
					pid, pamount, _ := strings.Cut(p, ":")
					// Refund a part of the purchase; repeated refunds of one
					// purchase race each other against its cap.
					amount = decimal.RequireFromString(pamount).Div(decimal.NewFromInt(2)).Ceil()
					_, err = s.refund(u, id, pid, amount.String())
					delta = amount
				}
				code, why := reason(err)
				switch {
				case err == nil:
					counts[0].Add(1)
					b.mu.Lock()
					b.expected = b.expected.Add(delta)
					b.mu.Unlock()
				case code == connect.CodeFailedPrecondition && (why == ledger.ReasonInsufficientBalance || why == ledger.ReasonRefundExceedsPurchase):
					counts[1].Add(1)
				default:
					counts[2].Add(1)
					t.Errorf("%s on %s: %v", id, u, err)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d acknowledged, %d refused, %d other errors", counts[0].Load(), counts[1].Load(), counts[2].Load())
	if counts[0].Load() == 0 || counts[1].Load() == 0 {
		t.Errorf("the storm should both succeed and be refused; it did %d and %d", counts[0].Load(), counts[1].Load())
	}
	for _, u := range users {
		if bal := s.assertSound(t, u); !bal.Equal(books[u].expected) {
			t.Errorf("%s: balance %s, but the acknowledged requests add up to %s", u, bal, books[u].expected)
		}
	}
}

func TestStormOnOneUser(t *testing.T) {
	t.Parallel()
	storm(t, newServer(t), []string{"hot"}, 64, 150)
}

func TestStormOnFiftyUsers(t *testing.T) {
	t.Parallel()
	users := make([]string, 50)
	for i := range users {
		users[i] = fmt.Sprint("user-", i)
	}
	storm(t, newServer(t), users, 64, 500)
}

func TestIdempotentReplay(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.grant(t, "u1", "g", "100")
	first, err := s.purchase("u1", "buy-1", "30")
	if err != nil {
		t.Fatal(err)
	}
	if first.Replayed {
		t.Error("the first purchase says replayed")
	}
	before := s.srv.Snapshot()

	again, err := s.purchase("u1", "buy-1", "30")
	if err != nil {
		t.Fatal(err)
	}
	if !again.Replayed || again.Entry.EntryId != first.Entry.EntryId || again.Entry.Version != first.Entry.Version || again.Balance != first.Balance {
		t.Errorf("replay = %v, want the original entry %v with replayed", again, first)
	}
	_, err = s.purchase("u1", "buy-1", "31")
	if code, why := reason(err); code != connect.CodeAlreadyExists || why != ledger.ReasonRequestIDReused {
		t.Errorf("same request_id, other amount: %v, want already_exists/%s", err, ledger.ReasonRequestIDReused)
	}
	_, err = s.client.Grant(context.Background(), connect.NewRequest(&pb.GrantRequest{UserId: "u1", RequestId: "buy-1", Amount: "30"}))
	if code, _ := reason(err); code != connect.CodeAlreadyExists {
		t.Errorf("same request_id on a grant: %v, want already_exists", err)
	}
	for name, other := range map[string]*pb.PurchaseRequest{
		"order_id": {UserId: "u1", RequestId: "buy-1", Amount: "30", OrderId: "another order"},
		"metadata": {UserId: "u1", RequestId: "buy-1", Amount: "30", Metadata: map[string]string{"k": "v"}},
	} {
		_, err := s.client.Purchase(context.Background(), connect.NewRequest(other))
		if code, _ := reason(err); code != connect.CodeAlreadyExists {
			t.Errorf("same request_id, other %s: %v, want already_exists", name, err)
		}
	}
	s.assertWroteNothing(t, "replays", before)
	// A replay still returns the original result after the balance moved on.
	if _, err := s.purchase("u1", "buy-2", "70"); err != nil {
		t.Fatal(err)
	}
	late, err := s.purchase("u1", "buy-1", "30")
	if err != nil || !late.Replayed || late.Balance != "70" {
		t.Errorf("replay after the balance is spent: %v, %v; want the original result (balance 70)", late, err)
	}
	s.assertSound(t, "u1")
}

func TestConcurrentReplaysOfANewRequest(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.grant(t, "u1", "g", "100")
	const n = 50
	results := make([]*pb.PurchaseResponse, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			res, err := s.purchase("u1", "the-one", "5")
			if err != nil {
				t.Errorf("replay %d: %v", i, err)
			}
			results[i] = res
		})
	}
	wg.Wait()
	fresh := 0
	var first *pb.PurchaseResponse
	for _, r := range results {
		if r == nil {
			continue
		}
		if first == nil {
			first = r
		}
		if !r.Replayed {
			fresh++
		}
		if r.Entry.EntryId != first.Entry.EntryId {
			t.Errorf("replays answered with different entries: %s and %s", r.Entry.EntryId, first.Entry.EntryId)
		}
	}
	if fresh != 1 {
		t.Errorf("%d responses say not replayed, want exactly 1", fresh)
	}
	if bal := s.assertSound(t, "u1"); !bal.Equal(decimal.NewFromInt(95)) {
		t.Errorf("balance = %s, want 95 (one purchase)", bal)
	}
	if got := len(s.entries(t, "u1")); got != 2 {
		t.Errorf("%d entries, want 2", got)
	}
}

func TestRefunds(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.grant(t, "u1", "g", "100")
	if _, err := s.purchase("u1", "buy", "50"); err != nil {
		t.Fatal(err)
	}
	r1, err := s.refund("u1", "refund-1", "buy", "30")
	if err != nil {
		t.Fatal(err)
	}
	if r1.Entry.Type != pb.EntryType_ENTRY_TYPE_REFUND || r1.Entry.Amount != "30" || r1.Balance != "80" || r1.Entry.PurchaseRequestId != "buy" {
		t.Errorf("refund = %v", r1)
	}
	before := s.srv.Snapshot()

	_, err = s.refund("u1", "refund-2", "buy", "20.01")
	if code, why := reason(err); code != connect.CodeFailedPrecondition || why != ledger.ReasonRefundExceedsPurchase {
		t.Errorf("refunds over the purchase: %v, want failed_precondition/%s", err, ledger.ReasonRefundExceedsPurchase)
	}
	_, err = s.refund("u1", "refund-3", "no-such-purchase", "1")
	if code, why := reason(err); code != connect.CodeNotFound || why != ledger.ReasonPurchaseNotFound {
		t.Errorf("refund of an unknown purchase: %v, want not_found/%s", err, ledger.ReasonPurchaseNotFound)
	}
	_, err = s.refund("u1", "refund-4", "g", "1") // a grant is not a purchase
	if code, _ := reason(err); code != connect.CodeNotFound {
		t.Errorf("refund of a grant: %v, want not_found", err)
	}
	_, err = s.refund("u2", "refund-5", "buy", "1") // another user's purchase
	if code, _ := reason(err); code != connect.CodeNotFound {
		t.Errorf("refund of another user's purchase: %v, want not_found", err)
	}
	// The refused refunds wrote their 4 refusal records, and nothing else.
	after := s.srv.Snapshot()
	added, changed, removed := before.Diff(after)
	want := []string{`ledger "u1" request "refund-2"`, `ledger "u1" request "refund-3"`, `ledger "u1" request "refund-4"`, `ledger "u2" request "refund-5"`}
	if !slices.Equal(added, want) || len(changed)+len(removed) > 0 {
		t.Errorf("refused refunds wrote: added %v, changed %v, removed %v; want their 4 refusal records only (%v)", added, changed, removed, want)
	}
	for _, k := range added {
		if !strings.HasPrefix(after[k], memory.RefusalPrefix) {
			t.Errorf("%s = %s, want a refusal", k, after[k])
		}
	}

	if _, err := s.refund("u1", "refund-6", "buy", "20"); err != nil {
		t.Errorf("refund of exactly the rest: %v", err)
	}
	entries := s.entries(t, "u1")
	if p := entries[1]; p.Type != pb.EntryType_ENTRY_TYPE_PURCHASE || p.RefundedAmount != "50" {
		t.Errorf("purchase entry = %v, want refunded_amount 50", p)
	}
	if bal := s.assertSound(t, "u1"); !bal.Equal(decimal.NewFromInt(100)) {
		t.Errorf("balance = %s, want 100", bal)
	}
}

func TestBadInputWritesNothing(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.grant(t, "u1", "g", "100")
	if _, err := s.purchase("u1", "buy", "10"); err != nil {
		t.Fatal(err)
	}
	before := s.srv.Snapshot()
	bigMetadata := map[string]string{}
	for i := range 40 {
		bigMetadata[fmt.Sprint("key", i)] = strings.Repeat("x", 200)
	}
	ctx := context.Background()
	purchase := func(mod func(*pb.PurchaseRequest)) func() error {
		return func() error {
			r := &pb.PurchaseRequest{UserId: "u1", RequestId: "bad", Amount: "1"}
			mod(r)
			_, err := s.client.Purchase(ctx, connect.NewRequest(r))
			return err
		}
	}
	tests := []struct {
		name   string
		call   func() error
		reason string
	}{
		{"negative", purchase(func(r *pb.PurchaseRequest) { r.Amount = "-5" }), ledger.ReasonInvalidAmount},
		{"zero", purchase(func(r *pb.PurchaseRequest) { r.Amount = "0" }), ledger.ReasonInvalidAmount},
		{"NaN", purchase(func(r *pb.PurchaseRequest) { r.Amount = "NaN" }), ledger.ReasonInvalidAmount},
		{"exponent", purchase(func(r *pb.PurchaseRequest) { r.Amount = "1e3" }), ledger.ReasonInvalidAmount},
		{"too many decimals", purchase(func(r *pb.PurchaseRequest) { r.Amount = "1.001" }), ledger.ReasonInvalidAmount},
		{"19 integer digits", purchase(func(r *pb.PurchaseRequest) { r.Amount = "1000000000000000000" }), ledger.ReasonInvalidAmount},
		{"empty amount", purchase(func(r *pb.PurchaseRequest) { r.Amount = "" }), ledger.ReasonInvalidAmount},
		{"empty user", purchase(func(r *pb.PurchaseRequest) { r.UserId = "" }), ledger.ReasonInvalidUserID},
		{"key injection in user", purchase(func(r *pb.PurchaseRequest) { r.UserId = "u1#R#buy" }), ledger.ReasonInvalidUserID},
		{"empty request id", purchase(func(r *pb.PurchaseRequest) { r.RequestId = "" }), ledger.ReasonInvalidRequestID},
		{"oversized metadata", purchase(func(r *pb.PurchaseRequest) { r.Metadata = bigMetadata }), ledger.ReasonInvalidMetadata},
		{"grant of 1e3", func() error {
			_, err := s.client.Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: "u1", RequestId: "bad", Amount: "1e3"}))
			return err
		}, ledger.ReasonInvalidAmount},
		{"refund without purchase", func() error {
			_, err := s.client.Refund(ctx, connect.NewRequest(&pb.RefundRequest{UserId: "u1", RequestId: "bad", Amount: "1"}))
			return err
		}, ledger.ReasonInvalidRequestID},
		{"balance of empty user", func() error {
			_, err := s.client.GetBalance(ctx, connect.NewRequest(&pb.GetBalanceRequest{}))
			return err
		}, ledger.ReasonInvalidUserID},
		{"negative page size", func() error {
			_, err := s.client.ListEntries(ctx, connect.NewRequest(&pb.ListEntriesRequest{UserId: "u1", PageSize: -1}))
			return err
		}, ledger.ReasonInvalidPageSize},
		{"bad page token", func() error {
			_, err := s.client.ListEntries(ctx, connect.NewRequest(&pb.ListEntriesRequest{UserId: "u1", PageToken: "nope"}))
			return err
		}, ledger.ReasonInvalidPageToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if code, why := reason(err); code != connect.CodeInvalidArgument || why != tt.reason {
				t.Errorf("error = %v (%v, %q), want invalid_argument/%s", err, code, why, tt.reason)
			}
		})
	}
	s.assertWroteNothing(t, "bad input", before)
	s.assertSound(t, "u1")
}

func TestBalanceOfANewUser(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	res, err := s.client.GetBalance(context.Background(), connect.NewRequest(&pb.GetBalanceRequest{UserId: "nobody"}))
	if err != nil {
		t.Fatal(err)
	}
	if res.Msg.Balance != "0" || res.Msg.Version != 0 || res.Msg.Status != pb.AccountStatus_ACCOUNT_STATUS_ACTIVE {
		t.Errorf("balance of a new user = %v, want 0, version 0, active", res.Msg)
	}
	_, err = s.purchase("nobody", "p", "1")
	if code, why := reason(err); code != connect.CodeFailedPrecondition || why != ledger.ReasonInsufficientBalance {
		t.Errorf("purchase by a new user: %v, want failed_precondition/%s", err, ledger.ReasonInsufficientBalance)
	}
	// The refusal's record only: no account, no entry, no history.
	records := s.srv.Snapshot()
	if rec, ok := records[`ledger "nobody" request "p"`]; len(records) != 1 || !ok || !strings.HasPrefix(rec, memory.RefusalPrefix) {
		t.Errorf("reads and a refused purchase wrote %v, want the refusal's record only", records)
	}
	if acct := ledgertest.Sound(t, s.srv.Store, "nobody"); acct.Version != 0 || !acct.Balance.IsZero() {
		t.Errorf("account of a user with a refusal only: %+v, want none (version 0)", acct)
	}
}

func TestListHistory(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	ctx := context.Background()
	s.grant(t, "u1", "g", "100")
	for _, id := range []string{"p1", "p2", "p3"} {
		if _, err := s.purchase("u1", id, "10"); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []struct{ id, purchase, amount string }{{"r1", "p1", "10"}, {"r2", "p2", "4"}} {
		if _, err := s.refund("u1", r.id, r.purchase, r.amount); err != nil {
			t.Fatal(err)
		}
	}
	// The projector is tested in package projection; here the history
	// follows the store, and is rebuilt from it as an admin would.
	if err := s.srv.History.Rebuild(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	res, err := s.client.ListHistory(ctx, connect.NewRequest(&pb.ListHistoryRequest{
		UserId: "u1", Types: []pb.EntryType{pb.EntryType_ENTRY_TYPE_PURCHASE},
	}))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, it := range res.Msg.Items {
		got = append(got, fmt.Sprintf("%s %s %s %s", it.RequestId, it.Amount, it.RefundedAmount, it.RefundStatus))
	}
	want := []string{
		"p3 -10 0 REFUND_STATUS_NOT_REFUNDED",
		"p2 -10 4 REFUND_STATUS_PARTIALLY_REFUNDED",
		"p1 -10 10 REFUND_STATUS_REFUNDED",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("purchases, newest first:\n got %v\nwant %v", got, want)
	}

	first, err := s.client.ListHistory(ctx, connect.NewRequest(&pb.ListHistoryRequest{UserId: "u1", PageSize: 2}))
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Msg.Items) != 2 || first.Msg.Items[0].Version != 6 || first.Msg.NextPageToken == "" {
		t.Fatalf("first page = %v, want versions 6 and 5 and a next page", first.Msg)
	}
	for name, req := range map[string]*pb.ListHistoryRequest{
		"token with other filters": {UserId: "u1", PageToken: first.Msg.NextPageToken, OldestFirst: true},
		"unspecified type":         {UserId: "u1", Types: []pb.EntryType{pb.EntryType_ENTRY_TYPE_UNSPECIFIED}},
		"end before start":         {UserId: "u1", StartTime: first.Msg.Items[0].CreateTime, EndTime: first.Msg.Items[1].CreateTime},
		"empty user":               {},
	} {
		_, err := s.client.ListHistory(ctx, connect.NewRequest(req))
		if code, _ := reason(err); code != connect.CodeInvalidArgument {
			t.Errorf("%s: %v, want invalid_argument", name, err)
		}
	}
}
