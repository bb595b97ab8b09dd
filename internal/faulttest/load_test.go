package faulttest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/shopspring/decimal"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pointledger/pointledger/client"
	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/ledger"
)

// sent is one request as its client saw it, after all its retries.
type sent struct {
	user, id string
	typ      ledger.EntryType // GRANT, PURCHASE, REFUND, HOLD (Authorize), CAPTURE, RELEASE (Void) or REVERSAL (ReverseGrant)
	kind     string           // what the load meant by it, for the report and the checks (the kind… constants)
	budget   string           // grants: the budget they draw on ("": none)
	// pointKind: grants, the kind of their points ("": standard; see
	// kinds_test.go); merchant: purchases and holds, where they spend.
	pointKind, merchant string
	quiet               bool            // a quiet user's (nextQuiet)
	amount              decimal.Decimal // zero for a void, a capture of all of its hold, and a reversal of all that is left
	ttl                 time.Duration   // grants: expiring after this (0: never; pending grants: counted from their effective time); holds: their ttl
	delay               time.Duration   // grants: pending for this long from when they are made (effective_delay; 0: spendable at once)
	hold                *sent           // captures and voids: the authorization of the hold
	of                  *sent           // refunds: the purchase or capture they give back; reversals: the grant they take back
	// left: acknowledged purchases and captures, what is left to refund of
	// them; acknowledged grants, what is left to reverse.
	left decimal.Decimal
	// want: reversals, what they take back if applied (what was left of
	// the grant, for one that names no amount).
	want decimal.Decimal
	// repeat: sent again by request id once answered; again is that
	// second answer.
	repeat    bool
	again     answer
	acked     bool
	entryID   string    // "" for an authorization, whose answer is its hold
	effective time.Time // acknowledged pending grants: when their points become spendable, as the answer's entry says
	answered  time.Time // when the definite answer came
	last      string    // the last answer's code
	reason    string    // and its reason, if it was refused
}

// answer is a definite answer to a request sent again by its request id.
type answer struct {
	last, reason, entryID string
	replayed              bool
}

// The kinds of request the load sends.
const (
	kindGrant         = "grant"
	kindGrantExpiring = "grant expiring"
	kindPurchase      = "purchase"
	kindRefundPart    = "refund of part of what is left"
	kindRefundRest    = "refund of all that is left"
	kindRefundOverCap = "refund over what is left"
	kindAuthorize     = "authorize"
	kindCaptureAll    = "capture all"
	kindCapturePart   = "capture part"
	kindVoid          = "void"
	refundOfCapture   = " (of a capture)"
	refundRepeated    = " (again)"
)

// spent is what a purchase or a capture spends: its amount, or all of the
// hold for a capture that names none.
func (s *sent) spent() decimal.Decimal {
	if s.typ == ledger.EntryCapture && s.amount.IsZero() {
		return s.hold.amount
	}
	return s.amount
}

// call sends s once and returns the entry its answer names (none for an
// authorization).
func call(ctx context.Context, client pointledgerv1connect.LedgerServiceClient, s *sent) (*pb.Entry, error) {
	switch s.typ {
	case ledger.EntryGrant:
		r := &pb.GrantRequest{UserId: s.user, Amount: s.amount.String(), RequestId: s.id, BudgetId: s.budget, Kind: s.pointKind}
		if s.ttl > 0 {
			r.Ttl = durationpb.New(s.ttl) // the same ttl on every retry: the same request
		}
		if s.delay > 0 {
			// A delay, not an effective_time: the request's hash covers the
			// delay as sent, so a retry is a replay that answers the first
			// acceptance's entry and effective time; an effective_time would
			// be refused INVALID_EFFECTIVE_TIME once past, before the replay.
			r.EffectiveDelay = durationpb.New(s.delay)
		}
		res, err := client.Grant(ctx, connect.NewRequest(r))
		return entryOf(res, err)
	case ledger.EntryReversal:
		r := &pb.ReverseGrantRequest{UserId: s.user, RequestId: s.id, GrantRequestId: s.of.id, Reason: "order returned"}
		if !s.amount.IsZero() {
			r.Amount = s.amount.String()
		}
		res, err := client.ReverseGrant(ctx, connect.NewRequest(r))
		return entryOf(res, err)
	case ledger.EntryHold:
		_, err := client.Authorize(ctx, connect.NewRequest(&pb.AuthorizeRequest{UserId: s.user, Amount: s.amount.String(), RequestId: s.id, Ttl: durationpb.New(s.ttl), MerchantId: s.merchant}))
		return nil, err
	case ledger.EntryCapture:
		r := &pb.CaptureRequest{UserId: s.user, RequestId: s.id, HoldRequestId: s.hold.id}
		if !s.amount.IsZero() {
			r.Amount = s.amount.String()
		}
		res, err := client.Capture(ctx, connect.NewRequest(r))
		return entryOf(res, err)
	case ledger.EntryRelease:
		res, err := client.Void(ctx, connect.NewRequest(&pb.VoidRequest{UserId: s.user, RequestId: s.id, HoldRequestId: s.hold.id}))
		return entryOf(res, err)
	case ledger.EntryPurchase:
		res, err := client.Purchase(ctx, connect.NewRequest(&pb.PurchaseRequest{UserId: s.user, Amount: s.amount.String(), RequestId: s.id, MerchantId: s.merchant}))
		return entryOf(res, err)
	case ledger.EntryRefund:
		res, err := client.Refund(ctx, connect.NewRequest(&pb.RefundRequest{UserId: s.user, Amount: s.amount.String(), RequestId: s.id, PurchaseRequestId: s.of.id}))
		return entryOf(res, err)
	case ledger.EntryAdjustment, ledger.EntryExpiration, ledger.EntryMaturation: // not sent
	}
	return nil, fmt.Errorf("the load sends no %s", s.typ)
}

// entryOf is the entry of a mutation's answer.
func entryOf[M any, P interface {
	*M
	GetEntry() *pb.Entry
}](res *connect.Response[M], err error) (*pb.Entry, error) {
	if err != nil {
		return nil, err
	}
	return P(res.Msg).GetEntry(), nil
}

// desk is what one worker may still act on: its acknowledged holds not yet
// captured or voided, its acknowledged purchases and captures with
// something left to refund, and its acknowledged grants (of busy users,
// from no budget) with something left to reverse. A worker alone acts on
// them, so it knows what is left of each.
type desk struct {
	holds      []*sent
	refundable []*sent
	reversible []*sent
	// maturing: its acknowledged grants pending for seconds, whose user's
	// balance it reads once they are effective: before a mutation or the
	// sweeper has put them on the record, the read counts them all the
	// same.
	maturing []*sent
	began    bool // the worker has sent its first request
}

// next is a worker's next request: mostly purchases and grants (half of
// them expiring, some within the run), authorizations (whose ttls end
// within the run, so that some holds expire), captures (of all of the hold
// or part of it) and voids of the worker's holds, and refunds (partial,
// repeated, and over what is left) of its purchases and captures, grants
// from the campaign's budget (budget_test.go), which runs dry during the
// run, pending grants and reversals of its grants (pending_test.go). Now
// and then it is a quiet user's turn. A worker's first request is a grant
// pending for an hour, so that every run has points pending at its end.
func next(rng *rand.Rand, sh shape, d *desk, id string) *sent {
	s := &sent{user: sh.users[rng.IntN(len(sh.users))], typ: ledger.EntryPurchase, kind: kindPurchase, id: id, amount: decimal.NewFromInt(int64(1 + rng.IntN(3)))}
	if !d.began {
		d.began = true
		pendingForLong(s)
		return s
	}
	switch k := rng.IntN(50); {
	case k < 1:
		nextQuiet(rng, sh, s)
	case k < 9:
		s.typ, s.kind, s.amount = ledger.EntryGrant, kindGrant, decimal.NewFromInt(20)
		if rng.IntN(2) == 0 {
			s.kind, s.ttl = kindGrantExpiring, time.Duration(2+rng.IntN(30))*time.Second
		}
		s.pointKind = pointKindOf(rng, s.ttl > 0)
	case k < 15:
		s.typ, s.kind, s.ttl = ledger.EntryHold, kindAuthorize, time.Duration(2+rng.IntN(20))*time.Second
		s.merchant = merchantOf(rng)
	case k < 21 && len(d.holds) > 0:
		i := rng.IntN(len(d.holds))
		nextResolution(rng, s, d.holds[i])
		d.holds = slices.Delete(d.holds, i, i+1)
	case k < 27 && len(d.refundable) > 0:
		nextRefund(rng, s, d.refundable[rng.IntN(len(d.refundable))])
	case k >= 27 && k < 31:
		nextBudgetGrant(rng, s)
	case k >= 40 && k < 45:
		nextPendingGrant(rng, s)
	case k >= 45 && len(d.reversible) > 0:
		nextReversal(rng, s, d.reversible)
	default:
		s.merchant = merchantOf(rng) // a purchase
	}
	return s
}

// nextQuiet makes s a request for a quiet user: a grant, expiring within
// seconds or never, or pending for seconds, or a short authorization.
// Quiet users see a request every few seconds at most, so their points
// and holds mostly expire, and their pending grants mature, before their
// next mutation: the sweeper puts those on the record.
func nextQuiet(rng *rand.Rand, sh shape, s *sent) {
	s.user, s.quiet = sh.quietUsers[rng.IntN(len(sh.quietUsers))], true
	ttl := time.Duration(2+rng.IntN(4)) * time.Second
	switch rng.IntN(5) {
	case 0:
		s.typ, s.kind, s.amount = ledger.EntryGrant, kindGrant, decimal.NewFromInt(5)
	case 1:
		s.typ, s.kind, s.amount, s.ttl = ledger.EntryHold, kindAuthorize, decimal.NewFromInt(1), ttl
	case 2: // pending for as long: the sweeper matures it
		s.typ, s.kind, s.amount, s.delay = ledger.EntryGrant, kindGrantPending, decimal.NewFromInt(5), ttl
	default:
		s.typ, s.kind, s.amount, s.ttl = ledger.EntryGrant, kindGrantExpiring, decimal.NewFromInt(5), ttl
	}
}

// nextResolution makes s a capture (of all of hold, named or not, or of
// part of it) or a void of hold.
func nextResolution(rng *rand.Rand, s, hold *sent) {
	s.user, s.hold, s.typ, s.kind, s.amount = hold.user, hold, ledger.EntryCapture, kindCaptureAll, decimal.Zero // zero: all of it, by naming no amount
	switch rng.IntN(4) {
	case 0:
		s.typ, s.kind = ledger.EntryRelease, kindVoid
	case 1:
	case 2:
		s.amount = hold.amount
	default:
		if hold.amount.GreaterThan(decimal.NewFromInt(1)) {
			s.kind, s.amount = kindCapturePart, hold.amount.Sub(decimal.NewFromInt(1))
		}
	}
}

// nextRefund makes s a refund of what (a purchase or a capture): of half a
// point, of all that is left, or of more than is left (to be refused).
func nextRefund(rng *rand.Rand, s, what *sent) {
	s.user, s.of, s.typ = what.user, what, ledger.EntryRefund
	half := decimal.New(5, -1)
	switch k := rng.IntN(8); {
	case k == 0:
		s.kind, s.amount = kindRefundOverCap, what.left.Add(half)
	case k < 4 || what.left.LessThanOrEqual(half):
		s.kind, s.amount = kindRefundRest, what.left
	default:
		s.kind, s.amount = kindRefundPart, half
	}
	if what.typ == ledger.EntryCapture {
		s.kind += refundOfCapture
	}
	if !what.left.Equal(what.spent()) {
		s.kind += refundRepeated
	}
}

// settle notes on d what an answered request leaves to act on.
func settle(d *desk, s *sent) {
	if !s.acked {
		return
	}
	switch s.typ {
	case ledger.EntryHold:
		d.holds = append(d.holds, s)
	case ledger.EntryPurchase, ledger.EntryCapture:
		s.left = s.spent()
		d.refundable = append(d.refundable, s)
	case ledger.EntryRefund:
		if s.of.left = s.of.left.Sub(s.amount); !s.of.left.IsPositive() {
			d.refundable = slices.DeleteFunc(d.refundable, func(r *sent) bool { return r == s.of })
		}
	case ledger.EntryGrant:
		if s.delay > 0 && s.delay < pendingLong {
			d.maturing = append(d.maturing, s)
		}
		if !s.quiet && s.budget == "" { // a reversal would give back to the budget, whose checks count on it only shrinking
			s.left = s.amount
			d.reversible = append(d.reversible, s)
		}
	case ledger.EntryReversal:
		if s.of.left = s.of.left.Sub(s.want); !s.of.left.IsPositive() {
			d.reversible = slices.DeleteFunc(d.reversible, func(g *sent) bool { return g == s.of })
		}
	case ledger.EntryAdjustment, ledger.EntryExpiration, ledger.EntryRelease, ledger.EntryMaturation:
	}
}

// load is the clients: workers that send requests one after the other,
// each retried with its request_id until it has a definite answer.
type load struct {
	clients  []pointledgerv1connect.LedgerServiceClient // one for each ledgerd
	mu       sync.Mutex
	book     []*sent // every request sent, under mu
	reads    []read  // every balance read answered, under mu
	attempts atomic.Int64
	retries  atomic.Int64
	acked    atomic.Int64
	answered atomic.Int64 // acknowledged or refused
	dry      atomic.Int64 // grants refused BUDGET_EXHAUSTED
	began    time.Time
	took     time.Duration // from the first request to the last answer
	stopping context.CancelFunc
	workers  sync.WaitGroup
}

func startLoad(clients []pointledgerv1connect.LedgerServiceClient, sh shape) *load {
	l := &load{clients: clients, began: time.Now()}
	all := append(slices.Clone(sh.users), sh.quietUsers...) // whose balances the workers read now and then
	ctx, stop := context.WithCancel(context.Background())
	l.stopping = stop
	for w := range sh.workers {
		l.workers.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			var d desk
			for n := 0; ctx.Err() == nil; n++ {
				s := next(rng, sh, &d, fmt.Sprintf("w%d-%d", w, n))
				l.mu.Lock()
				l.book = append(l.book, s)
				l.mu.Unlock()
				l.do(s, w)
				settle(&d, s)
				if rng.IntN(8) == 0 {
					l.readBalance(all[rng.IntN(len(all))], w)
				}
				if i := slices.IndexFunc(d.maturing, func(g *sent) bool { return !time.Now().Before(g.effective) }); i >= 0 {
					l.readBalance(d.maturing[i].user, w)
					d.maturing = slices.Delete(d.maturing, i, i+1)
				}
			}
		})
	}
	return l
}

// stop lets every worker finish its request, and waits for them.
func (l *load) stop() {
	l.stopping()
	l.workers.Wait() // every request has its definite answer, or gave up after maxAttempts
	l.took = time.Since(l.began)
}

// maxAttempts bounds the attempts of one request: with the pauses between
// them, minutes of ledgerd or DynamoDB being away.
const maxAttempts = 200

// do sends s until it has a definite answer: acknowledged, or refused;
// then, if s is to be repeated, once more by its request id.
func (l *load) do(s *sent, w int) {
	e, err := l.send(s, w)
	s.last, s.reason = connect.CodeOf(err).String(), string(client.ReasonOf(err))
	switch {
	case err == nil:
		s.acked, s.last, s.answered = true, "ok", time.Now()
		if e != nil {
			s.entryID = e.EntryId
			if e.EffectiveTime != nil {
				s.effective = e.EffectiveTime.AsTime()
			}
		}
		l.acked.Add(1)
		l.answered.Add(1)
	case definite(s.last):
		s.answered = time.Now()
		l.answered.Add(1)
		if s.reason == string(client.ReasonBudgetExhausted) {
			l.dry.Add(1)
		}
	default:
		return // gave up without a definite answer
	}
	if s.repeat {
		e, err := l.send(s, w)
		s.again = answer{last: connect.CodeOf(err).String(), reason: string(client.ReasonOf(err)), entryID: e.GetEntryId(), replayed: client.IsReplayed(err)}
		if err == nil {
			s.again.last = "ok"
		}
	}
}

// send sends s until it has a definite answer, at most maxAttempts times,
// and returns the last answer. Worker w's attempts go to each ledgerd in
// turn, as through a load balancer: a retry may reach another ledgerd than
// the first attempt.
func (l *load) send(s *sent, w int) (*pb.Entry, error) {
	for attempt := 0; ; attempt++ {
		l.attempts.Add(1)
		if attempt > 0 {
			l.retries.Add(1)
			time.Sleep(time.Duration(min(attempt, 10)) * 50 * time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		e, err := call(ctx, l.clients[(w+attempt)%len(l.clients)], s)
		cancel()
		// Without a definite answer (ledgerd down, DynamoDB down,
		// deadline): the same request again, as long as it takes.
		if err == nil || definite(connect.CodeOf(err).String()) || attempt == maxAttempts-1 {
			return e, err
		}
	}
}

// definite says whether an answer's code is a refusal: nothing was
// written, and the same request would be refused again.
func definite(code string) bool {
	switch code {
	case connect.CodeFailedPrecondition.String(), connect.CodeNotFound.String(), connect.CodeAlreadyExists.String(), connect.CodeInvalidArgument.String():
		return true
	}
	return false
}
