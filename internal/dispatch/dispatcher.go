package dispatch

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/pagetoken"
	"github.com/pointledger/pointledger/internal/webhook"
)

// Ledger is what the dispatcher reads of the ledger: a user's entries in
// version order, and the user's account (its version: the last entry's),
// consistently (the ledger stores have both).
type Ledger interface {
	EntriesAfter(ctx context.Context, user string, after int64, limit int) ([]ledger.Entry, error)
	Balance(ctx context.Context, user string) (ledger.Account, error)
}

// DefaultSchedule is the one default retry schedule (ledgerd's
// -webhook-retry-delays, docs/operations.md's "Retries, FAILED and
// redelivery", whose figures TestDocsTellTheDefaultScheduleOnce checks):
// 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h, then two of 24 h, ±20%, so
// that an event is tried for about 3.1 days (75.6 h), as issue 24 asks
// ("about three days", as Stripe does), before it is FAILED: 10 attempts.
var DefaultSchedule = webhook.Schedule{
	Delays: []time.Duration{
		5 * time.Second, 5 * time.Minute, 30 * time.Minute,
		2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour,
		24 * time.Hour, 24 * time.Hour,
	},
	Jitter: 0.2,
}

// Defaults of Options.
const (
	DefaultPerEndpoint     = 16
	DefaultEndpointRefresh = time.Second
	DefaultPollInterval    = time.Second
	// disabledRecheck is how long a disabled endpoint's due queue waits
	// before it is looked at again: it stays due (an endpoint enabled again
	// goes on where it stopped) without being read at every poll.
	disabledRecheck = time.Minute
	// maxRead bounds the entries one read of a queue takes from the ledger.
	maxRead = 100
	// maxInbox bounds the entries Apply keeps for a queue under delivery;
	// beyond it the queue reads the ledger.
	maxInbox = 1000
)

// Options configure a Dispatcher. Sender and EncodeEntry are required.
type Options struct {
	// Owner names this dispatcher in queue claims; "" is a new ULID.
	Owner string
	// Sender makes the attempts (its Options hold the URL policy and the
	// attempt timeout).
	Sender *webhook.Sender
	// EncodeEntry writes an entry as the API returns it (api.EntryJSON):
	// the body's data.entry.
	EncodeEntry func(ledger.Entry) (json.RawMessage, error)
	// Schedule is when failed attempts are tried again; zero is
	// DefaultSchedule.
	Schedule webhook.Schedule
	// PerEndpoint bounds the attempts made at once to one endpoint (each
	// of another user: a user's events go one at a time).
	PerEndpoint int
	// EndpointRefresh is the most an endpoint read may be old when an
	// attempt starts: the API waits this long before it answers a disable
	// or a delete, so no attempt starts after the answer.
	EndpointRefresh time.Duration
	// PollInterval is how often Run reads the "due" index.
	PollInterval time.Duration
	// ClaimTTL is how long a claim on a queue holds without being renewed
	// (each event delivered renews it): the wait before another dispatcher
	// goes on with the queues of one that died. It must outlast an attempt
	// (the Sender's timeout), or another dispatcher sends the head again
	// meanwhile. 0 is webhook.DefaultAttemptTimeout and 30 s.
	ClaimTTL time.Duration
	// Codec makes ListDeliveries' page tokens; nil derives one
	// (pagetoken.Derived; ledgerd gives its own).
	Codec *pagetoken.Codec
	// QueueAll sends every event through its user's queue, none directly
	// (direct.go): what tests of the queues themselves (claims, takeovers,
	// stops) set, so that their events do not bypass what they test.
	QueueAll bool
	// Observer receives the dispatcher's measures; its nil funcs are skipped.
	Observer Observer
	Log      *slog.Logger
	Now      func() time.Time
	Random   func() float64 // in [0, 1), the schedule's jitter
}

// Observer is the dispatcher's hook for metrics (cmd/ledgerd wires
// Prometheus into it; this package imports no metrics). Every field may
// be nil.
type Observer struct {
	// EventsDispatched counts events an endpoint will receive, as Apply
	// records them on its queues (per batch, user and endpoint, n events).
	EventsDispatched func(endpointID string, n int)
	// Attempted counts attempts by outcome.
	Attempted func(endpointID string, outcome Outcome)
	// Delivered measures an event's lag: its entry's create_time (a
	// notice's decision time) to the 2xx of its first delivery. A
	// redelivery's 2xx goes to Redelivered instead.
	Delivered func(endpointID string, lag time.Duration)
	// Redelivered counts the 2xx of events sent again by a redelivery
	// (RedeliverWebhookEvents), which are not the delivery's lag.
	Redelivered func(endpointID string)
	// QueueDepth is the events waiting for one endpoint, an estimate: the
	// sum of wanted - done over the queues of the endpoint this dispatcher
	// has read, as of its last read of each (another dispatcher's progress
	// shows when this one reads the queue again).
	QueueDepth func(endpointID string, depth int64)
	// EndpointDisabled counts endpoints disabled by a 410.
	EndpointDisabled func(endpointID string)
}

// Outcome is how an attempt ended.
type Outcome string

const (
	OutcomeSucceeded Outcome = "succeeded" // a 2xx
	OutcomeFailed    Outcome = "failed"    // no 2xx; tried again later
	OutcomeGaveUp    Outcome = "gave_up"   // no 2xx at the last attempt: FAILED
	OutcomeGone      Outcome = "gone"      // a 410: the endpoint is disabled
)

// Status is what a dispatcher reports about itself, beside the projector's.
type Status struct {
	Owner          string        `json:"owner"`
	Endpoints      int           `json:"endpoints"`          // enabled, as last read
	EntriesApplied int64         `json:"entries_applied"`    // handed over by the stream
	Attempts       int64         `json:"attempts"`           // made by this dispatcher
	Delivered      int64         `json:"events_delivered"`   // answered 2xx
	Redelivered    int64         `json:"events_redelivered"` // of those, sent again by a redelivery
	Failed         int64         `json:"events_failed"`      // given up after the last attempt
	InFlight       int           `json:"queues_in_flight"`   // being delivered now
	NewestApplied  time.Time     `json:"newest_applied_entry_time"`
	Lag            time.Duration `json:"lag_ns"` // the last first delivery's lag (redeliveries aside)
	LagText        string        `json:"lag"`
	LastPass       time.Time     `json:"last_pass"` // the last read of the "due" index
}

// Dispatcher delivers the ledger's events to webhook endpoints (doc.go):
// Apply is its stream handler, Run its delivery loop; ListDeliveries,
// Redeliver and Notify serve the API and the notice finder.
type Dispatcher struct {
	store  Store
	ledger Ledger
	o      Options

	epMu      sync.Mutex
	eps       map[string]Endpoint // as read at epRead; replaced, never changed
	epRead    time.Time           // when the read of eps began
	epReading chan struct{}       // closed when the read under way ends

	mu       sync.Mutex
	running  bool                 // Run is delivering: Apply may claim queues for it
	handoffs []handoff            // for Run to start
	wake     chan struct{}        // tells Run there are handoffs
	inFlight map[QueueRef]bool    // being delivered by Run
	pending  map[QueueRef]handoff // claimed queues to deliver again once their run ends
	inbox    map[QueueRef]*inbox  // entries Apply marked on queues under delivery
	// wakeQueue tells a queue under delivery, waiting for its inbox
	// (awaitInbox), that Apply left it entries.
	wakeQueue map[QueueRef]chan struct{}
	slots     map[string]chan struct{} // by endpoint: PerEndpoint attempts at once
	depth     map[QueueRef]int64
	paused    map[string]time.Time // by endpoint: no direct sends until then (direct.go)
	// noQueue is the users this process found without a queue, by
	// endpoint and user, with the endpoint's Redeliveries then (direct.go).
	noQueue map[QueueRef]int64
	st      Status
}

// handoff is a queue this process hands Run in-process, without a round
// trip through the "due" index: q when it is already claimed (by the mark
// that made it due), else Run claims it; entries, the user's entries the
// stream handed over, so that delivery need not read them again.
type handoff struct {
	ref     QueueRef
	q       *Queue
	entries []ledger.Entry
}

// inbox is what Apply marked on a queue while it was being delivered: the
// entries and the wanted it recorded.
type inbox struct {
	entries []ledger.Entry
	wanted  int64
}

// New returns a dispatcher over store, reading entries from led. Run it
// with Run; feed it the stream with Apply.
func New(store Store, led Ledger, o Options) (*Dispatcher, error) {
	if o.Sender == nil || o.EncodeEntry == nil {
		return nil, errors.New("dispatcher: a Sender and EncodeEntry are required")
	}
	if o.Schedule.Delays == nil {
		o.Schedule = DefaultSchedule
	}
	if err := o.Schedule.Check(); err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Random == nil {
		o.Random = rand.Float64
	}
	if o.Owner == "" {
		o.Owner = ulid.Make().String()
	}
	if o.PerEndpoint <= 0 {
		o.PerEndpoint = DefaultPerEndpoint
	}
	if o.EndpointRefresh <= 0 {
		o.EndpointRefresh = DefaultEndpointRefresh
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.ClaimTTL <= 0 {
		o.ClaimTTL = webhook.DefaultAttemptTimeout + 30*time.Second
	}
	if o.Codec == nil {
		o.Codec = pagetoken.Derived("webhook deliveries")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return &Dispatcher{
		store: store, ledger: led, o: o,
		wake:      make(chan struct{}, 1),
		inFlight:  map[QueueRef]bool{},
		pending:   map[QueueRef]handoff{},
		inbox:     map[QueueRef]*inbox{},
		wakeQueue: map[QueueRef]chan struct{}{},
		slots:     map[string]chan struct{}{},
		depth:     map[QueueRef]int64{},
		paused:    map[string]time.Time{},
		noQueue:   map[QueueRef]int64{},
		st:        Status{Owner: o.Owner},
	}, nil
}

// endpoints returns every endpoint, read at most EndpointRefresh ago (the
// age counts from the start of the read, so a change that answered before
// it began is in it).
func (d *Dispatcher) endpoints(ctx context.Context) (map[string]Endpoint, error) {
	return d.endpointsAsOf(ctx, time.Time{})
}

// endpointsAsOf is endpoints, read after t too: every endpoint created
// before t is in it. Apply asks it as of its newest entry, Notify as of
// its notice, so that an endpoint made just before an event is not missed
// by a read older than the event. One read at a time: callers that need
// a newer read than the cache wait for it, the others take the cache as
// it is, so deliveries never wait behind Apply's reads. The map returned
// is never changed (a change makes a new one).
func (d *Dispatcher) endpointsAsOf(ctx context.Context, t time.Time) (map[string]Endpoint, error) {
	for {
		d.epMu.Lock()
		now := d.o.Now()
		if d.eps != nil && now.Sub(d.epRead) < d.o.EndpointRefresh && d.epRead.After(t) {
			eps := d.eps
			d.epMu.Unlock()
			return eps, nil
		}
		if wait := d.epReading; wait != nil {
			d.epMu.Unlock()
			select {
			case <-wait:
				continue // that read may be new enough; if not, read again
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		reading := make(chan struct{})
		d.epReading = reading
		d.epMu.Unlock()
		eps, err := d.readEndpoints(ctx)
		d.epMu.Lock()
		if err == nil {
			d.eps, d.epRead = eps, now
		}
		d.epReading = nil
		close(reading)
		d.epMu.Unlock()
		return eps, err
	}
}

// readEndpoints reads every endpoint, by id.
func (d *Dispatcher) readEndpoints(ctx context.Context) (map[string]Endpoint, error) {
	list, err := d.store.List(ctx)
	if err != nil {
		return nil, err
	}
	eps := make(map[string]Endpoint, len(list))
	enabled := 0
	for _, e := range list {
		eps[e.ID] = e
		if !e.Disabled {
			enabled++
		}
	}
	d.mu.Lock()
	d.st.Endpoints = enabled
	d.mu.Unlock()
	return eps, nil
}

// endpoint returns the endpoint id as the cache has it or, if the cache
// does not know it (made since the last read), as the store has it;
// found is false when it is gone.
func (d *Dispatcher) endpoint(ctx context.Context, id string) (e Endpoint, found bool, err error) {
	eps, err := d.endpoints(ctx)
	if err != nil {
		return e, false, err
	}
	if e, ok := eps[id]; ok {
		return e, true, nil
	}
	e, err = d.store.Get(ctx, id)
	if ledger.ReasonOf(err) == ledger.ReasonEndpointNotFound {
		return e, false, nil
	}
	return e, err == nil, err
}

// Apply is the stream handler. For each user of the batch and each
// enabled endpoint that receives at least one of the user's entries (by
// its subscription and create_time): a user with no queue for the
// endpoint is sent the events here, directly (direct.go), what was sent
// written together (packs of 2xx, rows of failures) by the batch's end; a
// user with a queue has it marked wanted (one write per user and
// endpoint, not per entry),
// making the queue if needed, and claimed if it was idle and Run is
// delivering, the queue and the entries handed to Run in-process. So a
// healthy receiver's events cost a share of a read of the batch's queues
// and of a write of its packs; a parked user's event, its mark, its
// attempt and its share of a group's write (deliverQueue). The endpoints
// are read after the batch's newest entry was written (one small
// consistent Query per batch while entries are new), so an endpoint
// created before an entry is never missed. The stream consumer
// checkpoints the batch only after Apply returns nil.
func (d *Dispatcher) Apply(ctx context.Context, entries []ledger.Entry) error {
	if len(entries) == 0 {
		return nil
	}
	byUser := map[string][]ledger.Entry{}
	var newest time.Time
	for _, e := range entries {
		byUser[e.UserID] = append(byUser[e.UserID], e)
		if e.CreateTime.After(newest) {
			newest = e.CreateTime
		}
	}
	for _, es := range byUser {
		slices.SortFunc(es, func(x, y ledger.Entry) int { return cmp.Compare(x.Version, y.Version) })
	}
	eps, err := d.endpointsAsOf(ctx, newest)
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	direct, queued, err := d.route(ctx, group(byUser, eps), eps)
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	d.mu.Lock()
	take := d.running
	d.mu.Unlock()
	errs := make([]error, len(direct)+len(queued))
	rows := d.newRowWriter(ctx)
	var wg sync.WaitGroup
	// Many users at once: a batch waits for all of them before the
	// stream reads on, so their round trips overlap.
	limit := make(chan struct{}, 64)
	for i, m := range direct {
		wg.Go(func() {
			limit <- struct{}{}
			defer func() { <-limit }()
			d.dispatched(m)
			errs[i] = d.sendDirect(ctx, m, eps[m.ref.EndpointID], byUser[m.ref.UserID], rows.add)
		})
	}
	for i, m := range queued {
		wg.Go(func() {
			limit <- struct{}{}
			defer func() { <-limit }()
			q, claimed, err := d.markWanted(ctx, m.ref, m.first, m.last, m.admitFrom, take)
			if err != nil {
				errs[len(direct)+i] = err
				return
			}
			d.dispatched(m)
			h := handoff{ref: m.ref, entries: byUser[m.ref.UserID]}
			if claimed {
				h.q = &q
			}
			errs[len(direct)+i] = d.handOverMarked(ctx, h, m.last)
		})
	}
	wg.Wait()
	// The packs and rows of what was sent, even if another part failed:
	// the batch is then read again and its events sent again, under the
	// same ids.
	errs = append(errs, rows.close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	d.mu.Lock()
	d.st.EntriesApplied += int64(len(entries))
	for _, e := range entries {
		if e.CreateTime.After(d.st.NewestApplied) {
			d.st.NewestApplied = e.CreateTime
		}
	}
	d.mu.Unlock()
	return nil
}

// dispatched counts m's events for the Observer.
func (d *Dispatcher) dispatched(m mark) {
	if d.o.Observer.EventsDispatched != nil {
		d.o.Observer.EventsDispatched(m.ref.EndpointID, m.n)
	}
}

// handOverMarked passes a marked queue on: claimed, to Run with its
// entries; under delivery here, its entries and wanted to the delivery
// (the inbox); otherwise to whoever holds it, or to the "due" index. A
// queue claimed while Run was stopping is put off, due now.
func (d *Dispatcher) handOverMarked(ctx context.Context, h handoff, wanted int64) error {
	d.mu.Lock()
	switch {
	case h.q != nil && d.running:
		d.handoffs = append(d.handoffs, h)
		d.mu.Unlock()
		d.signal()
		return nil
	case h.q != nil:
		d.mu.Unlock()
		_, err := d.write(ctx, *h.q, nil, QueueWrite{Done: h.q.Done, After: PutOff, Claim: waitUntil(d.o.Now())})
		return lost(err)
	case d.inFlight[h.ref]:
		in := d.inbox[h.ref]
		if in == nil {
			in = &inbox{}
			d.inbox[h.ref] = in
		}
		in.wanted = max(in.wanted, wanted)
		if len(in.entries)+len(h.entries) <= maxInbox {
			in.entries = append(in.entries, h.entries...)
		}
		if wake, ok := d.wakeQueue[h.ref]; ok {
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}
	d.mu.Unlock()
	return nil
}

// handOver gives Run a queue to claim and deliver (or a notice row); when
// Run is not delivering, the "due" index finds it instead.
func (d *Dispatcher) handOver(ref QueueRef) {
	d.mu.Lock()
	if !d.running {
		d.mu.Unlock()
		return
	}
	d.handoffs = append(d.handoffs, handoff{ref: ref})
	d.mu.Unlock()
	d.signal()
}

func (d *Dispatcher) signal() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Status reports the dispatcher's progress.
func (d *Dispatcher) Status() Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.st
	st.InFlight = len(d.inFlight)
	st.LagText = st.Lag.Round(time.Millisecond).String()
	return st
}
