package dynamo

import (
	"context"
	"fmt"

	"github.com/pointledger/pointledger/internal/ledger"
)

// Answers without a commit of their own: a group's refusals, and a
// request already recorded (a replay).

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
	res := ledger.Result{Entry: e, Balance: e.BalanceAfter, Held: e.HeldAfter, Pending: e.PendingAfter, Replayed: true}
	if rec.Last > rec.Version { // the call wrote an expiration after its entry
		last, ok, err := l.entry(ctx, m.UserID, rec.Last)
		if err != nil {
			return ledger.Result{}, err
		}
		if !ok {
			return ledger.Result{}, fmt.Errorf("request %q of user %q points at missing entry version %d", m.RequestID, m.UserID, rec.Last)
		}
		res.Balance, res.Held, res.Pending = last.BalanceAfter, last.HeldAfter, last.PendingAfter
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
