package dispatch

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pointledger/pointledger/internal/ledger"
)

// deliveriesRead names ListWebhookDeliveries' tokens (their scope's first name).
const deliveriesRead = "ListWebhookDeliveries"

// ListDeliveries pages one endpoint's deliveries, each event's row and
// its packed occurrences taken together (pack.go, history.go): every
// user's newest event first, by event id (ULIDs: time order); one user's
// newest version first, its notices after its entries' events, newest
// first. Before the
// rows come the events not yet attempted in their queue's current round
// (waiting behind a failing one, not yet reached, or asked again by a
// redelivery), PENDING with no attempts: one user's, newest first, and in
// every user's listing those of every user with a queue, by user, each
// newest first. In one user's listing an event waiting again after a
// redelivery is listed as waiting, not as its row was. States filter.
func (d *Dispatcher) ListDeliveries(ctx context.Context, q DeliveryQuery) ([]Delivery, string, error) {
	if q.EndpointID == "" {
		return nil, "", EndpointNotFound("")
	}
	if q.UserID != "" {
		if err := ledger.ValidateUserID(q.UserID); err != nil {
			return nil, "", err
		}
	}
	for _, s := range q.States {
		if s != DeliveryPending && s != DeliverySucceeded && s != DeliveryFailed {
			return nil, "", ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidFilter,
				"states: %q is not a delivery state (PENDING, SUCCEEDED, FAILED)", Clip(string(s)))
		}
	}
	size, err := ledger.PageSize(q.PageSize)
	if err != nil {
		return nil, "", err
	}
	ep, err := d.store.Get(ctx, q.EndpointID)
	if err != nil {
		return nil, "", err
	}
	states := slices.Clone(q.States)
	slices.Sort(states)
	scope := []string{deliveriesRead, q.EndpointID, q.UserID, fmt.Sprint(states)}
	after := ""
	if q.PageToken != "" {
		if after, err = d.o.Codec.DecodeKey(q.PageToken, scope...); err != nil {
			return nil, "", err
		}
	}
	q.States = states
	pending := len(states) == 0 || slices.Contains(states, DeliveryPending)
	var out []Delivery
	var last string
	if q.UserID != "" {
		out, last, err = d.listUser(ctx, ep, q, pending, size, after)
	} else if pending && (after == "" || strings.HasPrefix(after, waitingPosition)) {
		out, last, err = d.listEveryWaitingFirst(ctx, ep, q, size, after)
	} else {
		out, last, err = d.history(ctx, ep, q, size, after)
	}
	if err != nil {
		return nil, "", err
	}
	next := ""
	if last != "" {
		next = d.o.Codec.EncodeKey(last, scope...)
	}
	return out, next, nil
}

// waitingPosition starts a page token's position inside the waiting
// events: "W\x00<version>" in one user's listing, "W\x00<user>\x00<version>"
// in every user's, the last listed. A store's positions do not start so
// (one user's are its sort keys, "V#...", "N#..."; every user's, event
// ids).
const waitingPosition = "W\x00"

// round is what one user's listing takes from the user's queue: the
// events after lo, up to wanted, wait in the queue's current round (lo is
// done, or the head when it has failed attempts in this round: its row is
// then of this round), and only the rows below lo+1 are listed as rows
// (those above it are of an earlier round: a redelivery asked them again).
// Without a queue, or with nothing wanted, nothing waits.
type round struct {
	lo, wanted int64
	q          Queue
}

func (r round) waits() bool { return r.wanted > r.lo }

// roundOf reads user's queue on ep.
func (d *Dispatcher) roundOf(ctx context.Context, ep Endpoint, user string) (round, error) {
	q, ok, err := d.store.ReadQueue(ctx, QueueRef{EndpointID: ep.ID, UserID: user})
	if err != nil || !ok || q.Done >= q.Wanted {
		return round{}, err
	}
	lo := q.Done
	if q.Attempts > 0 {
		lo++
	}
	return round{lo: lo, wanted: q.Wanted, q: q}, nil
}

// listUser is one user's listing: with pending, the user's waiting events
// first (below the version after names: "" all of them), newest first,
// then the store's rows from the first; the rows only below the round's.
func (d *Dispatcher) listUser(ctx context.Context, ep Endpoint, q DeliveryQuery, pending bool, size int, after string) ([]Delivery, string, error) {
	r, err := d.roundOf(ctx, ep, q.UserID)
	if err != nil {
		return nil, "", err
	}
	if r.waits() {
		q.BelowVersion = r.lo + 1
	}
	if !pending || (after != "" && !strings.HasPrefix(after, waitingPosition)) {
		return d.history(ctx, ep, q, size, after)
	}
	below := int64(math.MaxInt64)
	if after != "" {
		v, err := strconv.ParseInt(strings.TrimPrefix(after, waitingPosition), 10, 64)
		if err != nil {
			return nil, "", fmt.Errorf("list deliveries: position %q: %w", after, err)
		}
		below = v
	}
	out, err := d.waiting(ctx, ep, q.UserID, r, below, size+1)
	if err != nil {
		return nil, "", err
	}
	position := func() string { return waitingPosition + strconv.FormatInt(out[size-1].Version, 10) }
	return d.thenRows(ctx, ep, q, out, size, position)
}

// listEveryWaitingFirst is every user's listing that wants PENDING rows:
// the waiting events of every user with a queue, by user, each newest
// first (from the position after names: "" the first), then the store's
// rows from the first.
func (d *Dispatcher) listEveryWaitingFirst(ctx context.Context, ep Endpoint, q DeliveryQuery, size int, after string) ([]Delivery, string, error) {
	var out []Delivery
	position := func() string {
		last := out[size-1]
		return waitingPosition + last.UserID + "\x00" + strconv.FormatInt(last.Version, 10)
	}
	each := func(user string, below int64) (bool, error) {
		r, err := d.roundOf(ctx, ep, user)
		if err != nil {
			return false, err
		}
		ws, err := d.waiting(ctx, ep, user, r, below, size+1-len(out))
		out = append(out, ws...)
		return len(out) <= size, err
	}
	from := ""
	if after != "" {
		user, v, ok := strings.Cut(strings.TrimPrefix(after, waitingPosition), "\x00")
		below, err := strconv.ParseInt(v, 10, 64)
		if !ok || err != nil {
			return nil, "", fmt.Errorf("list deliveries: position %q", after)
		}
		more, err := each(user, below)
		if err != nil {
			return nil, "", err
		}
		if !more {
			return d.thenRows(ctx, ep, q, out, size, position)
		}
		from = user
	}
	err := d.store.Queued(ctx, ep.ID, from, func(user string) (bool, error) { return each(user, math.MaxInt64) })
	if err != nil {
		return nil, "", err
	}
	return d.thenRows(ctx, ep, q, out, size, position)
}

// thenRows ends a listing whose waiting events are out (at most size+1 of
// them): more than size, the page is full and the next starts after its
// last (position); size, the next page only if the store has a row;
// fewer, the page is filled with the store's rows from the first.
func (d *Dispatcher) thenRows(ctx context.Context, ep Endpoint, q DeliveryQuery, out []Delivery, size int, position func() string) ([]Delivery, string, error) {
	if len(out) > size {
		out = out[:size]
		return out, position(), nil
	}
	if len(out) == size {
		rows, next, err := d.history(ctx, ep, q, 1, "")
		if err != nil || (len(rows) == 0 && next == "") {
			return out, "", err
		}
		return out, position(), nil
	}
	rows, last, err := d.history(ctx, ep, q, size-len(out), "")
	if err != nil {
		return nil, "", err
	}
	return append(out, rows...), last, nil
}

// waiting returns at most limit of the events waiting in user's round r
// on ep, below version below, newest first, as PENDING deliveries with no
// attempts: those after r.lo, up to r.wanted, that ep receives. One that
// a redelivery asked again keeps its earlier attempts in its log.
func (d *Dispatcher) waiting(ctx context.Context, ep Endpoint, user string, r round, below int64, limit int) ([]Delivery, error) {
	out, err := d.waitingEvents(ctx, ep, user, r, below, limit)
	if err != nil || len(out) == 0 {
		return out, err
	}
	rows, _, err := d.store.ListDeliveries(ctx, DeliveryQuery{EndpointID: ep.ID, UserID: user, BelowVersion: out[0].Version + 1}, len(out), "")
	if err != nil {
		return nil, err
	}
	byVersion := map[int64]*Delivery{}
	for i, row := range rows {
		if row.Type != ledger.EventPointsExpiring {
			byVersion[row.Version] = &rows[i]
		}
	}
	occ, err := d.packedOf(ctx, ep.ID, out)
	if err != nil {
		return nil, err
	}
	for i := range out {
		row, o := byVersion[out[i].Version], occ[out[i].EventID]
		if row != nil || len(o) > 0 {
			out[i].Log = merged(ep.ID, row, o).Log
		}
	}
	return out, nil
}

// waitingEvents is waiting's events, read from the ledger.
func (d *Dispatcher) waitingEvents(ctx context.Context, ep Endpoint, user string, r round, below int64, limit int) ([]Delivery, error) {
	var out []Delivery
	for cur := min(r.wanted, below-1); cur > r.lo && len(out) < limit; {
		from := max(r.lo, cur-int64(limit))
		es, err := d.ledger.EntriesAfter(ctx, user, from, int(cur-from))
		if err != nil {
			return nil, fmt.Errorf("list deliveries: entries of %s: %w", user, err)
		}
		for i := len(es) - 1; i >= 0 && len(out) < limit; i-- {
			e := es[i]
			if e.Version > cur || !admits(ep, r.q.AdmitFrom, e) {
				continue
			}
			out = append(out, Delivery{
				EndpointID: ep.ID, EventID: e.ID, Type: ledger.EventTypeOf(e.Type), UserID: user,
				Version: e.Version, State: DeliveryPending,
			})
		}
		cur = from
	}
	return out, nil
}

// Redeliver sends an endpoint's events again, read from the ledger: one
// user's (r.UserID) or those of every user the endpoint has a queue for,
// from r.FromVersion, from the first entry at or after r.StartTime, or
// (neither) from the first entry the endpoint receives. It moves each
// queue's done back (never wanted forward; a user without a queue gets
// one), and asking for a version or a time lets the queue admit entries
// older than the endpoint. It returns the number of events to be sent:
// those the endpoint subscribes to, from that point to the user's last
// entry. A redelivered event's row starts again at its next attempt.
func (d *Dispatcher) Redeliver(ctx context.Context, r Redelivery) (int64, error) {
	if r.EndpointID == "" {
		return 0, EndpointNotFound("")
	}
	if r.FromVersion < 0 {
		return 0, ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidFilter, "from_version must not be negative")
	}
	if r.FromVersion > 0 && !r.StartTime.IsZero() {
		return 0, ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidFilter, "give from_version or start_time, not both")
	}
	if r.UserID != "" {
		if err := ledger.ValidateUserID(r.UserID); err != nil {
			return 0, err
		}
	}
	ep, err := d.store.Get(ctx, r.EndpointID)
	if err != nil {
		return 0, err
	}
	// Counted before any queue moves: a dispatcher that remembers users
	// without a queue reads them again once it sees the count (direct.go).
	if err := d.store.CountRedelivery(ctx, ep.ID); err != nil {
		return 0, err
	}
	if r.UserID != "" {
		return d.redeliverUser(ctx, ep, r.UserID, r)
	}
	var total int64
	err = d.store.QueueUsers(ctx, ep.ID, r.StartTime, func(user string) error {
		n, err := d.redeliverUser(ctx, ep, user, r)
		total += n
		return err
	})
	return total, err
}

// redeliverUser moves back the queue of ep and user as r asks, and
// returns how many events it will send.
func (d *Dispatcher) redeliverUser(ctx context.Context, ep Endpoint, user string, r Redelivery) (int64, error) {
	ref := QueueRef{EndpointID: ep.ID, UserID: user}
	for {
		q, exists, err := d.store.ReadQueue(ctx, ref)
		if err != nil {
			return 0, err
		}
		admitFrom, from := redeliveryStart(r, ep, q, exists)
		target, last, count, err := d.redeliverySpan(ctx, ep, user, r.FromVersion, from, admitFrom)
		if err != nil || count == 0 {
			return 0, err
		}
		m := moveBack(q, exists, target, last, admitFrom, d.o.Now())
		err = d.store.MoveBack(ctx, ref, q, exists, m)
		if errors.Is(err, ErrQueueChanged) {
			continue // another writer in between: read again
		}
		if err != nil {
			return 0, err
		}
		d.handOver(ref)
		return count, nil
	}
}

// redeliverySpan reads user's entries and finds where a redelivery starts
// (target: done is moved back to it) and the last version, and counts the
// events ep will receive after target: from fromVersion if given, else
// from the first entry created at or after from; admitted from admitFrom.
func (d *Dispatcher) redeliverySpan(ctx context.Context, ep Endpoint, user string, fromVersion int64, from, admitFrom time.Time) (target, last int64, count int64, err error) {
	after := int64(0)
	found := false
	if fromVersion > 0 {
		after, target, found = fromVersion-1, fromVersion-1, true
	}
	// As admits: the ledger keeps an entry's time to the microsecond, so an
	// entry of from's own microsecond is not before it.
	from = from.Truncate(time.Microsecond)
	const page = 500
	for {
		es, err := d.ledger.EntriesAfter(ctx, user, after, page)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("redeliver: entries of %s: %w", user, err)
		}
		for _, e := range es {
			if !found && !e.CreateTime.Before(from) {
				target, found = e.Version-1, true
			}
			if found && admits(ep, admitFrom, e) {
				count++
			}
			last = e.Version
		}
		if len(es) < page {
			return target, last, count, nil
		}
		after = es[len(es)-1].Version
	}
}
