package dynamo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/throttle"
)

// The write path, with group commit. A mutation goes, in this file:
//
//	Apply          queues the call behind its user's (await); the call that
//	               finds its user idle commits its group itself (lead), and
//	               one goroutine per busy user takes the rest of the queue
//	               group by group (drain)
//	commit         per group: the account (cached), plan, one TransactWriteItems,
//	               answers, or retries after a cancellation
//	plan           per call, in order: its facts -> ledger.Decide -> its items
//
// and the steps plan and commit take live beside it:
//
//	ahead.go       a busy user's next group planned while the last one's
//	               transaction is in flight, adopted or dropped on its answer
//	facts.go       reading the facts a decision needs (a refund's purchase, a
//	               hold's record, the sum an explaining adjustment explains)
//	txn.go         building the transaction from the decisions: its items, their
//	               conditions, the account's update, and when the group is full
//	cancel.go      decoding a cancelled transaction item by item, and what to
//	               retry on
//	items.go       the item layout the items are written in
//	direct.go      SingleTransaction: one mutation through Decide and txn.go,
//	               for the load test's baseline without ledgerd
//
// What must hold, and how:
//
// Mutations of one user queue in this process, in arrival order, and one
// goroutine at a time per busy user (the first caller's, then a drainer's)
// commits them in groups of up to Options.MaxBatch
// (1 turns grouping off). A group is one TransactWriteItems:
//
//	0        Update account A         (balance, buckets, held and the open holds, pending and
//	                                   the pending lots, version;
//	                                   the next expiry, for the sweeper)
//	                                  if version = expected AND balance = the balance read
//	                                  AND held = the held read      (if it holds anything)
//	                                  AND pending = the pending read (if it has any)
//	                                  AND status = the status read  (if the group has a type a frozen
//	                                                                 account refuses, or a refusal)
//	                                  AND balance >= :need        (the least starting balance that
//	                                                               leaves what is available, balance
//	                                                               less held, covering every step)
//	         (a group of refusals alone: ConditionCheck account A, the same condition)
//	then, per mutation, in order, for its entries:
//	         Put entry E#<version>     if it does not exist        (MATURATIONs of pending grants due,
//	                                                               RELEASEs of holds that expired and
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
//	         Update grant E#<v>        if reversed_amount = the amount read  (reversals: it decided
//	                                                                         that they stay within it)
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
// The sweeper's Expire is a call with no mutation: the maturations of
// pending grants, the releases of holds and the EXPIRATION of what is due, planned like those before a mutation,
// with no request.
//
// An adjustment that explains the balance (see ledger.Mutation) starts a
// group of its own: it is checked against the sum of the entries up to the
// account's version (read consistently), and the version condition makes
// the transaction apply to exactly that account.
//
// One group ahead (ahead.go): a drainer (grouping on, no linger) sends
// each group from its own goroutine and, while the transaction is in
// flight, another goroutine answers the group before it and plans the next
// group on the account this one leaves if it commits. Only mutations
// decided on the account alone are planned so: a refund, a reversal, a
// capture or a void, a grant on a budget, an adjustment that explains the
// balance and the sweeper's call wait until the group in flight has
// committed, and join the group then, planned as above. When the
// transaction commits, the group planned behind it takes what queued
// meanwhile (up to MaxBatch calls in all) and is sent at once, and the
// committed group's calls are answered while it is in flight. When it does
// not (cancelled, throttled, or its outcome unknown), the group planned
// behind it is dropped, nothing of it sent: the calls it took from the
// queue go back to the head of the queue, in line, and everything is
// decided again on the account as it is read. So the versions a dropped
// group planned are planned again, none skipped and none written twice; a
// balance spent, or a refusal decided, ahead stands only if the group it
// was decided behind committed; and the account's version and balance
// conditions guard every write as before. One transaction per user is in
// flight at a time, as before.
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

func (c *call) finish(res ledger.Result, err error) {
	c.res, c.err = res, err
	close(c.done)
}

// Apply appends the entry of m to its user's ledger, exactly once per
// request_id. If ctx ends first, Apply returns ctx's error, and the mutation
// may or may not be applied: retrying it with the same request_id is safe.
// (A call that commits its own group, see await, answers when that try
// does: DynamoDB's answer to one request is not waited for past it.)
func (l *Ledger) Apply(ctx context.Context, m ledger.Mutation) (ledger.Result, error) {
	return l.await(&call{ctx: ctx, m: m, done: make(chan struct{})})
}

// await queues c behind its user's other calls and waits for its answer,
// or for its caller to leave.
//
// A call that finds its user idle commits its group itself, in its own
// goroutine (lead): most users are idle most of the time, and a purchase
// then crosses no goroutine of the write path's. Calls that queue behind
// it wait, and once its group has committed a drainer goroutine commits
// theirs, group by group, until the queue is empty: a busy user has one
// goroutine committing for as long as it stays busy, as before.
func (l *Ledger) await(c *call) (ledger.Result, error) {
	if q, lead := l.queues.push(c); lead && l.lead(q, c) {
		return c.res, c.err
	}
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

// lead commits the first group of q, whose first call is c, in c's
// goroutine, and reports whether c has its answer. It gives q to a drainer
// goroutine when more calls wait (or c's group goes on without it: a
// linger c's caller left during, a retry's backoff; see commit), and
// retires q when nothing does.
func (l *Ledger) lead(q *userQueue, c *call) (answered bool) {
	if l.linger > 0 && !pause(c.ctx, l.linger) {
		go l.drain(q, nil) // c's caller left: the others' group goes on
		return false
	}
	group := l.queues.take(q, nil, l.maxBatch)
	later, handed := l.commit(q, group, true)
	if !handed && !l.queues.idle(q, later) {
		go l.drain(q, later)
	}
	return isDone(c)
}

// drain commits q, group by group, starting with carry, until it is empty.
func (l *Ledger) drain(q *userQueue, carry []*call) {
	for {
		if l.linger > 0 && len(carry) == 0 {
			time.Sleep(l.linger)
		}
		group := l.queues.take(q, carry, l.maxBatch)
		if len(group) == 0 {
			return
		}
		carry, _ = l.commit(q, group, false)
	}
}

// groupTry is a group's commit in progress: its calls and what the tries so
// far have learnt.
type groupTry struct {
	ctx       context.Context // the group's (groupContext): it outlives any one caller
	user      string
	q         *userQueue
	calls     []*call
	conflicts int
	throttles int
	seen      seen
	fresh     *ledger.Account // just read: the next try plans on it
	wait      time.Duration   // the backoff before the next try
	// next is the group adopted (ahead.go): planned while the group
	// before it was in flight, sent as it is on the next try.
	next *group
	// answer is a group that committed, whose calls are answered once the
	// group after it is on its way (flush).
	answer *group
}

// commit commits calls as one group (or several tries of it) and returns the
// calls that did not fit, for the next group. Inline (in the goroutine of
// a caller, see lead), a try that must back off hands the rest of the group
// and then q to a drainer goroutine, so that no caller waits on a backoff
// past its ctx, and reports handed.
func (l *Ledger) commit(q *userQueue, calls []*call, inline bool) (later []*call, handed bool) {
	g := groupTry{ctx: l.groupContext(), user: q.user, q: q, calls: calls}
	later, backoff := l.try(&g, inline)
	if !backoff {
		return later, false
	}
	rest := g // only a group that goes on elsewhere moves to the heap
	go func() {
		later, _ := l.try(&rest, false)
		l.drain(q, later)
	}()
	return nil, true
}

// groupWindow is how long groups share one context (groupContext).
const groupWindow = time.Second

// sharedContext is a context for the groups begun before until.
type sharedContext struct {
	ctx    context.Context
	cancel context.CancelFunc // never called: the context ends at its deadline
	until  time.Time
}

// groupContext returns the context a group commits under: it outlives any
// one caller (they may leave, the group goes on) and ends a minute after the
// group begins, or up to groupWindow later. Groups begun within one window
// share it, so that a busy process makes one context and one timer a
// window, not one a group.
func (l *Ledger) groupContext() context.Context {
	now := time.Now()
	if s := l.groupCtx.Load(); s != nil && now.Before(s.until) {
		return s.ctx
	}
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(time.Minute+groupWindow))
	l.groupCtx.Store(&sharedContext{ctx: ctx, cancel: cancel, until: now.Add(groupWindow)})
	return ctx
}

// try commits g, retrying as cancellations and throttles say, and returns
// the calls planned for the next group. If stopAtBackoff, it returns at the
// first backoff instead (backoff true, g.wait set) for the caller to go on
// elsewhere. Otherwise, pipelining (ahead.go), it goes on from a group
// that committed to the next, planned while that one was in flight, for
// as long as calls wait.
func (l *Ledger) try(g *groupTry, stopAtBackoff bool) (later []*call, backoff bool) {
	ctx, user := g.ctx, g.user
	defer l.flush(g)
	for len(g.calls) > 0 {
		if g.wait > 0 {
			err := sleep(ctx, g.wait)
			g.wait = 0
			if err != nil {
				finishAll(g.calls, err)
				return later, false
			}
		}
		p, ok := l.planTry(g)
		if !ok {
			return later, false
		}
		later = p.later
		current := g.calls[:len(g.calls)-len(p.later)] // p.later is what follows the group in calls
		if p.behind {
			if !l.readAgain(g, current) {
				return later, false
			}
			g.calls, later = withoutFinished(g.calls), nil
			continue
		}
		if len(p.members) == 0 && p.recorded == 0 {
			l.flush(g)
			l.finishRefused(ctx, p.refused)
			return later, false
		}
		a, err := l.transact(g, p, l.pipelines(stopAtBackoff))
		if err == nil {
			l.settled(user, p)
			if a == nil {
				l.answer(ctx, p)
				return later, false
			}
			// The next group goes now; p's calls are answered once it is
			// on its way (transact, or flush).
			next, calls := l.adopt(ctx, g.q, a)
			// A group of its own, with its own context (a busy user's
			// groups may go on one after the other for longer than any
			// one context lasts) and its own attempts.
			ctx = l.groupContext()
			*g = groupTry{ctx: ctx, user: user, q: g.q, calls: calls, next: &next, answer: &p}
			continue
		}
		l.forget(user)
		if a != nil {
			l.discard(g.q, a)
		}
		settled, retry, unexplained := l.failed(ctx, p, err)
		if settled < 0 {
			// The outcome is unknown: the callers may retry with their request ids.
			finishAll(current, fmt.Errorf("transact write of %d entries and %d refusals for user %q: %w", len(p.members), p.recorded, user, err))
			return later, false
		}
		// Everything not settled is planned again; the calls that were
		// planned for later stay in line behind them.
		g.calls, later = withoutFinished(g.calls), nil
		if settled > 0 {
			continue // the rest may well commit now
		}
		if unexplained != nil {
			l.checkRecords(ctx, p, unexplained)
			g.calls = withoutFinished(g.calls)
			continue
		}
		l.observe.Retried(retryReason(retry))
		// A throttle waits for the partition to refill, on a schedule and a
		// count of its own (Retry.Throttled); a lost race retries at once.
		policy, n := l.retry.Backoff, &g.conflicts
		if errors.Is(retry, errThrottled) {
			policy, n = l.retry.Throttled, &g.throttles
		}
		if *n++; *n >= policy.MaxAttempts {
			l.abandon(ctx, user, current, retry, *n)
			return p.later, false // never tried: the next group tries them, with attempts of its own
		}
		g.wait = policy.backoff(*n)
		if stopAtBackoff {
			return nil, true // g.calls are every call not answered, in line
		}
	}
	return later, false
}

// planTry is the group g tries next: the one adopted (g.next), or one
// planned on the account just read, or cached. It answers every call with
// the error when the account cannot be read (ok false).
func (l *Ledger) planTry(g *groupTry) (p group, ok bool) {
	if g.next != nil {
		p, g.next = *g.next, nil
		return p, true
	}
	var acct ledger.Account
	if g.fresh != nil {
		acct, g.fresh = *g.fresh, nil
	} else {
		var err error
		if acct, err = l.cachedAccount(g.ctx, g.user); err != nil {
			l.flush(g)
			finishAll(g.calls, err)
			return group{}, false
		}
	}
	return l.plan(g.ctx, acct, g.calls, &g.seen), true
}

// readAgain reads g's account for its next try, after planning showed the
// cache behind another writer's (a refund of a purchase past it), and
// reports whether g goes on: not when the read fails or the account kept
// changing (current, the group's calls, are answered then).
func (l *Ledger) readAgain(g *groupTry, current []*call) bool {
	l.flush(g)
	read, err := l.account(g.ctx, g.user)
	if err != nil {
		finishAll(current, err)
		return false
	}
	l.cache(g.user, read)
	g.fresh = &read
	l.observe.Retried(RetryStaleCache)
	if g.conflicts++; g.conflicts >= l.retry.MaxAttempts {
		l.abandon(g.ctx, g.user, current, fmt.Errorf("%w: the account kept changing under its cache", errRetry), g.conflicts)
		return false
	}
	return true
}

// failed reads what a transaction that did not commit says: a cancelled one
// settles calls (decodeCancel); a throttled request was not carried out
// and is retried like a throttled item; anything else has an unknown
// outcome (settled -1).
func (l *Ledger) failed(ctx context.Context, g group, err error) (settled int, retry, unexplained error) {
	var canceled *types.TransactionCanceledException
	switch {
	case errors.As(err, &canceled):
		return l.decodeCancel(ctx, g, canceled.CancellationReasons)
	case throttle.Refused(err):
		return 0, fmt.Errorf("%w: %w", errThrottled, err), nil
	}
	return -1, nil, nil
}

// settled notes that g committed: its account is cached for the next
// group, and the Observer told.
func (l *Ledger) settled(user string, g group) {
	l.cache(user, g.after)
	l.observe.GroupCommitted(len(g.members) + g.recorded)
}

// answer answers the calls of g, which committed: each member with its
// entry, each repeat as its request's record says, each refusal.
func (l *Ledger) answer(ctx context.Context, g group) {
	for _, p := range g.members {
		p.c.finish(ledger.Result{Entry: p.entry, Balance: p.after.Balance, Held: p.after.Held, Pending: p.after.Pending, Hold: p.hold}, nil)
	}
	for _, r := range g.repeats {
		r.c.finish(l.replay(ctx, r.c.m, r.rec))
	}
	l.finishRefused(ctx, g.refused)
}

// checkRecords answers the calls of g with a record in it after a
// cancellation decodeCancel could not explain: each checks its own record
// (see refuse) before it gets the error.
func (l *Ledger) checkRecords(ctx context.Context, g group, unexplained error) {
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
}

// plan folds calls over acct, in order, into a group: for each, the facts
// it is decided on (facts.go), the domain's decision on the account so far
// (ledger.Decide), and its items added to the transaction (txn.go), until
// the group is full or a call must wait for the next.
func (l *Ledger) plan(ctx context.Context, acct ledger.Account, calls []*call, seen *seen) group {
	t := newTxn(&l.table, l, acct, l.now().UTC().Truncate(time.Microsecond))
	l.planInto(ctx, &t, calls, seen)
	return t.close()
}

// planInto folds calls into t, in order (see plan), setting t.later to
// those past the group's end. Planning ahead (t.ahead, see ahead.go), it
// also ends the group before a call that is not aheadable, or that would
// need a group of its own, and says so (t.stopped).
func (l *Ledger) planInto(ctx context.Context, t *txn, calls []*call, seen *seen) {
loop:
	for i, c := range calls {
		if err := c.ctx.Err(); err != nil {
			c.finish(ledger.Result{}, err) // the caller left before its turn
			continue
		}
		if t.ahead && !aheadable(c) {
			t.later, t.stopped = calls[i:], true
			break
		}
		if c.sweep {
			dec := ledger.DecideExpiry(t.running, t.now)
			if len(dec.Entries) == 0 {
				c.finish(ledger.Result{Balance: t.running.Balance, Held: t.running.Held, Pending: t.running.Pending}, nil) // nothing due
				continue
			}
			if !t.fits(ctx, c, entryItems(dec.Entries)) {
				t.later = calls[i:]
				break
			}
			t.add(&planned{c: c, request: -1, cap: -1}, dec)
			continue
		}
		if rec, ok := t.records[c.m.RequestID]; ok {
			t.repeats = append(t.repeats, repeat{c, rec}) // its request is in the group already
			continue
		}
		info, _ := c.m.Type.Info()
		facts, purchase, next := l.facts(ctx, t, c, info, seen)
		switch next {
		case decide:
		case answered:
			continue
		case nextGroup:
			t.later = calls[i:]
			break loop
		case readAgain:
			t.behind = true
			break loop
		}
		if !t.room(1) { // a refusal takes 1; a decision is sized below
			t.later = calls[i:]
			break
		}
		dec, err := ledger.Decide(t.running, c.m, t.now, facts)
		if err != nil {
			t.refuse(c, err)
			continue
		}
		if !t.fits(ctx, c, decisionItems(info, dec)) {
			if isDone(c) {
				continue
			}
			t.later = calls[i:]
			break
		}
		t.join(c, info, dec, purchase)
		t.drawFromBudget(c)
	}
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
