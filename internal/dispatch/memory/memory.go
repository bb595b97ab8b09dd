// Package memory keeps the dispatcher's endpoints, queues, delivery rows
// and notices' rows in memory: dispatch.Store for tests (the API's and
// the dispatcher's contract suite), with the same conditions as the
// DynamoDB store (internal/dispatch/dynamo), each write done whole under
// one lock. It imports no SDK.
package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pointledger/pointledger/internal/dispatch"
	"github.com/pointledger/pointledger/internal/webhook"
)

// Store is dispatch.Store in memory.
type Store struct {
	now func() time.Time
	ids dispatch.EndpointIDs

	mu        sync.Mutex
	endpoints map[string]endpoint
	queues    map[dispatch.QueueRef]*queue
	rows      map[rowKey]*row
	packs     map[string][]dispatch.Pack // by endpoint, each with its Key
	packSeq   int64                      // the packs' keys' unique suffixes
}

var _ dispatch.Store = (*Store)(nil)

// New returns an empty store; now nil means time.Now (it times the
// endpoints' creation and rotations).
func New(now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{
		now:       now,
		endpoints: map[string]endpoint{},
		queues:    map[dispatch.QueueRef]*queue{},
		rows:      map[rowKey]*row{},
		packs:     map[string][]dispatch.Pack{},
	}
}

// endpoint is an endpoint as kept: its subscription is read from its
// event types, as the DynamoDB store reads it.
type endpoint struct {
	e   dispatch.Endpoint
	rvn int64
}

// queue is a queue as kept; a zero time or "" is an attribute the item
// does not have, as in DynamoDB (has* where zero is a value).
type queue struct {
	wanted, done, attempts int64
	admitFrom              int64
	claimOwner             string
	claimUntil             int64
	hasClaimUntil          bool
	rvn                    int64
	redo                   int64
	hasRedo                bool
	resolvedHigh           int64
	due                    time.Time // zero: not in the "due" index
	lastStatus             int64
	lastErr                string
	next                   int64
}

// rowKey names a delivery row: its endpoint, user and sort key (the
// version, zero-padded, or the notice's event id).
type rowKey struct {
	endpointID, userID, sk string
}

// row is a delivery row; a notice's is also its queue (data, claim, due).
type row struct {
	d             dispatch.Delivery
	notice        bool
	data          []byte
	eventTime     time.Time
	claimOwner    string
	claimUntil    int64
	hasClaimUntil bool
	due           time.Time
}

func versionSK(v int64) string { return fmt.Sprintf("V#%020d", v) }

func (q *queue) read(ref dispatch.QueueRef) dispatch.Queue {
	return dispatch.Queue{
		Ref: ref, Wanted: q.wanted, Done: q.done, Attempts: int(q.attempts),
		AdmitFrom:  time.Unix(0, q.admitFrom).UTC(),
		ClaimOwner: q.claimOwner, ClaimUntil: time.Unix(0, q.claimUntil),
		RVN: q.rvn, Redo: q.redo, HasRedo: q.hasRedo, ResolvedHigh: q.resolvedHigh,
	}
}

// MarkWanted is dispatch.Store's.
func (s *Store) MarkWanted(_ context.Context, ref dispatch.QueueRef, m dispatch.Mark) (dispatch.Queue, bool, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, exists := s.queues[ref]
	if exists && q.wanted >= m.Last {
		return dispatch.Queue{}, false, false, nil
	}
	if !exists {
		q = &queue{done: m.First - 1, admitFrom: m.AdmitFrom.UnixNano()}
		s.queues[ref] = q
	}
	q.wanted = m.Last
	claimed := false
	if m.Claim != nil {
		if q.claimOwner == "" {
			q.claimOwner = m.Claim.Owner
		}
		if !q.hasClaimUntil {
			q.claimUntil, q.hasClaimUntil = m.Claim.Until.UnixNano(), true
		}
		if q.due.IsZero() {
			q.due = m.Claim.Until
		}
		// Ours only if this write set all three, as the DynamoDB store
		// tells.
		claimed = q.claimOwner == m.Claim.Owner && q.claimUntil == m.Claim.Until.UnixNano() && q.due.Equal(m.Claim.Until)
	} else if q.due.IsZero() {
		q.due = m.Now
	}
	return q.read(ref), claimed, true, nil
}

// Claim is dispatch.Store's.
func (s *Store) Claim(_ context.Context, ref dispatch.QueueRef, owner string, now, until time.Time) (dispatch.Queue, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.queues[ref]
	if !ok || q.done >= q.wanted || !free(q.claimOwner, q.claimUntil, q.hasClaimUntil, owner, now) ||
		(!q.due.IsZero() && q.due.After(now)) {
		return dispatch.Queue{}, false, nil
	}
	q.claimOwner, q.claimUntil, q.hasClaimUntil, q.due = owner, until.UnixNano(), true, until
	q.rvn++
	return q.read(ref), true, nil
}

// free says whether a claim (owner, until) lets me take it at now.
func free(owner string, until int64, hasUntil bool, me string, now time.Time) bool {
	return !hasUntil || until < now.UnixNano() || owner == me
}

// ReadQueue is dispatch.Store's.
func (s *Store) ReadQueue(_ context.Context, ref dispatch.QueueRef) (dispatch.Queue, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.queues[ref]
	if !ok {
		return dispatch.Queue{}, false, nil
	}
	return q.read(ref), true, nil
}

// WriteQueue is dispatch.Store's: the rows and the queue at once.
func (s *Store) WriteQueue(_ context.Context, was dispatch.Queue, rows []dispatch.Row, w dispatch.QueueWrite) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.queues[was.Ref]
	if !ok || q.rvn != was.RVN || (w.After == dispatch.Release && q.wanted > w.Done) {
		return dispatch.ErrQueueChanged
	}
	q.done = w.Done
	switch {
	case w.Failed != nil:
		q.attempts, q.lastStatus, q.lastErr = int64(w.Failed.Attempts), int64(w.Failed.Status), w.Failed.LastErr
		q.next = w.Failed.Next.UnixNano()
	case w.Done > was.Done:
		q.attempts, q.lastStatus, q.lastErr, q.next = 0, 0, "", 0
	}
	if was.HasRedo {
		q.redo, q.hasRedo = 0, false
	}
	switch w.After {
	case dispatch.KeepClaim, dispatch.PutOff:
		q.claimOwner, q.claimUntil, q.hasClaimUntil, q.due = w.Claim.Owner, w.Claim.Until.UnixNano(), true, w.Claim.Until
	case dispatch.Release, dispatch.Drop:
		q.claimOwner, q.claimUntil, q.hasClaimUntil, q.due = "", 0, false, time.Time{}
	}
	q.rvn++
	if w.After == dispatch.Release {
		delete(s.queues, was.Ref)
	}
	for _, r := range rows {
		s.putRow(r)
	}
	s.putPacks(w.Packs)
	return nil
}

// PutPacks is dispatch.Store's.
func (s *Store) PutPacks(_ context.Context, packs []dispatch.Pack) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.putPacks(packs)
	return nil
}

// putPacks keeps each pack under a new key, "<highest event id>#<a
// unique suffix>", as the DynamoDB store does.
func (s *Store) putPacks(packs []dispatch.Pack) {
	for _, p := range packs {
		if len(p.Events) == 0 {
			continue
		}
		s.packSeq++
		p.Key = fmt.Sprintf("%s#%016d", p.High(), s.packSeq)
		p.Events = slices.Clone(p.Events)
		for i := range p.Events {
			p.Events[i].Attempt = kept(p.Events[i].Attempt)
		}
		s.packs[p.EndpointID] = append(s.packs[p.EndpointID], p)
	}
}

// Packs is dispatch.Store's.
func (s *Store) Packs(_ context.Context, endpointID, below string, limit int) ([]dispatch.Pack, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []dispatch.Pack
	for _, p := range s.packs[endpointID] {
		if below == "" || p.Key < below {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b dispatch.Pack) int { return cmp.Compare(b.Key, a.Key) })
	if len(out) > limit {
		out = out[:limit]
	}
	for i := range out {
		out[i].Events = slices.Clone(out[i].Events)
	}
	return out, nil
}

// PackedOf is dispatch.Store's: it reads the packs of PackWindow, as the
// DynamoDB store does, so that a pack out of its bounds would be missed
// here as there.
func (s *Store) PackedOf(_ context.Context, endpointID, eventID string) ([]dispatch.Packed, error) {
	from, to, ok := dispatch.PackWindow(eventID)
	if !ok {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []dispatch.Packed
	for _, p := range s.packs[endpointID] {
		if p.Key < from || p.Key > to || p.Low() > eventID {
			continue
		}
		for _, e := range p.Events {
			if e.EventID == eventID {
				out = append(out, e)
			}
		}
	}
	return out, nil
}

// ReadQueues is dispatch.Store's.
func (s *Store) ReadQueues(_ context.Context, refs []dispatch.QueueRef) (map[dispatch.QueueRef]dispatch.Queue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[dispatch.QueueRef]dispatch.Queue{}
	for _, ref := range refs {
		if q, ok := s.queues[ref]; ok {
			out[ref] = q.read(ref)
		}
	}
	return out, nil
}

// PutRows is dispatch.Store's: each row put whole, as DynamoDB's batch
// write puts it (its log only this attempt).
func (s *Store) PutRows(_ context.Context, rows []dispatch.Row) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range rows {
		delete(s.rows, rowKey{r.EndpointID, r.Event.UserID, versionSK(r.Event.Version)})
		s.putRow(r)
	}
	return nil
}

func (s *Store) putRow(r dispatch.Row) {
	sk := versionSK(r.Event.Version)
	if r.Notice {
		sk = "N#" + r.Event.ID
	}
	d := dispatch.Delivery{
		EndpointID: r.EndpointID, EventID: r.Event.ID, Type: r.Event.Type, UserID: r.Event.UserID,
		Version: r.Event.Version, State: r.State, Attempts: r.Attempts, LastStatusCode: r.Status, LastError: r.LastErr,
	}
	if r.State == dispatch.DeliveryPending && !r.Next.IsZero() {
		d.NextAttemptTime = time.Unix(0, r.Next.UnixNano()).UTC()
	}
	k := rowKey{r.EndpointID, r.Event.UserID, sk}
	if was, ok := s.rows[k]; ok {
		d.Log = was.d.Log // a write appends to the row's log, as DynamoDB's list_append
	}
	if !r.Attempt.Time.IsZero() {
		d.Log = dispatch.AppendAttempt(d.Log, kept(r.Attempt))
	}
	s.rows[k] = &row{d: d, notice: r.Notice}
}

// kept is an attempt as the DynamoDB store keeps it: times in UTC, to the
// nanosecond, without a monotonic reading.
func kept(a dispatch.Attempt) dispatch.Attempt {
	a.Time = time.Unix(0, a.Time.UnixNano()).UTC()
	return a
}

// MoveBack is dispatch.Store's.
func (s *Store) MoveBack(_ context.Context, ref dispatch.QueueRef, was dispatch.Queue, exists bool, m dispatch.MoveBack) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.queues[ref]
	switch {
	case exists && (!ok || q.rvn != was.RVN), !exists && ok:
		return dispatch.ErrQueueChanged
	case exists:
		q.done, q.redo, q.hasRedo, q.resolvedHigh = m.Done, m.Redo, true, m.ResolvedHigh
		if was.ClaimOwner == dispatch.Waiting {
			q.claimUntil, q.hasClaimUntil = m.Now.UnixNano(), true
		}
		q.lastStatus, q.lastErr, q.next = 0, "", 0
	default:
		q = &queue{done: m.Done, wanted: m.Wanted, resolvedHigh: m.ResolvedHigh}
		s.queues[ref] = q
	}
	q.admitFrom, q.attempts, q.due = m.AdmitFrom.UnixNano(), 0, m.Now
	q.rvn++
	return nil
}

// QueueUsers is dispatch.Store's: the users in order.
func (s *Store) QueueUsers(_ context.Context, endpointID string, _ time.Time, fn func(user string) error) error {
	s.mu.Lock()
	var users []string
	for ref := range s.queues {
		if ref.EndpointID == endpointID {
			users = append(users, ref.UserID)
		}
	}
	for k := range s.rows {
		if k.endpointID == endpointID {
			users = append(users, k.userID)
		}
	}
	// Every pack's users, whatever since: the memory ledger's entry ids
	// follow the real clock, not the store's, so a pack's key says
	// nothing of its entries' times here (a user too many is sent
	// nothing by a redelivery).
	for _, p := range s.packs[endpointID] {
		users = append(users, p.Users()...)
	}
	s.mu.Unlock()
	slices.Sort(users)
	users = slices.Compact(users)
	for _, u := range users {
		if err := fn(u); err != nil {
			return err
		}
	}
	return nil
}

// Queued is dispatch.Store's.
func (s *Store) Queued(_ context.Context, endpointID, after string, fn func(user string) (bool, error)) error {
	s.mu.Lock()
	var users []string
	for ref := range s.queues {
		if ref.EndpointID == endpointID && ref.UserID > after {
			users = append(users, ref.UserID)
		}
	}
	s.mu.Unlock()
	slices.Sort(users)
	for _, u := range users {
		if more, err := fn(u); err != nil || !more {
			return err
		}
	}
	return nil
}

// Due is dispatch.Store's.
func (s *Store) Due(_ context.Context, now time.Time) ([]dispatch.QueueRef, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var refs []dispatch.QueueRef
	for ref, q := range s.queues {
		if !q.due.IsZero() && !q.due.After(now) {
			refs = append(refs, ref)
		}
	}
	for k, r := range s.rows {
		if r.notice && !r.due.IsZero() && !r.due.After(now) {
			refs = append(refs, dispatch.QueueRef{EndpointID: k.endpointID, UserID: k.userID, Notice: strings.TrimPrefix(k.sk, "N#")})
		}
	}
	return refs, nil
}

// ListDeliveries is dispatch.Store's: one user's rows by sort key (the
// entries' by version, then the notices'), every user's by event id,
// newest first; the position is the last row's place in that order.
func (s *Store) ListDeliveries(_ context.Context, q dispatch.DeliveryQuery, size int, after string) ([]dispatch.Delivery, string, error) {
	s.mu.Lock()
	type placed struct {
		at string
		d  dispatch.Delivery
	}
	var all []placed
	for k, r := range s.rows {
		if k.endpointID != q.EndpointID || (q.UserID != "" && k.userID != q.UserID) {
			continue
		}
		if len(q.States) > 0 && !slices.Contains(q.States, r.d.State) {
			continue
		}
		if q.UserID != "" && q.BelowVersion > 0 && !r.notice && r.d.Version >= q.BelowVersion {
			continue
		}
		at := k.sk
		if q.UserID == "" {
			at = r.d.EventID // every user's position: an event id
		}
		all = append(all, placed{at, r.d})
	}
	s.mu.Unlock()
	slices.SortFunc(all, func(a, b placed) int { return cmp.Compare(b.at, a.at) })
	if after != "" {
		i, _ := slices.BinarySearchFunc(all, after, func(p placed, at string) int { return cmp.Compare(at, p.at) })
		for i < len(all) && all[i].at == after {
			i++
		}
		all = all[i:]
	}
	next := ""
	if len(all) > size {
		all = all[:size]
		next = all[size-1].at
	}
	out := make([]dispatch.Delivery, len(all))
	for i, p := range all {
		out[i] = p.d
		out[i].Log = slices.Clone(p.d.Log)
	}
	return out, next, nil
}

// PutNotice is dispatch.Store's.
func (s *Store) PutNotice(_ context.Context, endpointID string, ev webhook.Event, now time.Time) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := rowKey{endpointID, ev.UserID, "N#" + ev.ID}
	if _, ok := s.rows[k]; ok {
		return false, nil
	}
	s.rows[k] = &row{
		d: dispatch.Delivery{
			EndpointID: endpointID, EventID: ev.ID, Type: ev.Type, UserID: ev.UserID, Version: ev.Version,
			State: dispatch.DeliveryPending,
		},
		notice: true, data: slices.Clone(ev.Data), eventTime: time.Unix(0, ev.Time.UnixNano()).UTC(), due: now,
	}
	return true, nil
}

// ClaimNotice is dispatch.Store's.
func (s *Store) ClaimNotice(_ context.Context, ref dispatch.QueueRef, owner string, now, until time.Time) (webhook.Event, int, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.rows[rowKey{ref.EndpointID, ref.UserID, "N#" + ref.Notice}]
	if !ok || r.d.State != dispatch.DeliveryPending || r.due.IsZero() || r.due.After(now) ||
		!free(r.claimOwner, r.claimUntil, r.hasClaimUntil, owner, now) {
		return webhook.Event{}, 0, false, nil
	}
	r.claimOwner, r.claimUntil, r.hasClaimUntil = owner, until.UnixNano(), true
	ev := webhook.Event{
		ID: r.d.EventID, Type: r.d.Type, UserID: ref.UserID, Version: r.d.Version, Time: r.eventTime,
		Data: slices.Clone(r.data),
	}
	return ev, r.d.Attempts, true, nil
}

// WriteNotice is dispatch.Store's.
func (s *Store) WriteNotice(_ context.Context, ref dispatch.QueueRef, owner string, w dispatch.NoticeWrite) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.rows[rowKey{ref.EndpointID, ref.UserID, "N#" + ref.Notice}]
	if !ok || r.claimOwner != owner {
		return nil
	}
	r.claimOwner, r.claimUntil, r.hasClaimUntil = "", 0, false
	switch a := w.Attempt; {
	case a != nil:
		r.d.Attempts, r.d.LastStatusCode, r.d.LastError, r.d.State = a.Attempts, a.Status, a.LastErr, a.State
		if !a.Log.Time.IsZero() {
			r.d.Log = dispatch.AppendAttempt(r.d.Log, kept(a.Log))
		}
		if a.State == dispatch.DeliveryPending {
			r.d.NextAttemptTime, r.due = time.Unix(0, a.Next.UnixNano()).UTC(), a.Next
		} else {
			r.d.NextAttemptTime, r.due = time.Time{}, time.Time{}
		}
	case w.Unindex:
		r.due = time.Time{}
	case !w.Due.IsZero():
		r.due = w.Due
	}
	return nil
}

// Crash leaves the queue of ref claimed by owner until until, as a
// dispatcher that died holding it leaves it (for tests of a takeover).
func (s *Store) Crash(ref dispatch.QueueRef, owner string, until time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.queues[ref]
	if !ok {
		return fmt.Errorf("crash: no queue %v", ref)
	}
	q.claimOwner, q.claimUntil, q.hasClaimUntil = owner, until.UnixNano(), true
	q.rvn++
	return nil
}

// Items is everything the store holds, each as text, sorted: what a
// refused call must leave as it was.
func (s *Store) Items() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id, e := range s.endpoints {
		out = append(out, fmt.Sprintf("endpoint %s %+v rvn %d", id, e.e, e.rvn))
	}
	for ref, q := range s.queues {
		out = append(out, fmt.Sprintf("queue %+v %+v", ref, *q))
	}
	for k, r := range s.rows {
		out = append(out, fmt.Sprintf("row %+v %+v", k, *r))
	}
	for _, ps := range s.packs {
		for _, p := range ps {
			out = append(out, fmt.Sprintf("pack %+v", p))
		}
	}
	slices.Sort(out)
	return out
}

// The endpoints.
