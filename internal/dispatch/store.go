package dispatch

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/webhook"
)

// Store is what the dispatcher keeps: the endpoints, a queue per endpoint
// and user, the delivery rows, and the notices' rows (each its own queue of
// one event). internal/dispatch/dynamo keeps them in DynamoDB,
// internal/dispatch/memory in memory; both pass dispatchtest's contract.
// The store decides nothing: every write is conditional on what the
// dispatcher read, and the dispatcher decides what to write.
type Store interface {
	EndpointStore

	// MarkWanted records on the queue of ref that versions up to last are
	// wanted, making it if there is none (done first-1, admitting from
	// admitFrom); a queue already wanting as much is left alone (ok
	// false). A queue made or idle becomes due now (the mark's Now); with
	// m.Claim, the same write claims an idle queue (no claim owner at
	// all) until m.Claim.Until, due then, and claimed says it did. The
	// mark does not move the record version.
	MarkWanted(ctx context.Context, ref QueueRef, m Mark) (q Queue, claimed, ok bool, err error)
	// Claim takes the queue of ref for owner until until, if it is due at
	// now (no due time, or one at or before now), has events waiting
	// (done < wanted) and no one else holds it (no claim, one ended
	// before now, or owner's own); it moves the record version and the
	// due time to until. ok is false when it may not be taken.
	Claim(ctx context.Context, ref QueueRef, owner string, now, until time.Time) (q Queue, ok bool, err error)
	// ReadQueue reads a queue consistently; ok is false if there is none.
	ReadQueue(ctx context.Context, ref QueueRef) (q Queue, ok bool, err error)
	// ReadQueues reads the queues of refs consistently, as ReadQueue, in
	// as few calls as the store can (DynamoDB's BatchGetItem takes 100
	// keys): those that exist, by ref.
	ReadQueues(ctx context.Context, refs []QueueRef) (map[QueueRef]Queue, error)
	// WriteQueue puts rows, w's packs and w on the record at once,
	// conditional on q's record version (and, for a release, on wanted
	// <= w.Done):
	// ErrQueueChanged when the condition fails, and then nothing is
	// written. A release deletes the queue: a queue exists only while it
	// has events waiting or is held, so that a user without one is sent
	// its events directly (Apply).
	WriteQueue(ctx context.Context, q Queue, rows []Row, w QueueWrite) error
	// PutRows writes the delivery rows of events sent directly, with no
	// queue (Apply), each whole, its log its one attempt (a row there
	// already, of an event sent again after a crash, is replaced), in as
	// few calls as the store can (DynamoDB: a batch write of 25, no
	// transaction); nothing else.
	PutRows(ctx context.Context, rows []Row) error
	// PutPacks writes packs (pack.go) of events sent directly, each a new
	// item, in as few calls as the store can; nothing else.
	PutPacks(ctx context.Context, packs []Pack) error
	// Packs returns at most limit of the endpoint's packs whose key sorts
	// below below ("" from the highest), highest key first, each with its
	// Key.
	Packs(ctx context.Context, endpointID, below string, limit int) ([]Pack, error)
	// PackedOf returns the occurrences of event eventID in the endpoint's
	// packs: it reads those in PackWindow(eventID) whose lowest event id
	// is at most eventID.
	PackedOf(ctx context.Context, endpointID, eventID string) ([]Packed, error)
	// MoveBack is a redelivery's write: on the queue of ref as read (q,
	// exists), conditional on q's record version (or on there being no
	// queue), ErrQueueChanged when that fails.
	MoveBack(ctx context.Context, ref QueueRef, q Queue, exists bool, m MoveBack) error
	// QueueUsers calls fn once with each user the endpoint has a queue, a
	// delivery row or, in a pack whose highest event id is from since on
	// (zero: any), a packed event for (a user sent its events directly
	// and answered 2xx has packed events only). It may name other users
	// too: a redelivery sends them nothing.
	QueueUsers(ctx context.Context, endpointID string, since time.Time, fn func(user string) error) error
	// Queued calls fn with each user the endpoint has a queue for, in
	// user order, from the first after after ("" the first), while fn
	// says more.
	Queued(ctx context.Context, endpointID, after string, fn func(user string) (more bool, err error)) error
	// Due returns the queues and notice rows due at now (candidates only:
	// a claim decides).
	Due(ctx context.Context, now time.Time) ([]QueueRef, error)

	// ListDeliveries returns the delivery rows of q (checked) after the
	// position after ("" first), newest first, at most size, and the
	// position of the last if there are more. Every user's rows are by
	// event id, and a position is an event id (the rows below it follow);
	// one user's, by version and then the notices', and a position is the
	// store's own.
	ListDeliveries(ctx context.Context, q DeliveryQuery, size int, after string) (rows []Delivery, next string, err error)

	// PutNotice writes a notice's delivery row, PENDING and due at now,
	// unless the endpoint has one for the event already (ok false).
	PutNotice(ctx context.Context, endpointID string, ev webhook.Event, now time.Time) (ok bool, err error)
	// ClaimNotice takes the notice row of ref for owner until until, if
	// it is PENDING, due at now and no one else holds it.
	ClaimNotice(ctx context.Context, ref QueueRef, owner string, now, until time.Time) (ev webhook.Event, attempts int, ok bool, err error)
	// WriteNotice writes a notice row owner holds and ends the claim; a
	// claim lost meanwhile writes nothing and is no error.
	WriteNotice(ctx context.Context, ref QueueRef, owner string, w NoticeWrite) error
}

// EndpointStore keeps the webhook endpoints. It checks nothing about a URL
// or event types: the caller (the API) does, with webhook.URLPolicy and
// ledger.ParseSubscription, before it calls.
type EndpointStore interface {
	// Create stores a new endpoint with e's URL, event types and
	// description, a new id, the time now and a new secret, and returns it
	// with the secret: the only time the secret is shown.
	Create(ctx context.Context, e Endpoint) (Endpoint, webhook.Secret, error)
	// Get returns the endpoint with id, read consistently, or
	// ENDPOINT_NOT_FOUND.
	Get(ctx context.Context, id string) (Endpoint, error)
	// List returns every endpoint, oldest first, read consistently.
	List(ctx context.Context) ([]Endpoint, error)
	// Page returns at most size endpoints after the one with id after (""
	// from the first), by id (ULIDs: oldest first), read consistently, and
	// the id of the last if more follow (the next page's after).
	Page(ctx context.Context, after string, size int) (eps []Endpoint, next string, err error)
	// Update reads the endpoint with id, lets change alter it (its id,
	// create time and secrets are kept whatever change does) and writes
	// it back unless another writer changed it meanwhile (then again, a
	// few times, then ErrEndpointChanged).
	Update(ctx context.Context, id string, change func(*Endpoint) error) (Endpoint, error)
	// Disable marks the endpoint disabled with reason; an endpoint already
	// disabled keeps its first reason.
	Disable(ctx context.Context, id, reason string) error
	// Rotate gives the endpoint a new secret and returns it; the secret it
	// replaces signs beside it for RotationOverlap.
	Rotate(ctx context.Context, id string) (webhook.Secret, error)
	// Delete removes the endpoint; ENDPOINT_NOT_FOUND if there is none.
	Delete(ctx context.Context, id string) error
	// CountRedelivery adds one to the endpoint's Redeliveries, and moves
	// its record version as any write does (so an Update that read it
	// before reads again and keeps the count); ENDPOINT_NOT_FOUND if
	// there is none.
	CountRedelivery(ctx context.Context, id string) error
}

// RotationOverlap is how long an endpoint's old secret keeps signing beside
// the new one after RotateWebhookSecret, so that receivers can change
// secrets without losing a delivery.
const RotationOverlap = 24 * time.Hour

// ErrEndpointChanged is returned by Update when another writer changed
// the endpoint between its read and its write; the caller may try again.
var ErrEndpointChanged = errors.New("endpoint changed by another writer")

// ErrQueueChanged is a store's write of a queue whose condition failed:
// another writer moved it since it was read. Nothing was written.
var ErrQueueChanged = errors.New("queue changed since it was read")

// EndpointNotFound is the refusal of an endpoint id no endpoint has.
func EndpointNotFound(id string) error {
	return ledger.Errorf(ledger.KindNotFound, ledger.ReasonEndpointNotFound, "no webhook endpoint has the id %q", Clip(id))
}

// Clip keeps an id quoted in an error short, whatever the caller sent.
func Clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// QueueRef names a queue (an endpoint and a user) or, with Notice set, a
// notice's delivery row (its own queue of one event; Notice is its event
// id).
type QueueRef struct {
	EndpointID string
	UserID     string
	Notice     string
}

// Queue is one endpoint's queue of one user's events, as read.
type Queue struct {
	Ref        QueueRef
	Wanted     int64 // the highest version the stream has shown for the user
	Done       int64 // the last version resolved
	Attempts   int   // the head's, so far
	AdmitFrom  time.Time
	ClaimOwner string
	ClaimUntil time.Time
	RVN        int64
	// Redo is where the latest redelivery asked the queue to start again
	// (done moved back to at most it); HasRedo says there is one the claim
	// holder has not taken into account yet.
	Redo    int64
	HasRedo bool
	// ResolvedHigh is the highest done a redelivery moved back from: an
	// event at or below it was resolved before, so its attempt now is a
	// redelivery, counted apart from the first deliveries' lag.
	ResolvedHigh int64
}

// Waiting is the claim owner of a queue put off until its claim's end (a
// failed head's next attempt, a disabled endpoint, a stop): no dispatcher
// holds it, but it is not idle either, so that marking it wanted does not
// take it before its time (MarkWanted takes only a queue without any
// claim owner), and any dispatcher may claim it once the claim ends.
const Waiting = "(waiting)"

// Mark is a mark of wanted versions (Store.MarkWanted).
type Mark struct {
	First, Last int64
	AdmitFrom   time.Time
	Now         time.Time
	Claim       *Claim // nil: do not claim
}

// Claim is a claim a write takes: its owner, until when.
type Claim struct {
	Owner string
	Until time.Time
}

// Hold is what becomes of the claim after a holder's write.
type Hold int

const (
	// KeepClaim renews the claim: more events are to be sent.
	KeepClaim Hold = iota
	// PutOff ends the claim until a time, the queue staying due then: a
	// failed head's next attempt, a disabled endpoint, a stop.
	PutOff
	// Release ends the claim of a queue with nothing more wanted, only if
	// wanted is at most done: the queue is deleted (what it kept matters
	// no more: its head's attempts are on their rows), and the user's
	// next events are sent directly until one fails.
	Release
	// Drop takes the queue of a deleted endpoint out of the "due" index.
	Drop
)

// QueueWrite is one write of the claim holder to its queue: done moved to
// Done (the events up to it answered 2xx, given up or skipped), the head's
// failed attempt if there is one, and what becomes of the claim (with
// KeepClaim and PutOff, Claim is its owner and end: the holder, or
// Waiting).
type QueueWrite struct {
	Done   int64
	After  Hold
	Claim  Claim
	Failed *FailedAttempt
	// Packs are written with it, new items: the group's events answered
	// 2xx at their first attempt (pack.go), which have no rows.
	Packs []Pack
}

// FailedAttempt is what the queue keeps of its head's last attempt.
type FailedAttempt struct {
	Attempts int
	Status   int
	LastErr  string
	Next     time.Time
}

// Applied is q as it is once w is written.
func (q Queue) Applied(w QueueWrite) Queue {
	next := q
	next.Done, next.RVN, next.HasRedo = w.Done, q.RVN+1, false
	switch {
	case w.Failed != nil:
		next.Attempts = w.Failed.Attempts
	case w.Done > q.Done:
		next.Attempts = 0
	}
	switch w.After {
	case KeepClaim, PutOff:
		next.ClaimOwner, next.ClaimUntil = w.Claim.Owner, time.Unix(0, w.Claim.Until.UnixNano())
	case Release, Drop:
		next.ClaimOwner, next.ClaimUntil = "", time.Time{}
	}
	return next
}

// MoveBack is a redelivery's write of a queue: done moved back to Done,
// admitting from AdmitFrom, the head's attempts reset, due at Now. On a
// queue that exists it also records Redo, and a queue put off (Waiting)
// becomes due now; a queue made by it wants Wanted. Both record
// ResolvedHigh.
type MoveBack struct {
	Done         int64
	Redo         int64
	ResolvedHigh int64
	Wanted       int64
	AdmitFrom    time.Time
	Now          time.Time
}

// Row is what the store keeps of one event's delivery to one endpoint: an
// entry's (by its version) or a notice's (Notice, by its event id).
type Row struct {
	EndpointID string
	Event      webhook.Event
	Notice     bool
	State      DeliveryState
	Attempts   int
	Status     int
	LastErr    string
	Next       time.Time
	// Attempt is the attempt this write records: appended to the row's
	// attempt log (bounded to MaxAttemptLog); a zero Time records none.
	Attempt Attempt
}

// NoticeWrite is what an attempt at a notice writes on its row, which then
// has no claim: Attempt, if one was made (a final State takes the row out
// of the "due" index), else Due (when to look at it again) or Unindex (its
// endpoint is gone); neither leaves it due as it was.
type NoticeWrite struct {
	Attempt *NoticeAttempt
	Due     time.Time
	Unindex bool
}

// NoticeAttempt is an attempt at a notice as its row keeps it.
type NoticeAttempt struct {
	Attempts int
	Status   int
	LastErr  string
	State    DeliveryState
	Next     time.Time // PENDING: the next attempt, also its due time
	// Log is the attempt, appended to the row's attempt log (bounded to
	// MaxAttemptLog).
	Log Attempt
}

// EndpointIDs makes a store's endpoint ids: ULIDs of their create time,
// from one monotonic source, so that ids made in one millisecond are in
// the order they were made, and a page by id (EndpointStore.Page) is
// oldest first as long as the store's clock does not go back. The zero
// value is ready.
type EndpointIDs struct {
	mu      sync.Mutex
	entropy *ulid.MonotonicEntropy
}

// New returns the id of an endpoint created at t.
func (g *EndpointIDs) New(t time.Time) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.entropy == nil {
		g.entropy = ulid.Monotonic(rand.Reader, 0)
	}
	return ulid.MustNew(ulid.Timestamp(t), g.entropy).String()
}

// UpdateEndpoint is what a store's Update does, over its consistent read
// (the endpoint and its record version) and its write conditioned on that
// version (ErrEndpointChanged when another writer moved it): read, let
// change alter it, keep what change may not (id, create time, secrets, the
// redeliveries count), write; on ErrEndpointChanged again, five times in
// all, then ErrEndpointChanged.
func UpdateEndpoint(id string, get func() (Endpoint, int64, error), replace func(Endpoint, int64) error, change func(*Endpoint) error) (Endpoint, error) {
	for range 5 {
		e, rvn, err := get()
		if err != nil {
			return Endpoint{}, err
		}
		kept := e
		if err := change(&e); err != nil {
			return Endpoint{}, err
		}
		e.ID, e.CreateTime, e.Secrets, e.Redeliveries = kept.ID, kept.CreateTime, kept.Secrets, kept.Redeliveries
		if err := replace(e, rvn); !errors.Is(err, ErrEndpointChanged) {
			return e, err
		}
	}
	return Endpoint{}, fmt.Errorf("update endpoint %s: %w", id, ErrEndpointChanged)
}

// DisableEndpoint marks endpoint id disabled with reason through u's
// Update (what a store's Disable does); an endpoint already disabled keeps
// its first reason, and nothing is written.
func DisableEndpoint(ctx context.Context, u interface {
	Update(ctx context.Context, id string, change func(*Endpoint) error) (Endpoint, error)
}, id, reason string) error {
	_, err := u.Update(ctx, id, func(e *Endpoint) error {
		if e.Disabled {
			return errEndpointUnchanged
		}
		e.Disabled, e.DisabledReason = true, reason
		return nil
	})
	if errors.Is(err, errEndpointUnchanged) {
		return nil
	}
	return err
}

// errEndpointUnchanged is how DisableEndpoint's change says there is
// nothing to write.
var errEndpointUnchanged = errors.New("endpoint unchanged")

// RotatedSecrets is what a rotation at now makes of an endpoint's secrets:
// a new one, signing first, and each that was not yet retiring, retiring
// RotationOverlap after now (one already retiring is dropped at once).
func RotatedSecrets(secrets []SigningSecret, now time.Time) (webhook.Secret, []SigningSecret) {
	secret := webhook.NewSecret()
	next := []SigningSecret{{Secret: secret}}
	for _, old := range secrets {
		if old.RetireTime.IsZero() {
			next = append(next, SigningSecret{Secret: old.Secret, RetireTime: now.Add(RotationOverlap).UTC()})
		}
	}
	return secret, next
}
