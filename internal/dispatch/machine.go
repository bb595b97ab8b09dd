package dispatch

import (
	"time"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/webhook"
)

// The queue's state machine: what the dispatcher decides, as pure
// functions of values (a queue as read, an attempt's answer, the time),
// tested in machine_test.go without any store. The loop (deliver.go,
// dispatcher.go, deliveries.go) reads, calls these, and writes what they
// decide.

// mark is what a batch of the stream asks of one queue: the versions from
// first to last are wanted (n of them for its endpoint), admitted from
// admitFrom.
type mark struct {
	ref         QueueRef
	first, last int64
	n           int
	admitFrom   time.Time
}

// group makes the marks of a batch (byUser: the batch's entries by user,
// in version order): one per user and enabled endpoint that receives at
// least one of the user's entries, by its subscription and create time.
func group(byUser map[string][]ledger.Entry, eps map[string]Endpoint) []mark {
	var marks []mark
	for user, es := range byUser {
		for _, ep := range eps {
			if ep.Disabled {
				continue
			}
			m := mark{ref: QueueRef{EndpointID: ep.ID, UserID: user}, admitFrom: ep.CreateTime}
			for _, e := range es {
				if !admits(ep, ep.CreateTime, e) {
					continue
				}
				if m.n == 0 || e.Version < m.first {
					m.first = e.Version
				}
				m.last = max(m.last, e.Version)
				m.n++
			}
			if m.n > 0 {
				marks = append(marks, m)
			}
		}
	}
	return marks
}

// admits says whether endpoint ep receives entry e on a queue that admits
// entries created at or after admitFrom (the endpoint's create_time, or
// earlier after a redelivery asked for older entries).
func admits(ep Endpoint, admitFrom time.Time, e ledger.Entry) bool {
	// The ledger keeps an entry's time to the microsecond, the endpoints
	// theirs to the nanosecond: an entry of the endpoint's own microsecond
	// is not older than it.
	return ep.Subscription.Includes(ledger.EventTypeOf(e.Type)) && !e.CreateTime.Before(admitFrom.Truncate(time.Microsecond))
}

// attemptNumber is the number of the attempt at version on q: the head's
// attempts so far and one, or 1 for an event past the head (the head's
// attempts are counted on the queue only).
func attemptNumber(q Queue, version int64) int {
	if version == q.Done+1 {
		return q.Attempts + 1
	}
	return 1
}

// step is what an attempt's answer decides: its outcome, the row's state
// and, PENDING, when to try again. Resolved events (SUCCEEDED, FAILED)
// join the group and the queue goes on; a PENDING head puts the queue
// off until next.
type step struct {
	outcome Outcome
	state   DeliveryState
	next    time.Time
}

// resolved says whether the event is done with (the queue goes on).
func (s step) resolved() bool { return s.state != DeliveryPending }

// decide is the step after attempt number attempts at now answered res,
// on schedule s (send, put off, give up).
func decide(res webhook.Attempt, attempts int, s webhook.Schedule, now time.Time, random func() float64) step {
	next, giveUp := s.NextAttempt(attempts, now, random)
	switch {
	case res.Delivered():
		return step{outcome: OutcomeSucceeded, state: DeliverySucceeded}
	case giveUp:
		return step{outcome: OutcomeGaveUp, state: DeliveryFailed}
	case res.Gone():
		return step{outcome: OutcomeGone, state: DeliveryPending, next: next}
	}
	return step{outcome: OutcomeFailed, state: DeliveryPending, next: next}
}

// flushNow says whether the group of resolved events that makes n items
// (packs and rows), the oldest made age ago, is written now: a given-up
// event at once (like every attempt without a 2xx, before the next event
// goes), else when the group is full or old enough.
func flushNow(st step, n int, age time.Duration) bool {
	return st.state == DeliveryFailed || n >= maxGroup || age >= flushAfter
}

// settle is w as it is written on a queue wanting wanted: a release of a
// queue that wants more than w.Done keeps the claim instead.
func settle(w QueueWrite, wanted int64) QueueWrite {
	if w.After == Release && w.Done < wanted {
		w.After = KeepClaim
	}
	return w
}

// verdict is what a holder's write whose condition failed finds on
// reading the queue again.
type verdict int

const (
	writeAgain  verdict = iota // only wanted rose: write again
	claimLost                  // the queue is gone or another holds it
	redelivered                // a redelivery moved it: go on from it
)

// afterConflict is the verdict on q (as written) given now, the queue as
// read again (ok false: gone), for owner.
func afterConflict(q, now Queue, ok bool, owner string) verdict {
	switch {
	case !ok || now.ClaimOwner != owner:
		return claimLost
	case now.RVN != q.RVN:
		return redelivered
	}
	return writeAgain
}

// redo is where a batch goes on after a redelivery moved its queue (now,
// as read) under it, cursor and rows being the batch's: the redelivery
// asked for the events after now.Redo to be sent again and moved done
// back to at most it. The group's resolved rows up to there stay, to be
// written; the rest are sent again, from to.
func redo(now Queue, cursor int64, rows []Row) (to int64, kept []Row) {
	to = now.Done
	if now.HasRedo {
		to = max(now.Done, min(cursor, now.Redo))
	}
	kept = rows[:0]
	for _, r := range rows {
		if r.Event.Version <= to && r.State != DeliveryPending {
			kept = append(kept, r)
		}
	}
	return to, kept
}

// redeliveryStart is where a redelivery r of ep's queue (q, exists) starts
// admitting entries (admitFrom: asking for a version admits them all,
// asking for an earlier time admits from it) and the time of the first
// entry it sends again (from).
func redeliveryStart(r Redelivery, ep Endpoint, q Queue, exists bool) (admitFrom, from time.Time) {
	admitFrom = ep.CreateTime
	if exists {
		admitFrom = q.AdmitFrom
	}
	switch {
	case r.FromVersion > 0:
		admitFrom = time.Unix(0, 0).UTC()
	case !r.StartTime.IsZero() && r.StartTime.Before(admitFrom):
		admitFrom = r.StartTime
	}
	from = admitFrom
	if !r.StartTime.IsZero() {
		from = r.StartTime
	}
	return admitFrom, from
}

// moveBack is the redelivery's write of the queue (q, exists) that sends
// again the events after target, up to last: done moves back to target
// (never forward), and a holder whose group is not yet written learns
// where to start again (Redo, the earliest asked); what was resolved
// before (up to ResolvedHigh) is counted as sent again. A queue made by
// it wants last, all of it counted as sent again.
func moveBack(q Queue, exists bool, target, last int64, admitFrom, now time.Time) MoveBack {
	m := MoveBack{AdmitFrom: admitFrom, Now: now}
	if !exists {
		// A user without a queue has had every event sent (directly, or
		// by a queue released since) or never had one for ep: what the
		// redelivery sends is sent again, not a first delivery.
		m.Done, m.Wanted, m.ResolvedHigh = target, last, last
		return m
	}
	m.Redo = target
	if q.HasRedo {
		m.Redo = min(m.Redo, q.Redo)
	}
	m.Done, m.ResolvedHigh = min(q.Done, target), max(q.Done, q.ResolvedHigh)
	return m
}
