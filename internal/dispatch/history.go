package dispatch

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/pointledger/pointledger/internal/ledger"
)

// The deliveries that are on the record (not waiting in a queue's round):
// each event's row and its packed occurrences taken together (merged,
// pack.go). An event answered 2xx at its first attempt has no row, so
// the rows alone no longer name every event: one user's listing finds
// them from the user's entries (the ledger, newest first), each looked up
// in the packs by its id; every user's merges the rows (by event id) with
// the packs (by their highest event id). Both bound what one call looks
// at (maxExamined) and answer a shorter page, with a next token, rather
// than read a whole history for a filter that matches little.

// Bounds of one listing call: the events it looks at, the entries it
// reads from the ledger at once, the packs it reads at once, and the
// lookups of events in packs made at once.
const (
	maxExamined   = 250
	entriesChunk  = 50
	packsChunk    = 8
	lookupsAtOnce = 8
)

// history lists the deliveries of q on ep after the position after (""
// first), at most size, and the position of the last if there may be
// more. Asked for no SUCCEEDED deliveries, it lists rows only (an event
// without a row has only 2xx), each taken together with its packed
// occurrences (a later 2xx makes it SUCCEEDED).
func (d *Dispatcher) history(ctx context.Context, ep Endpoint, q DeliveryQuery, size int, after string) ([]Delivery, string, error) {
	switch {
	case len(q.States) > 0 && !slices.Contains(q.States, DeliverySucceeded):
		if q.UserID == "" {
			after = positionID(after)
		}
		return d.rowsTogether(ctx, ep, q, size, after)
	case q.UserID != "":
		return d.userHistory(ctx, ep, q, size, after)
	}
	return d.everyHistory(ctx, ep, q, size, positionID(after))
}

// examinedMost is how many events a call listing a page of size looks
// at, at most: maxExamined, or more for a page larger than that (a page
// is full when nothing is filtered out).
func examinedMost(size int) int { return max(maxExamined, size+1) }

// positionID is the event id an every-user position names: the position
// itself, or the last part of a store's older "PK\x00SK\x00event id".
func positionID(position string) string {
	if i := strings.LastIndexByte(position, 0); i >= 0 {
		return position[i+1:]
	}
	return position
}

// positionSK is the sort key a one-user position names: "V#<version>" (an
// entry's event: the listing goes on from the ledger) or a store's own
// position among the notices.
func positionSK(position string) string {
	parts := strings.Split(position, "\x00")
	if len(parts) >= 2 {
		return parts[1]
	}
	return position
}

// versionPosition is a one-user position after version v's event.
func versionPosition(v int64) string { return fmt.Sprintf("V#%020d", v) }

// wants says whether a delivery in state s is listed for states.
func wants(states []DeliveryState, s DeliveryState) bool {
	return len(states) == 0 || slices.Contains(states, s)
}

// rowsTogether lists the store's rows of q after after, each taken
// together with its packed occurrences, those still in q's states after
// that: the store's pages, until size are listed, the store has no more,
// or about examinedMost rows were looked at (then a shorter page).
func (d *Dispatcher) rowsTogether(ctx context.Context, ep Endpoint, q DeliveryQuery, size int, after string) ([]Delivery, string, error) {
	var out []Delivery
	for looked := 0; len(out) < size && looked < examinedMost(size); {
		rows, next, err := d.store.ListDeliveries(ctx, q, size-len(out), after)
		if err != nil {
			return nil, "", err
		}
		looked += len(rows)
		occ, err := d.packedOf(ctx, ep.ID, rows)
		if err != nil {
			return nil, "", err
		}
		for i := range rows {
			if dl := merged(ep.ID, &rows[i], occ[rows[i].EventID]); wants(q.States, dl.State) {
				out = append(out, dl)
			}
		}
		if after = next; next == "" {
			break
		}
	}
	return out, after, nil
}

// packedOf looks up in ep's packs the events of ds that may be packed
// (entries' events), lookupsAtOnce at a time: their occurrences by event
// id.
func (d *Dispatcher) packedOf(ctx context.Context, endpointID string, ds []Delivery) (map[string][]Packed, error) {
	var (
		mu    sync.Mutex
		out   = map[string][]Packed{}
		errs  []error
		wg    sync.WaitGroup
		limit = make(chan struct{}, lookupsAtOnce)
	)
	for _, dl := range ds {
		if !isULID(dl.EventID) || dl.Type == ledger.EventPointsExpiring {
			continue
		}
		wg.Go(func() {
			limit <- struct{}{}
			defer func() { <-limit }()
			occ, err := d.store.PackedOf(ctx, endpointID, dl.EventID)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			if len(occ) > 0 {
				out[dl.EventID] = occ
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, fmt.Errorf("list deliveries: packs: %w", errs[0])
	}
	return out, nil
}

// userHistory is one user's deliveries on the record after after: its
// entries' events from the version below after (else below
// q.BelowVersion, else from the user's last entry) down, each as its row
// and its packed occurrences show it (an entry with neither was not
// delivered to ep: skipped), then the user's notices' rows.
func (d *Dispatcher) userHistory(ctx context.Context, ep Endpoint, q DeliveryQuery, size int, after string) ([]Delivery, string, error) {
	sk := positionSK(after)
	if after != "" && !strings.HasPrefix(sk, "V#") {
		return d.store.ListDeliveries(ctx, q, size, after) // among the notices
	}
	var top int64
	switch {
	case after != "":
		v, err := strconv.ParseInt(strings.TrimPrefix(sk, "V#"), 10, 64)
		if err != nil {
			return nil, "", fmt.Errorf("list deliveries: position %q: %w", sk, err)
		}
		top = v - 1
	case q.BelowVersion > 0:
		top = q.BelowVersion - 1
	default:
		acct, err := d.ledger.Balance(ctx, q.UserID)
		if err != nil {
			return nil, "", fmt.Errorf("list deliveries: account of %s: %w", q.UserID, err)
		}
		top = acct.Version
	}
	var out []Delivery
	examined := 0
	for cur := top; cur > 0; {
		if examined >= examinedMost(size) {
			return out, versionPosition(cur + 1), nil // a shorter page: go on below
		}
		n := min(cur, entriesChunk, int64(examinedMost(size)-examined))
		from := cur - n
		es, err := d.ledger.EntriesAfter(ctx, q.UserID, from, int(n))
		if err != nil {
			return nil, "", fmt.Errorf("list deliveries: entries of %s: %w", q.UserID, err)
		}
		rows, _, err := d.store.ListDeliveries(ctx, DeliveryQuery{EndpointID: ep.ID, UserID: q.UserID, BelowVersion: cur + 1}, int(n), "")
		if err != nil {
			return nil, "", err
		}
		byVersion := map[int64]*Delivery{}
		for i, r := range rows {
			if r.Type != ledger.EventPointsExpiring && r.Version > from {
				byVersion[r.Version] = &rows[i]
			}
		}
		look := make([]Delivery, 0, len(es))
		for _, e := range es {
			if e.Version > from && e.Version <= cur {
				look = append(look, Delivery{EventID: e.ID, Type: ledger.EventTypeOf(e.Type), Version: e.Version})
			}
		}
		occ, err := d.packedOf(ctx, ep.ID, look)
		if err != nil {
			return nil, "", err
		}
		for i := len(look) - 1; i >= 0; i-- {
			e := look[i]
			examined++
			row, o := byVersion[e.Version], occ[e.EventID]
			if row == nil && len(o) == 0 {
				continue // not delivered to ep
			}
			if dl := merged(ep.ID, row, o); wants(q.States, dl.State) {
				out = append(out, dl)
			}
			if len(out) > size {
				out = out[:size]
				return out, versionPosition(out[size-1].Version), nil
			}
		}
		cur = from
	}
	// Then the notices (their sort keys are below every version's).
	nq := q
	nq.BelowVersion = 1
	if len(out) == size {
		ns, _, err := d.store.ListDeliveries(ctx, nq, 1, "")
		if err != nil || len(ns) == 0 {
			return out, "", err
		}
		return out, versionPosition(out[size-1].Version), nil
	}
	ns, next, err := d.store.ListDeliveries(ctx, nq, size-len(out), "")
	if err != nil {
		return nil, "", err
	}
	return append(out, ns...), next, nil
}

// everyHistory is every user's deliveries on the record with an event id
// below afterID ("" all), newest event first: the rows (the store's, by
// event id) and the packs (by their highest event id) merged. Once the
// packs are read down to one whose highest id is H, every event above H
// is known whole: none of the packs still to read holds it.
func (d *Dispatcher) everyHistory(ctx context.Context, ep Endpoint, q DeliveryQuery, size int, afterID string) ([]Delivery, string, error) {
	all := DeliveryQuery{EndpointID: ep.ID}
	var (
		rows      []Delivery
		rowsAt    = afterID
		rowsDone  bool
		packed    = map[string][]Packed{}
		ids       []string // of packed, newest first
		packsAt   = ""
		packsRead bool
		packsDone bool
		lastHigh  string
		out       []Delivery
		examined  int
	)
	start := afterID
	if start != "" {
		packsAt = packsBelow(start)
	}
	readRows := func() error {
		got, next, err := d.store.ListDeliveries(ctx, all, entriesChunk, rowsAt)
		if err != nil {
			return err
		}
		rows = append(rows, got...)
		rowsAt, rowsDone = next, next == ""
		return nil
	}
	readPacks := func() error {
		ps, err := d.store.Packs(ctx, ep.ID, packsAt, packsChunk)
		if err != nil {
			return fmt.Errorf("list deliveries: packs: %w", err)
		}
		packsRead = true
		if len(ps) < packsChunk {
			packsDone = true
		}
		for _, p := range ps {
			for _, e := range p.Events {
				if start != "" && e.EventID >= start {
					continue
				}
				if _, ok := packed[e.EventID]; !ok {
					ids = append(ids, e.EventID)
				}
				packed[e.EventID] = append(packed[e.EventID], e)
			}
			packsAt, lastHigh = p.Key, p.High()
		}
		slices.SortFunc(ids, byEventIDDesc)
		return nil
	}
	for len(out) <= size {
		if len(rows) == 0 && !rowsDone {
			if err := readRows(); err != nil {
				return nil, "", err
			}
			continue
		}
		next := ""
		if len(rows) > 0 {
			next = rows[0].EventID
		}
		if len(ids) > 0 {
			next = max(next, ids[0])
		}
		if !packsDone && (!packsRead || next <= lastHigh) {
			if err := readPacks(); err != nil {
				return nil, "", err
			}
			continue
		}
		if next == "" {
			return out, "", nil // all read
		}
		if examined >= examinedMost(size) {
			return out, afterID, nil // a shorter page: go on below the last looked at
		}
		examined++
		var row *Delivery
		if len(rows) > 0 && rows[0].EventID == next {
			row = &rows[0]
			rows = rows[1:]
		}
		occ := packed[next]
		if len(ids) > 0 && ids[0] == next {
			delete(packed, next)
			ids = ids[1:]
		}
		afterID = next
		if dl := merged(ep.ID, row, occ); wants(q.States, dl.State) {
			out = append(out, dl)
		}
	}
	out = out[:size]
	return out, out[size-1].EventID, nil
}
