package dispatch

import (
	"cmp"
	"slices"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pointledger/pointledger/internal/ledger"
)

// Packs. An event answered 2xx at the first attempt of its round (the
// happy path) gets no item of its own: it is written in a pack, one item
// of many such events of one endpoint, with the writes that would have
// written its row (Store.PutPacks for direct sends, Store.WriteQueue's
// QueueWrite.Packs for a queue's group). Only an event with a failed
// attempt in its round has a row. A pack holds events whose ids (the
// entries' ULIDs, so their time) fall in one PackSpan, at most PackMost
// of them, so that the packs holding an event are found by its id alone:
// those whose highest id is from the event's id to PackSpan after it
// (PackWindow), whose lowest id is at most the event's.
//
// An event's delivery as ListWebhookDeliveries shows it is its row, if
// any, and every occurrence of it in packs (a redelivered event may be in
// several) taken together (merged): the state, attempts and last status
// of the latest attempt, and the attempt logs' union by time.

// Bounds of a pack: events whose ids (their times) are less than
// PackSpan apart, at most PackMost of them (each some 120 bytes as the DynamoDB
// store writes them: well under an item's 400 KB).
const (
	PackSpan = time.Second
	PackMost = 500
)

// Packed is one event of a pack: its 2xx, at the first attempt of its
// round.
type Packed struct {
	EventID string
	Type    ledger.EventType
	UserID  string
	Version int64
	Attempt Attempt
}

// Pack is events of one endpoint answered 2xx at the first attempt of
// their round, their ids less than PackSpan apart, at most PackMost. Key is
// its place among the endpoint's packs as the store read it ("<highest
// event id>#<a unique suffix>": packs sort by their highest event id);
// a pack to be written has none yet.
type Pack struct {
	EndpointID string
	Key        string
	Events     []Packed
}

// High and Low are the pack's highest and lowest event ids.
func (p Pack) High() string {
	h := ""
	for _, e := range p.Events {
		h = max(h, e.EventID)
	}
	return h
}

func (p Pack) Low() string {
	if len(p.Events) == 0 {
		return ""
	}
	l := p.Events[0].EventID
	for _, e := range p.Events[1:] {
		l = min(l, e.EventID)
	}
	return l
}

// Users is the pack's users, each once, sorted.
func (p Pack) Users() []string {
	us := make([]string, 0, len(p.Events))
	for _, e := range p.Events {
		us = append(us, e.UserID)
	}
	slices.Sort(us)
	return slices.Compact(us)
}

// isULID says whether an event id is a ULID: only such events are packed
// (an id's time places its pack), others get rows.
func isULID(eventID string) bool {
	_, err := ulid.ParseStrict(eventID)
	return err == nil
}

// timePrefix is the first ten characters of a ULID of ms: the ids of that
// millisecond start so, and they sort in time order.
func timePrefix(ms uint64) string {
	var id ulid.ULID
	if err := id.SetTime(ms); err != nil {
		return "7ZZZZZZZZZ" // past ULID time: above every id
	}
	return id.String()[:10]
}

// PackWindow is the range of pack keys that may hold event eventID: from
// the id itself to the end of the PackSpan after it (keys from..to,
// both included); ok is false when the id is not a ULID (never packed).
func PackWindow(eventID string) (from, to string, ok bool) {
	id, err := ulid.ParseStrict(eventID)
	if err != nil {
		return "", "", false
	}
	return eventID, timePrefix(id.Time()+uint64(PackSpan.Milliseconds())) + "~", true
}

// PackKeyFrom is the lowest key of a pack that may hold an event of
// t or later: every pack whose highest event id is of t's millisecond or
// later sorts at or above it.
func PackKeyFrom(t time.Time) string {
	if t.UnixMilli() < 0 {
		return ""
	}
	return timePrefix(uint64(t.UnixMilli()))
}

// packsBelow is the key below which every pack that may hold an event of
// id below eventID is (""): read from there, packs of every event below
// eventID come; "" when eventID is no ULID (read from the first).
func packsBelow(eventID string) string {
	_, to, ok := PackWindow(eventID)
	if !ok {
		return ""
	}
	return to
}

// packable says whether the row r goes in a pack rather than a row of its
// own: answered 2xx at the first attempt of its round, an entry's event
// with a ULID for id.
func packable(r Row) bool {
	return isULID(r.Event.ID) && !r.Notice && r.State == DeliverySucceeded && r.Attempts == 1 && !r.Attempt.Time.IsZero()
}

// packedOf is r as a pack keeps it.
func packedOf(r Row) Packed {
	return Packed{EventID: r.Event.ID, Type: r.Event.Type, UserID: r.Event.UserID, Version: r.Event.Version, Attempt: r.Attempt}
}

// splitPacked splits rows into those written as rows and the packs of the
// rest (packable), by endpoint, each within PackSpan and at most
// PackMost.
func splitPacked(rows []Row) (kept []Row, packs []Pack) {
	var p packer
	for _, r := range rows {
		if !packable(r) {
			kept = append(kept, r)
			continue
		}
		if full := p.add(r); full != nil {
			packs = append(packs, *full)
		}
	}
	return kept, append(packs, p.drain()...)
}

// packer gathers packable rows into packs, by endpoint: a row goes in the
// first open pack of its endpoint that it keeps within PackSpan (its
// lowest and highest event ids less than PackSpan apart), else in a new
// one.
type packer struct {
	open []*openPack // in the order they were opened
}

type openPack struct {
	p      Pack
	lo, hi uint64 // its event ids' times, ms
}

// add puts r (packable) in a pack, and returns the pack if that made it
// full (PackMost): it is then no longer open.
func (p *packer) add(r Row) *Pack {
	id, _ := ulid.ParseStrict(r.Event.ID)
	t := id.Time()
	span := uint64(PackSpan.Milliseconds())
	var in *openPack
	for _, o := range p.open {
		if o.p.EndpointID == r.EndpointID && max(o.hi, t)-min(o.lo, t) < span {
			in = o
			break
		}
	}
	if in == nil {
		in = &openPack{p: Pack{EndpointID: r.EndpointID}, lo: t, hi: t}
		p.open = append(p.open, in)
	}
	in.lo, in.hi = min(in.lo, t), max(in.hi, t)
	in.p.Events = append(in.p.Events, packedOf(r))
	if len(in.p.Events) < PackMost {
		return nil
	}
	p.open = slices.DeleteFunc(p.open, func(o *openPack) bool { return o == in })
	return &in.p
}

// drain returns the open packs, in the order they were opened, and closes
// them.
func (p *packer) drain() []Pack {
	out := make([]Pack, 0, len(p.open))
	for _, o := range p.open {
		out = append(out, o.p)
	}
	p.open = nil
	return out
}

// merged is an event's delivery to endpointID as its row (nil: none) and
// its occurrences in packs (at least one, without a row) show it: the
// row's or the first occurrence's event; the state, attempts, last status
// and error and next attempt of the latest attempt (an occurrence:
// SUCCEEDED at attempt 1); the union of the logs by time, the last
// MaxAttemptLog.
func merged(endpointID string, row *Delivery, occ []Packed) Delivery {
	occ = slices.Clone(occ)
	slices.SortStableFunc(occ, func(a, b Packed) int { return a.Attempt.Time.Compare(b.Attempt.Time) })
	var d Delivery
	var rowLast time.Time
	if row != nil {
		d = *row
		d.Log = slices.Clone(row.Log)
		if len(row.Log) > 0 {
			rowLast = row.Log[len(row.Log)-1].Time
		}
	} else {
		e := occ[0]
		d = Delivery{EndpointID: endpointID, EventID: e.EventID, Type: e.Type, UserID: e.UserID, Version: e.Version}
	}
	if len(occ) == 0 {
		return d
	}
	if last := occ[len(occ)-1]; row == nil || last.Attempt.Time.After(rowLast) {
		d.State, d.Attempts, d.LastStatusCode, d.LastError = DeliverySucceeded, 1, last.Attempt.Status, ""
		d.NextAttemptTime = time.Time{}
	}
	log := d.Log
	for _, e := range occ {
		log = append(log, e.Attempt)
	}
	slices.SortStableFunc(log, func(a, b Attempt) int { return a.Time.Compare(b.Time) })
	if len(log) > MaxAttemptLog {
		log = log[len(log)-MaxAttemptLog:]
	}
	d.Log = log
	return d
}

// byEventIDDesc orders ids newest first.
func byEventIDDesc(a, b string) int { return cmp.Compare(b, a) }
