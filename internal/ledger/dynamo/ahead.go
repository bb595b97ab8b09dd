package dynamo

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// Planning a busy user's next group while its last one's transaction is in
// flight (a step of the write path, see write.go, "One group ahead").
//
// Without it, a hot user's committer did nothing for the 10–20 ms a
// transaction takes, and then planned the next group (decisions, entries'
// ids, items: about half a millisecond for a full group, more on a busy
// machine) before it could send it: time between two transactions of the
// user, where DynamoDB did nothing for it either (BenchmarkHotUserGroups).

// ahead is a group planned on the account the group in flight leaves if
// it commits: adopted (completed and sent) once that group commits,
// discarded if it does not.
type ahead struct {
	t     txn     // open: close makes its items final
	calls []*call // the calls it was planned from, in line: the group in flight's later, then taken
	taken int     // how many of calls, at the end, were taken from the queue
	seen  seen
	// closed: the group is complete as planned (full, or Options.MaxBatch
	// calls), and closed ahead too; adopt sends it as it is.
	closed *group
}

// pipelines says whether a committer plans a group ahead: only one that
// runs apart from any caller (a drainer), with grouping on and no linger
// (a linger gathers each group from what queued during it).
func (l *Ledger) pipelines(stopAtBackoff bool) bool {
	return !stopAtBackoff && l.maxBatch > 1 && l.linger == 0
}

// aheadable says whether c can be decided on an account not yet
// committed: only on the account and the program's point kinds, with no
// fact read from the table that the group in flight may be writing (a
// refund's purchase, a reversal's grant, a hold's record, a budget's
// shards, the entries an explaining adjustment sums), and no sweep.
func aheadable(c *call) bool {
	if c.sweep || c.m.BudgetID != "" || c.m.ExplainBalance {
		return false
	}
	info, _ := c.m.Type.Info()
	return !info.RefersToPurchase && !info.RefersToGrant && !info.ResolvesHold
}

// transact sends p. When pipelining, with calls to plan next (p's later,
// or queued) or a committed group still to answer, another goroutine
// answers that group and plans the next on p.after (prepare) while p is
// in flight, and transact returns that plan too. p is sent from the
// committer's own goroutine, at once: a goroutine started to send it
// would wait for a processor behind the callers its answers wake.
func (l *Ledger) transact(g *groupTry, p group, pipelining bool) (*ahead, error) {
	in := &dynamodb.TransactWriteItemsInput{
		TransactItems: p.items,
		// Lets the SDK's own retries of this call (after a lost response)
		// be answered with the first outcome instead of failed conditions.
		ClientRequestToken: aws.String(l.newID(l.now())),
	}
	if !pipelining || (g.answer == nil && len(p.later) == 0 && !l.queues.waiting(g.q)) {
		_, err := l.db.TransactWriteItems(g.ctx, in)
		return nil, err
	}
	prepared := make(chan *ahead, 1)
	answer := g.answer // the goroutine's alone from here
	g.answer = nil
	go func() {
		if answer != nil { // the group before p, committed
			l.answer(g.ctx, *answer)
		}
		prepared <- l.prepare(g.ctx, g.q, p)
	}()
	_, err := l.db.TransactWriteItems(g.ctx, in)
	return <-prepared, err
}

// prepare plans the group after p on the account p leaves: p's later,
// then calls from the queue, up to Options.MaxBatch in all. It stops
// before a call that is not aheadable, or that would need a group of its
// own (t.stopped): adopt goes on from there once p has committed. Nil
// when no call waits.
func (l *Ledger) prepare(ctx context.Context, q *userQueue, p group) *ahead {
	more := l.queues.takeMore(q, l.maxBatch-len(p.later))
	if len(p.later)+len(more) == 0 {
		return nil
	}
	a := &ahead{calls: append(p.later[:len(p.later):len(p.later)], more...), taken: len(more)}
	a.t = newTxn(&l.table, l, p.after, l.now().UTC().Truncate(time.Microsecond))
	a.t.ahead = true
	l.planInto(ctx, &a.t, a.calls, &a.seen)
	if !a.t.stopped && (a.t.later != nil || len(a.calls) >= l.maxBatch) {
		closed := a.t.close()
		a.closed = &closed
	}
	return a
}

// adopt completes a, whose group before it committed: its account is now
// the account (as far as this process knows; the account's condition
// says), so planning goes on without the restrictions of ahead from
// where it stopped, and takes what queued meanwhile, up to
// Options.MaxBatch calls. It returns the group and its calls, in line.
func (l *Ledger) adopt(ctx context.Context, q *userQueue, a *ahead) (group, []*call) {
	if a.closed != nil {
		return *a.closed, a.calls
	}
	t := &a.t
	t.ahead = false
	if t.stopped {
		rest := t.later
		t.later, t.stopped = nil, false
		l.planInto(ctx, t, rest, &a.seen)
	}
	if t.later == nil && !t.behind {
		if more := l.queues.takeMore(q, l.maxBatch-len(a.calls)); len(more) > 0 {
			a.calls = append(a.calls, more...)
			l.planInto(ctx, t, more, &a.seen)
		}
	}
	return t.close(), a.calls
}

// discard drops a, whose group before it did not commit: nothing of it
// was sent. The calls it took from the queue go back to its head, in
// line (those it answered, whose callers left, stay answered); the
// group before it keeps its own later, which it plans again.
func (l *Ledger) discard(q *userQueue, a *ahead) {
	l.queues.putBack(q, withoutFinished(a.calls[len(a.calls)-a.taken:]))
}

// flush answers the calls of g's committed group, if one waits.
func (l *Ledger) flush(g *groupTry) {
	if g.answer != nil {
		l.answer(g.ctx, *g.answer)
		g.answer = nil
	}
}
