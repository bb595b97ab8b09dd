package dynamo

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
)

// The write path, with group commit.
//
// Mutations of one user queue in this process, in arrival order, and one
// goroutine per busy user commits them in groups of up to Options.MaxBatch
// (1 turns grouping off). A group is one TransactWriteItems:
//
//	0        Update account A         (balance, buckets, held and the open holds, version;
//	                                   the next expiry, for the sweeper)
//	                                  if version = expected AND balance = the balance read
//	                                  AND held = the held read      (if it holds anything)
//	                                  AND status = the status read  (if the group has a type a frozen
//	                                                                 account refuses, or a refusal)
//	                                  AND balance >= :need        (the least starting balance that
//	                                                               leaves what is available, balance
//	                                                               less held, covering every step)
//	         (a group of refusals alone: ConditionCheck account A, the same condition)
//	then, per mutation, in order, for its entries:
//	         Put entry E#<version>     if it does not exist        (RELEASEs of holds that expired and
//	                                                               an EXPIRATION of what is due first,
//	                                                               then its own entry, then for a refund
//	                                                               or a capture or void the EXPIRATION
//	                                                               of what it gave back to expired buckets)
//	           and for a HOLD:
//	         Put hold H#<version>      if it does not exist        (its record, HELD)
//	           for a CAPTURE or a RELEASE:
//	         Update hold H#<v>         if state = HELD AND request_id = its hold's  (resolved once:
//	                                                               CAPTURED, VOIDED or EXPIRED)
//	         Put request R#<id>        if it does not exist        (the idempotency key; not for the
//	                                                               ledger's own entries)
//	         Update purchase E#<v>     if refunded_amount = the amount read  (refunds of a purchase or a
//	                                  AND refunded_amount <= amount - refund  capture: it decided
//	                                                                         where the points go back)
//	or for a final refusal (ledger.Kind.Final):
//	         Put request R#<id>        if it does not exist        (the refusal, no entry version)
//	last     Delete and Put index items (when the next expiry moves: see expiry.go)
//
// So a purchase or a grant takes 2 items, a refund 3, an authorization, a
// capture or a void 3 (its entry, its hold's record, its request record),
// each entry written before it 1 more and each release 2; a group closes
// when the next mutation would pass 100 items with the account and the
// index's 2.
//
// Planning folds the queued mutations over the aggregate in order, each
// decided by the domain (ledger.Decide) on the account so far and the facts
// read for it (a refund's purchase, the entries an explaining adjustment
// explains, the record of a hold a capture or void names that the account
// does not hold open). Each one the domain allows joins the group; one it
// refuses (a purchase the balance does not cover, a purchase on a frozen
// account, a capture of a hold already captured, ...) has its refusal
// recorded under its request_id in the same transaction, and is answered
// once that commits: the account's condition makes the record commit only
// on the account the refusal was decided on, so a refusal decided on a
// stale cache fails it and is decided again, as an entry would be. The
// same request again then finds the record and gets the same refusal,
// replayed (see replay), and is never tried anew. The aggregate is cached
// per user between groups; a refund of a purchase, or a capture or void of
// a hold, newer than the cache has the account read again first (the
// refund's entry would otherwise take the purchase's key, and DynamoDB
// refuses two actions on one item; the hold would be refused as unknown),
// and a stale cache otherwise just fails the account's condition.
//
// Holds: a transaction writes a hold's record once, so a capture or void
// of a hold made in its group waits for the next group, and one of a hold
// its group resolved is refused as the group leaves it (HOLD_NOT_HELD, or
// HOLD_EXPIRED), not as the record, read, still says. Holds that expired
// together are released by the next mutation, or by the sweeper, each with
// its RELEASE and its record's update; when there are more than one
// transaction can hold, as many as fit are released in a group of their
// own first (ledger.DecideExpiryUpTo), and the mutation is decided again in
// the next. A hold's record failing its condition while the account, as
// planned, holds the hold open is no race: the ledger was changed behind
// its back, and the calls are answered internal (reconcile finds it).
//
// The sweeper's Expire is a call with no mutation: the releases of holds
// and the EXPIRATION of what is due, planned like those before a mutation,
// with no request.
//
// An adjustment that explains the balance (see ledger.Mutation) starts a
// group of its own: it is checked against the sum of the entries up to the
// account's version (read consistently), and the version condition makes
// the transaction apply to exactly that account.
//
// A cancelled group is decoded item by item: a taken request record makes
// that mutation, entry or refusal, a replay (its original answer) or
// ALREADY_EXISTS; a failed refund condition means another refund of its
// purchase committed first, and the refund is planned again on the purchase
// as it is then (it fits, or is a recorded refusal); the rest are planned
// again. A moved account or a TransactionConflict is retried
// with jittered backoff, up to Retry.MaxAttempts, then ABORTED (after
// checking whether the request had been answered all along). Outcomes that
// are no answer to the request (aborted, unavailable, internal) are not
// recorded: the same request may be sent again.

// call is one Apply waiting for its group.
type call struct {
	ctx  context.Context
	m    ledger.Mutation
	res  ledger.Result
	err  error
	done chan struct{}
	fold *fold // adjustments that explain the balance: the entries' sum, once read
	// sweep: no mutation, only the expiration of what is due (Expire).
	sweep bool
}

// fold is the sum of a user's entries up to a version.
type fold struct {
	version int64
	sum     decimal.Decimal
}

func (c *call) finish(res ledger.Result, err error) {
	c.res, c.err = res, err
	close(c.done)
}

// Apply appends the entry of m to its user's ledger, exactly once per
// request_id. If ctx ends first, Apply returns ctx's error, and the mutation
// may or may not be applied: retrying it with the same request_id is safe.
func (l *Ledger) Apply(ctx context.Context, m ledger.Mutation) (ledger.Result, error) {
	return l.await(&call{ctx: ctx, m: m, done: make(chan struct{})})
}

// await queues c behind its user's other calls and waits for its answer,
// or for its caller to leave.
func (l *Ledger) await(c *call) (ledger.Result, error) {
	l.queues.push(c, l.drain)
	select {
	case <-c.done:
		return c.res, c.err
	case <-c.ctx.Done():
		return ledger.Result{}, c.ctx.Err()
	}
}

// Expire writes the expiration of user's points that are due, if any, in
// turn with the user's mutations, and returns its entry (none: nothing was
// due). The sweeper calls it for idle users the index of next expiries
// names; it decides on the account as read, never on the index.
func (l *Ledger) Expire(ctx context.Context, user string) (ledger.Result, error) {
	if err := ledger.ValidateUserID(user); err != nil {
		return ledger.Result{}, err
	}
	return l.await(&call{ctx: ctx, m: ledger.Mutation{UserID: user}, sweep: true, done: make(chan struct{})})
}

// drain commits a user's queue, group by group, until it is empty.
func (l *Ledger) drain(q *userQueue) {
	var carry []*call // planned for the next group: they keep their place in line
	for {
		if l.linger > 0 && len(carry) == 0 {
			time.Sleep(l.linger)
		}
		group := l.queues.take(q, carry, l.maxBatch)
		if len(group) == 0 {
			return
		}
		carry = l.commit(q.user, group)
	}
}

// planned is one mutation in a group.
type planned struct {
	c        *call
	entry    ledger.Entry   // the mutation's own entry
	puts     []int          // indexes of its entries' puts in the transaction (expirations too)
	purchase requestRecord  // refunds: the purchase
	request  int            // index of its request record in the transaction
	cap      int            // refunds: index of the purchase update; else -1
	holds    []int          // indexes of its hold records' puts and updates
	hold     ledger.Hold    // the hold it made or resolved (ledger.Decision.Hold)
	after    ledger.Account // the account after its entries: its answer
}

// refusal is a call the domain refused.
type refusal struct {
	c   *call
	err error
	// record is the index of its refusal record in the transaction, for a
	// final refusal (ledger.Kind.Final); -1 for one that is not recorded.
	record int
}

// repeat is a call whose request_id another call of its group already
// carries (concurrent retries of one request): it gets that call's answer,
// as the record the group writes for it says.
type repeat struct {
	c   *call
	rec requestRecord
}

// group is what planning makes of the calls.
type group struct {
	items    []types.TransactWriteItem
	members  []*planned
	refused  []refusal
	recorded int // refusals with a record in items
	repeats  []repeat
	later    []*call // past the group's limits: next group
	before   ledger.Account
	after    ledger.Account
	// A refund's purchase is past before: the account was read before
	// another writer's purchase, and the refund's entry would take the
	// purchase's own key. Nothing is sent: the account is read again.
	behind bool
}

// commit commits calls as one group (or several tries of it) and returns the
// calls that did not fit, for the next group.
func (l *Ledger) commit(user string, calls []*call) (later []*call) {
	// The group outlives any one caller: they may leave, the group goes on.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conflicts := 0
	var lastConflict error
	seen := seen{purchases: map[string]requestRecord{}, resolved: map[string]ledger.HoldState{}}
	var fresh *ledger.Account // just read: the next try plans on it
	for len(calls) > 0 {
		var acct ledger.Account
		var err error
		if fresh != nil {
			acct, fresh = *fresh, nil
		} else if acct, err = l.cachedAccount(ctx, user); err != nil {
			finishAll(calls, err)
			return later
		}
		g := l.plan(ctx, acct, calls, seen)
		later = g.later
		current := calls[:len(calls)-len(g.later)] // g.later is what follows the group in calls
		if g.behind {
			// A refund of a purchase past the account shows the account is
			// behind another writer's: read it and plan again.
			read, err := l.account(ctx, user)
			if err != nil {
				finishAll(current, err)
				return later
			}
			l.cache(user, read)
			fresh = &read
			l.observe.Retried(RetryStaleCache)
			if conflicts++; conflicts >= l.retry.MaxAttempts {
				l.abandon(ctx, user, current, fmt.Errorf("%w: the account kept changing under its cache", errRetry), conflicts)
				return later
			}
			calls, later = withoutFinished(calls), nil
			continue
		}
		if len(g.members) == 0 && g.recorded == 0 {
			l.finishRefused(ctx, g.refused)
			return later
		}
		_, err = l.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
			TransactItems: g.items,
			// Lets the SDK's own retries of this call (after a lost response)
			// be answered with the first outcome instead of failed conditions.
			ClientRequestToken: aws.String(l.newID(l.now())),
		})
		if err == nil {
			l.cache(user, g.after)
			l.observe.GroupCommitted(len(g.members) + g.recorded)
			for _, p := range g.members {
				p.c.finish(ledger.Result{Entry: p.entry, Balance: p.after.Balance, Held: p.after.Held, Hold: p.hold}, nil)
			}
			for _, r := range g.repeats {
				r.c.finish(l.replay(ctx, r.c.m, r.rec))
			}
			l.finishRefused(ctx, g.refused)
			return later
		}
		l.forget(user)
		var canceled *types.TransactionCanceledException
		if !errors.As(err, &canceled) {
			// The outcome is unknown: the callers may retry with their request ids.
			finishAll(current, fmt.Errorf("transact write of %d entries and %d refusals for user %q: %w", len(g.members), g.recorded, user, err))
			return later
		}

		settled, retry, unexplained := l.decodeCancel(ctx, g, canceled.CancellationReasons)
		// Everything not settled is planned again; the calls that were
		// planned for later stay in line behind them.
		calls, later = withoutFinished(calls), nil
		if settled > 0 {
			continue // the rest may well commit now
		}
		if unexplained != nil {
			// Each call with a record in the group checks its own.
			for _, p := range g.members {
				if !isDone(p.c) {
					p.c.finish(l.refuse(ctx, p.c.m, unexplained))
				}
			}
			for _, r := range g.refused {
				if r.record >= 0 && !isDone(r.c) {
					r.c.finish(l.refuse(ctx, r.c.m, unexplained))
				}
			}
			calls = withoutFinished(calls)
			continue
		}
		lastConflict = retry
		l.observe.Retried(retryReason(retry))
		if conflicts++; conflicts >= l.retry.MaxAttempts {
			l.abandon(ctx, user, current, lastConflict, conflicts)
			return g.later // never tried: the next group tries them, with attempts of its own
		}
		if err := sleep(ctx, l.retry.backoff(conflicts)); err != nil {
			finishAll(calls, err)
			return later
		}
	}
	return later
}

// plan folds calls over acct, in order, into a group.
func (l *Ledger) plan(ctx context.Context, acct ledger.Account, calls []*call, seen seen) group {
	g := group{before: acct, items: []types.TransactWriteItem{{}}} // item 0: the account, below
	running := acct
	cum, need := decimal.Zero, decimal.Zero // balance change so far; least starting balance it needs
	needsActive := false                    // the group has a mutation a frozen account refuses
	touched := map[int64]bool{}             // purchases refunded in this group (one update per item)
	byRequest := map[string]*planned{}      // members by request_id
	records := map[string]requestRecord{}   // a transaction may write a request record once
	holds := groupHolds{made: map[string]bool{}, resolved: map[string]ledger.HoldState{}}
	now := l.now().UTC().Truncate(time.Microsecond)
	// add puts dec's entries into the group as p's (and its request
	// record, if it has one), and moves the group's account on.
	add := func(p *planned, dec ledger.Decision) {
		for j, e := range dec.Entries {
			e = l.putEntry(&g, p, e, running, now)
			holds.note(e)
			if dec.Main < 0 { // the sweeper's: its answer is its last entry
				p.entry = e
			}
			if j == dec.Main {
				p.entry, p.hold = e, dec.Hold
				p.request = len(g.items)
				g.items = append(g.items, types.TransactWriteItem{Put: &types.Put{
					TableName:                           &l.table,
					Item:                                requestItem(p.c.m, e, dec.Entries[len(dec.Entries)-1].Version),
					ConditionExpression:                 aws.String("attribute_not_exists(PK)"),
					ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
				}})
			}
		}
		p.after = dec.After
		g.members = append(g.members, p)
		cum = cum.Add(dec.After.Balance.Sub(running.Balance))
		// What is available (balance less held) must cover every step:
		// the starting balance must be at least what is held then, less
		// the change so far.
		need = decimal.Max(need, dec.After.Held.Sub(cum))
		running = dec.After
	}
	// fits says whether n more items (c's) fit the group. A decision that
	// would not fit even an empty group releases more holds than a
	// transaction can write (they expired together): as many of them as fit
	// are released first, in this group, and c is decided again in the
	// next, until what is left of its releases fits. Were there no hold to
	// release, c could never commit, and is answered so.
	fits := func(c *call, n int) bool {
		if len(g.items)+n <= maxTxItems-indexReserve {
			return true
		}
		if len(g.items) > 1 {
			return false
		}
		dec := ledger.DecideExpiryUpTo(running, now, (maxTxItems-indexReserve-1)/2)
		if len(dec.Entries) == 0 {
			c.finish(ledger.Result{}, fmt.Errorf("a mutation of user %q takes %d items, more than a transaction holds", c.m.UserID, n))
			return false
		}
		add(&planned{c: &call{ctx: ctx, m: ledger.Mutation{UserID: acct.UserID}, sweep: true, done: make(chan struct{})}, request: -1, cap: -1}, dec)
		return false
	}
loop:
	for i, c := range calls {
		m := c.m
		if err := c.ctx.Err(); err != nil {
			c.finish(ledger.Result{}, err) // the caller left before its turn
			continue
		}
		if c.sweep {
			dec := ledger.DecideExpiry(running, now)
			if len(dec.Entries) == 0 {
				c.finish(ledger.Result{Balance: running.Balance, Held: running.Held}, nil) // nothing due
				continue
			}
			if !fits(c, entryItems(dec.Entries)) {
				g.later = calls[i:]
				break
			}
			add(&planned{c: c, request: -1, cap: -1}, dec)
			continue
		}
		if rec, ok := records[m.RequestID]; ok {
			g.repeats = append(g.repeats, repeat{c, rec})
			continue
		}
		info, _ := m.Type.Info()

		// The facts the domain decides on, and where the group must end
		// first: the store's part.
		var facts ledger.Facts
		var purchase requestRecord
		if info.RefersToPurchase {
			rec, ok := seen.purchases[m.PurchaseRequestID]
			if !ok {
				found := false
				var err error
				if rec, found, err = l.request(ctx, m.UserID, m.PurchaseRequestID); err != nil {
					c.finish(ledger.Result{}, err)
					continue
				}
				// A refused request wrote no entry: there is nothing to refund.
				if ok = found && rec.Refusal == nil; ok {
					seen.purchases[m.PurchaseRequestID] = rec
				}
			}
			if p, inGroup := byRequest[m.PurchaseRequestID]; !ok && inGroup && p.entry.Type.Refundable() {
				g.later = calls[i:] // its purchase commits in this group: refund it in the next
				break
			}
			switch {
			case ok && rec.Type.Refundable():
				if touched[rec.Version] {
					g.later = calls[i:] // one update of the purchase per transaction
					break loop
				}
				if rec.Version > acct.Version {
					g.behind = true
					break loop
				}
				// What it drew and what earlier refunds gave back decide
				// where this refund goes, and whether it fits; the
				// purchase's update is conditioned on the refunded amount
				// read here.
				pe, found, err := l.entry(ctx, m.UserID, rec.Version)
				if err == nil && !found {
					err = fmt.Errorf("purchase %q of %q: entry version %d not found", m.PurchaseRequestID, m.UserID, rec.Version)
				}
				if err != nil {
					c.finish(ledger.Result{}, err)
					continue
				}
				// The entry says what was spent: a capture's request may
				// have asked for all of its hold, and named no amount.
				purchase = rec
				purchase.Amount, purchase.Refunded = pe.Amount.Neg(), pe.RefundedAmount
				facts.Purchase = &ledger.PurchaseRef{Version: rec.Version, Type: rec.Type, Amount: purchase.Amount, Draws: pe.Draws, Refunded: pe.RefundedAmount}
			case ok: // not a purchase: the domain refuses it
				facts.Purchase = &ledger.PurchaseRef{Version: rec.Version, Type: rec.Type}
			}
		}
		if info.ResolvesHold {
			switch st, resolved := holds.resolved[m.HoldRequestID]; {
			case holds.made[m.HoldRequestID]:
				g.later = calls[i:] // its hold commits in this group: its record may be written once
				break loop
			case resolved:
				facts.Hold = &ledger.HoldRef{State: st}
			case isOpen(running, m.HoldRequestID):
			case seen.resolved[m.HoldRequestID] != "":
				facts.Hold = &ledger.HoldRef{State: seen.resolved[m.HoldRequestID]}
			default:
				// Not open: its record says whether it resolved or never was.
				h, found, err := l.holdByRequest(ctx, m.UserID, m.HoldRequestID)
				if err != nil {
					c.finish(ledger.Result{}, err)
					continue
				}
				if found && h.Version > acct.Version {
					g.behind = true // made by another writer since the account was read
					break loop
				}
				if found {
					facts.Hold = &ledger.HoldRef{State: h.State}
				}
				if found && h.State != ledger.HoldHeld {
					seen.resolved[m.HoldRequestID] = h.State
				}
			}
		}
		if m.ExplainBalance && running.Version > 0 {
			// It explains the balance the group starts from: the entries it
			// must add up with are those the account counts.
			if len(g.members) > 0 {
				g.later = calls[i:]
				break
			}
			sum, err := l.foldTo(ctx, c, running.Version)
			if err != nil {
				c.finish(ledger.Result{}, err)
				continue
			}
			facts.EntriesSum = sum
		}
		facts.MaxBuckets, facts.MaxHolds = l.maxBuckets, l.maxHolds
		if len(g.items)+1 > maxTxItems-indexReserve { // a refusal takes 1; a decision is sized below
			g.later = calls[i:]
			break
		}

		dec, err := ledger.Decide(running, m, now, facts)
		if err != nil {
			// A final refusal is recorded under the request_id, in this
			// transaction: it commits only if the account is as it was
			// decided on (the account's condition, below).
			r := refusal{c: c, err: err, record: -1}
			if e, ok := recordable(err); ok {
				r.record = len(g.items)
				g.items = append(g.items, types.TransactWriteItem{Put: &types.Put{
					TableName:                           &l.table,
					Item:                                refusalItem(m, e, now),
					ConditionExpression:                 aws.String("attribute_not_exists(PK)"),
					ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
				}})
				g.recorded++
				records[m.RequestID] = requestRecord{Hash: m.Hash(), Type: m.Type, Amount: m.Amount, Refusal: e}
			}
			g.refused = append(g.refused, r)
			continue
		}
		size := entryItems(dec.Entries) + 1 // its entries, with their hold records, and its request record
		if info.RefersToPurchase {
			size++
		}
		if !fits(c, size) {
			if isDone(c) {
				continue
			}
			g.later = calls[i:]
			break
		}
		p := &planned{c: c, purchase: purchase, cap: -1}
		add(p, dec)
		if info.RefersToPurchase {
			p.cap = len(g.items)
			g.items = append(g.items, types.TransactWriteItem{Update: purchaseRefundUpdate(l.table, m, purchase)})
			touched[purchase.Version] = true
		}
		byRequest[m.RequestID] = p
		records[m.RequestID] = requestRecord{Hash: m.Hash(), Type: p.entry.Type, Version: p.entry.Version, Last: p.after.Version}
		needsActive = needsActive || info.NeedsActive
	}
	g.after = running
	// The index of next expiries follows the account, in this transaction
	// (room for its two items is kept: indexReserve).
	g.items = append(g.items, l.expiryIndexItems(acct, g.after)...)
	// A recorded refusal rests on the whole account as read, its status
	// too: a refusal on a frozen account must not be recorded after an
	// unfreeze, which moves no version.
	cond := accountCondition(acct, needsActive || g.recorded > 0, need)
	if len(g.members) > 0 {
		g.items[0] = types.TransactWriteItem{Update: accountUpdate(l.table, acct, g.after, cond)}
	} else {
		g.items[0] = types.TransactWriteItem{ConditionCheck: accountCheck(l.table, acct, cond)}
	}
	return g
}

func isOpen(acct ledger.Account, holdRequestID string) bool {
	_, ok := acct.Hold(holdRequestID)
	return ok
}

// seen is what a commit read that stays true while it tries its groups
// again: request records of refunds' purchases (records never change) and
// the states of resolved holds (a hold resolves once).
type seen struct {
	purchases map[string]requestRecord
	resolved  map[string]ledger.HoldState
}

// groupHolds are the holds a group's entries made or resolved: a
// transaction may write a hold's record once, and a capture or a void of
// a hold its group resolved must be refused as the group leaves it.
type groupHolds struct {
	made     map[string]bool
	resolved map[string]ledger.HoldState
}

// note notes what e does to a hold.
func (h groupHolds) note(e ledger.Entry) {
	switch {
	case e.Type == ledger.EntryHold:
		h.made[e.RequestID] = true
	case e.HoldRequestID != "":
		h.resolved[e.HoldRequestID] = ledger.ResolvedHold(ledger.Hold{}, e).State
	}
}

// putEntry gives e its id and adds its put to the group, as one of p's
// entries, with what it does to its hold's record: a HOLD puts it, a
// CAPTURE or a RELEASE resolves the hold it resolves of acct, the account
// it was decided on. It returns e with its id.
func (l *Ledger) putEntry(g *group, p *planned, e ledger.Entry, acct ledger.Account, now time.Time) ledger.Entry {
	e.ID = l.newID(now)
	p.puts = append(p.puts, len(g.items))
	g.items = append(g.items, types.TransactWriteItem{Put: &types.Put{
		TableName:           &l.table,
		Item:                entryItem(e),
		ConditionExpression: aws.String("attribute_not_exists(PK)"),
	}})
	switch {
	case e.Type == ledger.EntryHold:
		p.holds = append(p.holds, len(g.items))
		g.items = append(g.items, types.TransactWriteItem{Put: &types.Put{
			TableName:           &l.table,
			Item:                holdItem(ledger.HoldOf(e)),
			ConditionExpression: aws.String("attribute_not_exists(PK)"),
		}})
	case e.HoldRequestID != "":
		h, _ := acct.Hold(e.HoldRequestID)
		p.holds = append(p.holds, len(g.items))
		g.items = append(g.items, types.TransactWriteItem{Update: holdResolveUpdate(l.table, ledger.ResolvedHold(h, e))})
	}
	return e
}

// entryItems is how many items entries take in a transaction: each its
// own, and a HOLD, CAPTURE or RELEASE its hold's record too.
func entryItems(entries []ledger.Entry) int {
	n := len(entries)
	for _, e := range entries {
		if e.Type == ledger.EntryHold || e.HoldRequestID != "" {
			n++
		}
	}
	return n
}

// indexReserve is the room a group keeps for the index of next expiries:
// the old item's delete and the new one's put.
const indexReserve = 2

// foldTo returns the sum of c's user's entries up to version, read
// consistently; a retry of c reads only the entries it has not summed.
func (l *Ledger) foldTo(ctx context.Context, c *call, version int64) (decimal.Decimal, error) {
	if c.fold == nil || c.fold.version > version {
		c.fold = &fold{}
	}
	if c.fold.version < version {
		entries, err := l.EntriesAfter(ctx, c.m.UserID, c.fold.version, int(min(version-c.fold.version, math.MaxInt32)))
		if err != nil {
			return decimal.Decimal{}, fmt.Errorf("sum the entries an adjustment explains: %w", err)
		}
		for _, e := range entries {
			c.fold.sum = c.fold.sum.Add(e.Amount)
			c.fold.version = e.Version
		}
		if c.fold.version != version {
			return decimal.Decimal{}, fmt.Errorf("sum the entries of %q to version %d: the ledger has entries to %d only", c.m.UserID, version, c.fold.version)
		}
	}
	return c.fold.sum, nil
}

// decodeCancel settles the calls of a cancelled group that the reasons
// decide: a taken request record (a replay, or ALREADY_EXISTS), for a
// member or a refusal alike. A failed refund cap settles nothing but is
// progress too: another refund of the purchase committed since it was
// read, and the refund, planned again on the purchase as it is now, fits or
// is refused (and recorded) by the domain. It
// returns how many calls it settled or learnt about; else the cause to
// retry on (a race), or an error for a failure it cannot explain.
func (l *Ledger) decodeCancel(ctx context.Context, g group, reasons []types.CancellationReason) (settled int, retry, unexplained error) {
	code := func(i int) string {
		if i >= 0 && i < len(reasons) && reasons[i].Code != nil {
			return *reasons[i].Code
		}
		return ""
	}
	// taken answers c, whose request record at item i was taken, and the
	// repeats of c's request in the group, from the record that is there.
	taken := func(c *call, i int) {
		rec, err := decodeRequest(reasons[i].Item)
		if err != nil {
			// No usable old item came back: read the record itself.
			c.finish(l.refuse(ctx, c.m, fmt.Errorf("request record of %q reported taken but not found", c.m.RequestID)))
			return
		}
		c.finish(l.replay(ctx, c.m, rec))
		for _, r := range g.repeats {
			if r.c.m.RequestID == c.m.RequestID && !isDone(r.c) {
				r.c.finish(l.replay(ctx, r.c.m, rec))
			}
		}
	}
	for _, p := range g.members {
		m := p.c.m
		switch {
		case code(p.request) == "ConditionalCheckFailed":
			taken(p.c, p.request)
			settled++
		case code(p.cap) == "ConditionalCheckFailed":
			// Planned on the refunded amount it read, it failed only if
			// another refund committed since: planned again on the purchase
			// as it is now, it fits or is refused (and recorded).
			refunded, err := l.refundedOf(ctx, m.UserID, p.purchase.Version, reasons[p.cap].Item)
			switch {
			case err != nil:
				p.c.finish(ledger.Result{}, err)
			case !refunded.GreaterThan(p.purchase.Refunded):
				p.c.finish(ledger.Result{}, fmt.Errorf("refund cap of purchase %q failed at %s refunded, which allows the refund", m.PurchaseRequestID, refunded))
			}
			settled++
		}
	}
	for _, r := range g.refused {
		if code(r.record) == "ConditionalCheckFailed" {
			taken(r.c, r.record)
			settled++
		}
	}
	if settled > 0 {
		return settled, nil, nil
	}
	for i := range reasons {
		switch code(i) {
		case "TransactionConflict":
			return 0, fmt.Errorf("%w: item %d: %s", errConflict, i, code(i)), nil
		case "ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded":
			return 0, fmt.Errorf("%w: item %d: %s", errThrottled, i, code(i)), nil
		}
	}
	if code(0) == "ConditionalCheckFailed" {
		old, ok, err := decodeAccount(reasons[0].Item)
		if err != nil {
			return 0, nil, err
		}
		if ok != (g.before.Version > 0) || (ok && !sameAccount(old, g.before)) {
			return 0, fmt.Errorf("%w: account moved from version %d", errRetry, g.before.Version), nil
		}
		// The account is as planned, yet its condition failed: the store
		// did not say which other item failed. Each call with a record in
		// the group checks it before this becomes an error.
		return 0, nil, fmt.Errorf("account condition of user %q failed at version %d for no known reason", g.before.UserID, old.Version)
	}
	for _, p := range g.members {
		for _, i := range p.puts {
			if code(i) == "ConditionalCheckFailed" {
				return 0, fmt.Errorf("%w: entry item %d exists", errRetry, i), nil
			}
		}
		for _, i := range p.holds {
			// The account, as planned, holds the hold open, and its record
			// is not HELD (or not there): no race explains that, only a
			// ledger changed behind its back, which the audit reports.
			if code(i) == "ConditionalCheckFailed" {
				return 0, nil, fmt.Errorf("hold record of user %q at item %d is not the open hold the account holds: reconcile", g.before.UserID, i)
			}
		}
	}
	return 0, nil, fmt.Errorf("transaction for user %q cancelled for an unexpected reason: %v", g.before.UserID, codes(reasons))
}

// refundedOf is what the purchase at version has refunded: from old, the
// purchase as a failed condition returned it, or else read.
func (l *Ledger) refundedOf(ctx context.Context, user string, version int64, old map[string]types.AttributeValue) (decimal.Decimal, error) {
	e, ok, err := decodeEntry(old)
	if err != nil || !ok {
		if e, ok, err = l.entry(ctx, user, version); err != nil {
			return decimal.Decimal{}, err
		}
	}
	if !ok || !e.Type.Refundable() {
		return decimal.Decimal{}, fmt.Errorf("refund cap of entry %d of %q failed: it is no purchase", version, user)
	}
	return e.RefundedAmount, nil
}

// errRetry marks an attempt that lost a race and may simply be tried again;
// errThrottled one that DynamoDB refused for capacity;
// errConflict one that DynamoDB cancelled for a concurrent transaction.
var (
	errRetry     = errors.New("retry")
	errThrottled = fmt.Errorf("%w: throttled", errRetry)
	errConflict  = fmt.Errorf("%w: conflict", errRetry)
)

// retryReason names the race that retry lost, for the Observer.
func retryReason(retry error) string {
	switch {
	case errors.Is(retry, errConflict):
		return RetryTransactionConflict
	case errors.Is(retry, errThrottled):
		return RetryThrottled
	}
	return RetryVersionMoved
}

func giveUp(cause error, attempts int) error {
	if errors.Is(cause, errThrottled) {
		return ledger.Errorf(ledger.KindUnavailable, ledger.ReasonThrottled,
			"gave up after %d attempts: DynamoDB throttled the writes; retrying later with the same request_id is safe", attempts)
	}
	return ledger.Errorf(ledger.KindAborted, ledger.ReasonTooManyConflicts,
		"gave up after %d attempts: concurrent writers kept changing the account; retrying with the same request_id is safe", attempts)
}

// abandon answers the calls of a group that ran out of attempts (see
// giveUp), each after checking whether an earlier attempt had committed it
// with its answer lost.
func (l *Ledger) abandon(ctx context.Context, user string, calls []*call, cause error, attempts int) {
	l.log.Warn("retries exhausted", "user_id", user, "attempts", attempts, "cause", cause)
	for _, c := range withoutFinished(calls) {
		c.finish(l.refuse(ctx, c.m, giveUp(cause, attempts)))
	}
}

// finishRefused answers the refusals of a group: a recorded one with its
// refusal, since its record committed; any other after checking the
// request record (see refuse).
func (l *Ledger) finishRefused(ctx context.Context, refused []refusal) {
	for _, r := range refused {
		if r.record >= 0 {
			r.c.finish(ledger.Result{}, r.err)
		} else {
			r.c.finish(l.refuse(ctx, r.c.m, r.err))
		}
	}
}

// refuse returns refusal for m unless m's request_id was already used: a
// retry of a request that succeeded, or was refused, must get its original
// answer even when the ledger has moved on since (the balance may no
// longer cover it, say). The store may not report every failed condition
// of a cancelled transaction, so an answer that no record of this call
// backs checks the request record with a consistent read first.
func (l *Ledger) refuse(ctx context.Context, m ledger.Mutation, refusal error) (ledger.Result, error) {
	rec, ok, err := l.request(ctx, m.UserID, m.RequestID)
	if err != nil {
		return ledger.Result{}, err
	}
	if ok {
		return l.replay(ctx, m, rec)
	}
	return ledger.Result{}, refusal
}

// replay answers a request whose request_id has a record: the original
// answer if the request is the same (its entry, or its refusal again,
// marked replayed), ALREADY_EXISTS if it is another.
func (l *Ledger) replay(ctx context.Context, m ledger.Mutation, rec requestRecord) (ledger.Result, error) {
	if rec.Hash != m.Hash() {
		was := fmt.Sprintf("%s entry version %d", rec.Type, rec.Version)
		if rec.Refusal != nil {
			was = fmt.Sprintf("%s refused with %s", rec.Type, rec.Refusal.Reason)
		}
		return ledger.Result{}, ledger.Errorf(ledger.KindAlreadyExists, ledger.ReasonRequestIDReused,
			"request_id %q of user %q was used for another request (%s)", m.RequestID, m.UserID, was)
	}
	if rec.Refusal != nil {
		again := *rec.Refusal
		again.Replayed = true
		return ledger.Result{}, &again
	}
	e, ok, err := l.entry(ctx, m.UserID, rec.Version)
	if err != nil {
		return ledger.Result{}, err
	}
	if !ok {
		return ledger.Result{}, fmt.Errorf("request %q of user %q points at missing entry version %d", m.RequestID, m.UserID, rec.Version)
	}
	res := ledger.Result{Entry: e, Balance: e.BalanceAfter, Held: e.HeldAfter, Replayed: true}
	if rec.Last > rec.Version { // the call wrote an expiration after its entry
		last, ok, err := l.entry(ctx, m.UserID, rec.Last)
		if err != nil {
			return ledger.Result{}, err
		}
		if !ok {
			return ledger.Result{}, fmt.Errorf("request %q of user %q points at missing entry version %d", m.RequestID, m.UserID, rec.Last)
		}
		res.Balance, res.Held = last.BalanceAfter, last.HeldAfter
	}
	// A hold, a capture or a void answers with its hold as it is now.
	switch {
	case e.Type == ledger.EntryHold:
		res.Hold, ok, err = l.hold(ctx, m.UserID, e.Version)
	case e.HoldRequestID != "":
		res.Hold, ok, err = l.holdByRequest(ctx, m.UserID, e.HoldRequestID)
	}
	if err == nil && !ok {
		err = fmt.Errorf("request %q of user %q: the record of the hold its %s entry names is missing", m.RequestID, m.UserID, e.Type)
	}
	if err != nil {
		return ledger.Result{}, err
	}
	return res, nil
}

// condition is a condition expression with its names and values.
type condition struct {
	expr   string
	names  map[string]string
	values map[string]types.AttributeValue
}

// accountCondition holds only for the account a group was planned on: no
// account for a new user, else the version and the balance (a balance
// changed without a new version, what reconciliation reports, must not be
// overwritten from a cache) and what is held, if anything is, the status
// if withStatus (a group that spends on purchases, or records a refusal),
// and a balance that leaves what is available covering the group's debits
// and holds at every step (need).
func accountCondition(before ledger.Account, withStatus bool, need decimal.Decimal) condition {
	if before.Version == 0 {
		return condition{expr: "attribute_not_exists(PK)"}
	}
	c := condition{
		expr: "version = :expected AND balance = :before",
		values: map[string]types.AttributeValue{
			":expected": numInt(before.Version),
			":before":   num(before.Balance),
		},
	}
	if len(before.Holds) > 0 || !before.Held.IsZero() {
		c.expr += " AND held = :held"
		c.values[":held"] = num(before.Held)
	}
	if withStatus {
		c.expr += " AND #status = :status"
		c.names = map[string]string{"#status": "status"} // a reserved word
		c.values[":status"] = str(string(before.Status))
	}
	if need.IsPositive() {
		c.expr += " AND balance >= :need"
		c.values[":need"] = num(need)
	}
	return c
}

// accountUpdate moves the aggregate from before to after under cond (see
// accountCondition).
func accountUpdate(table string, before, after ledger.Account, cond condition) *types.Update {
	values := map[string]types.AttributeValue{
		":balance": num(after.Balance),
		":version": numInt(after.Version),
		":now":     str(formatTime(after.UpdateTime)),
	}
	maps.Copy(values, cond.values)
	names := cond.names
	set := []string{"balance = :balance", "version = :version", "update_time = :now"}
	var remove []string
	// The expiring buckets, and what is held: written only when there are
	// some (or were), so that an account whose points never expire and
	// that never holds updates as few attributes as it ever did. (Not by
	// NextExpiry, which holds count in.)
	switch {
	case expires(after.Buckets):
		set = append(set, "buckets = :buckets")
		values[":buckets"] = bucketsItem(after.Buckets)
	case expires(before.Buckets):
		remove = append(remove, "buckets")
	}
	switch {
	case len(after.Holds) > 0 && !sameHolds(before, after):
		set = append(set, "held = :heldAfter", "holds = :holds")
		values[":heldAfter"] = num(after.Held)
		values[":holds"] = holdsItem(after.Holds)
	case len(after.Holds) == 0 && len(before.Holds) > 0:
		remove = append(remove, "held", "holds")
	}

	if before.Version == 0 {
		set = append(set, "user_id = :user", "#status = :active", "create_time = :now")
		names = map[string]string{"#status": "status"}
		values[":user"] = str(after.UserID)
		values[":active"] = str(string(ledger.StatusActive))
	}
	update := "SET " + strings.Join(set, ", ")
	if len(remove) > 0 {
		update += " REMOVE " + strings.Join(remove, ", ")
	}
	return &types.Update{
		TableName:                           &table,
		Key:                                 accountKey(after.UserID),
		UpdateExpression:                    &update,
		ConditionExpression:                 &cond.expr,
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}

// expires says whether any of bs expires.
func expires(bs []ledger.Bucket) bool {
	return slices.ContainsFunc(bs, func(b ledger.Bucket) bool { return !b.Expire.IsZero() })
}

// sameHolds says whether a and b hold the same open holds (a hold never
// changes while open).
func sameHolds(a, b ledger.Account) bool {
	return a.Held.Equal(b.Held) && slices.EqualFunc(a.Holds, b.Holds, func(x, y ledger.Hold) bool { return x.RequestID == y.RequestID })
}

// accountCheck holds a group of refusals alone to the account they were
// decided on: cond (see accountCondition), and no change.
func accountCheck(table string, before ledger.Account, cond condition) *types.ConditionCheck {
	return &types.ConditionCheck{
		TableName:                           &table,
		Key:                                 accountKey(before.UserID),
		ConditionExpression:                 &cond.expr,
		ExpressionAttributeNames:            cond.names,
		ExpressionAttributeValues:           cond.values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}

// purchaseRefundUpdate adds a refund to its purchase, guarded so that the
// refunds never sum to more than the purchase (DynamoDB conditions cannot
// add, so the cap is precomputed: refunded_amount <= purchase amount -
// refund) and that the purchase's refunded amount is the one the refund was
// planned on, which decided the buckets it gives back to.
func purchaseRefundUpdate(table string, m ledger.Mutation, purchase requestRecord) *types.Update {
	return &types.Update{
		TableName:           &table,
		Key:                 entryKey(m.UserID, purchase.Version),
		UpdateExpression:    aws.String("SET refunded_amount = refunded_amount + :refund"),
		ConditionExpression: aws.String("#type = :purchase AND refunded_amount = :read AND refunded_amount <= :cap"),
		ExpressionAttributeNames: map[string]string{
			"#type": "type",
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":refund":   num(m.Amount),
			":purchase": str(string(purchase.Type)), // a purchase or a capture
			":read":     num(purchase.Refunded),
			":cap":      num(purchase.Amount.Sub(m.Amount)),
		},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}

// holdResolveUpdate writes that hold h resolved (ledger.ResolvedHold):
// only if its record is still HELD, so that a hold resolves once even were
// the account's condition wrong.
func holdResolveUpdate(table string, h ledger.Hold) *types.Update {
	set := "SET #state = :state, resolve_version = :version"
	values := map[string]types.AttributeValue{
		":state":   str(string(h.State)),
		":version": numInt(h.ResolveVersion),
		":held":    str(string(ledger.HoldHeld)),
		":id":      str(h.RequestID),
	}
	if h.State == ledger.HoldCaptured {
		set += ", captured_amount = :captured"
		values[":captured"] = num(h.CapturedAmount)
	}
	return &types.Update{
		TableName:                           &table,
		Key:                                 holdKey(h.UserID, h.Version),
		UpdateExpression:                    &set,
		ConditionExpression:                 aws.String("#state = :held AND request_id = :id"),
		ExpressionAttributeNames:            map[string]string{"#state": "state"}, // a reserved word
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}

// sameAccount says whether two reads of an aggregate show the same state.
func sameAccount(a, b ledger.Account) bool {
	return a.Version == b.Version && a.Status == b.Status && a.Balance.Equal(b.Balance)
}

func finishAll(calls []*call, err error) {
	for _, c := range calls {
		if !isDone(c) {
			c.finish(ledger.Result{}, err)
		}
	}
}

func isDone(c *call) bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func withoutFinished(calls []*call) []*call {
	out := calls[:0:0]
	for _, c := range calls {
		if !isDone(c) {
			out = append(out, c)
		}
	}
	return out
}

// Retry bounds the retries of an attempt that lost a race.
type Retry struct {
	MaxAttempts int           // attempts in all, at least 1
	BaseDelay   time.Duration // the first backoff's upper bound
	MaxDelay    time.Duration // no backoff is longer
}

// DefaultRetry suits a hot user on the real service: about 1.5 s in the worst case.
var DefaultRetry = Retry{MaxAttempts: 10, BaseDelay: 5 * time.Millisecond, MaxDelay: 250 * time.Millisecond}

// backoff is "full jitter": uniform in [0, min(MaxDelay, BaseDelay*2^(attempt-1))].
func (r Retry) backoff(attempt int) time.Duration {
	d := r.BaseDelay << min(attempt-1, 20)
	if d <= 0 || d > r.MaxDelay {
		d = r.MaxDelay
	}
	if d <= 0 {
		return 0
	}
	return rand.N(d + 1)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func codes(reasons []types.CancellationReason) []string {
	out := make([]string, len(reasons))
	for i, r := range reasons {
		out[i] = aws.ToString(r.Code)
	}
	return out
}
