// Package receive is the load test's webhook endpoint. It verifies every
// delivery with ledgerd's own signing code (internal/webhook), and counts
// what arrives into a report.Webhooks: events, retries of a webhook-id
// already received, each user's version order and its gaps, events a
// second and the delivery lag (receive time minus the body's timestamp,
// the entry's create_time).
//
// It answers 204 to every delivery that verifies and is an event (a retry
// too: delivery is at least once, and a receiver acknowledges what it
// already has), 401 to one that does not verify, 400 to one that is not
// an event. Order is judged per user over the whole run; the rate and the
// lag over the measurement (Begin, End), so that a warm-up does not count.
package receive

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/webhook"
	"github.com/pointledger/pointledger/loadtest/report"
)

// maxBody bounds what a delivery may send; an event is a few KB.
const maxBody = 1 << 20

// Options configure a Receiver.
type Options struct {
	// Secrets: the endpoint's secret, or its new and old ones during a
	// rotation; a delivery verifies if it is signed by any. Trust adds
	// one later (the endpoint's secret comes after the receiver's URL).
	Secrets []webhook.Secret
	// Now is the clock: time.Now when nil.
	Now func() time.Time
	// FromVersion1: the endpoint existed before the run's users had any
	// entry, so each user's first event must be version 1 and one first
	// seen at a later version is a gap. Without it, the first event seen
	// of a user starts its sequence (an endpoint receives only the entries
	// written after it was created).
	FromVersion1 bool
}

// Receiver is an http.Handler that receives webhook deliveries; Result
// says what it received.
type Receiver struct {
	opts Options

	mu      sync.Mutex
	counts  report.Webhooks // the counters; Result fills in the rest
	seen    map[string]bool // webhook-ids received
	users   map[string]*versions
	lag     *hdrhistogram.Histogram
	measure struct {
		begin, end  time.Time // zero until Begin and End
		first, last time.Time // the first and last events received
		events      int64     // received between begin and end
	}
}

// New is a Receiver that has received nothing.
func New(opts Options) *Receiver {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Receiver{opts: opts, counts: report.Webhooks{ByType: map[string]int64{}},
		seen: map[string]bool{}, users: map[string]*versions{}, lag: report.NewLatencyHistogram()}
}

// Trust has the receiver verify deliveries with secret too: an endpoint's
// secret is known only once the endpoint is created, at the receiver's URL.
func (r *Receiver) Trust(secret webhook.Secret) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.opts.Secrets = append(slices.Clone(r.opts.Secrets), secret)
}

// Begin starts the measurement of the rate and the lag; End ends it. They
// fit drive.Recorder.OnMeasure. Without them, every event is measured, and
// the rate is over the time from the first event received to the last.
func (r *Receiver) Begin() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.measure.begin = r.opts.Now()
	// What was received so far was written before: the warm-up's.
	r.measure.events = 0
	r.lag.Reset()
}

// End ends the measurement Begin started.
func (r *Receiver) End() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.measure.end = r.opts.Now()
}

// event is what the receiver reads of a body: {"type", "timestamp",
// "data": {"user_id", "version", ...}}.
type event struct {
	Type      ledger.EventType `json:"type"`
	Timestamp time.Time        `json:"timestamp"`
	Data      struct {
		UserID  string  `json:"user_id"`
		Version version `json:"version"`
	} `json:"data"`
}

// version reads the event's version: a decimal string in every event, as
// protojson writes an int64 such as the entry's version.
type version int64

func (v *version) UnmarshalJSON(b []byte) error {
	var text string
	if err := json.Unmarshal(b, &text); err != nil {
		return fmt.Errorf("version %s: not a string", b)
	}
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return fmt.Errorf("version %s: not an integer", b)
	}
	*v = version(n)
	return nil
}

func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, readErr := io.ReadAll(http.MaxBytesReader(w, req.Body, maxBody))
	at := r.opts.Now()
	code := r.receive(req, body, readErr, at)
	if code != http.StatusNoContent {
		http.Error(w, http.StatusText(code), code)
		return
	}
	w.WriteHeader(code)
}

// receive counts one delivery and returns the status to answer it with.
func (r *Receiver) receive(req *http.Request, body []byte, readErr error, at time.Time) int {
	r.mu.Lock()
	secrets := r.opts.Secrets // Trust replaces the slice, never changes it
	r.mu.Unlock()
	verifyErr := webhook.Verify(secrets, req.Header, body, at, webhook.DefaultTolerance)
	var ev event
	parseErr := json.Unmarshal(body, &ev)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts.Deliveries++
	switch {
	case req.Method != http.MethodPost:
		r.counts.Malformed++
		return http.StatusMethodNotAllowed
	case readErr != nil:
		r.counts.Malformed++
		return http.StatusRequestEntityTooLarge
	case verifyErr != nil:
		r.counts.Refused++
		return http.StatusUnauthorized
	case parseErr != nil || ev.Type == "" || ev.Data.UserID == "" || ev.Timestamp.IsZero():
		r.counts.Malformed++
		return http.StatusBadRequest
	}
	id := req.Header.Get(webhook.HeaderID)
	if r.seen[id] {
		r.counts.Duplicates++
		return http.StatusNoContent
	}
	r.seen[id] = true
	r.counts.Events++
	r.counts.ByType[string(ev.Type)]++
	if r.measure.first.IsZero() {
		r.measure.first = at
	}
	r.measure.last = at
	if r.measuring(at) {
		r.measure.events++
	}
	if ev.Type == ledger.EventPointsExpiring {
		// A notice carries the version it was decided at, outside the
		// user's order, and no entry whose lag it could tell.
		r.counts.Notices++
		return http.StatusNoContent
	}
	if r.measuring(ev.Timestamp) {
		report.RecordLatency(r.lag, at.Sub(ev.Timestamp))
	}
	u, ok := r.users[ev.Data.UserID]
	if !ok {
		u = &versions{}
		if !r.opts.FromVersion1 {
			u.last = int64(ev.Data.Version) - 1
		}
		r.users[ev.Data.UserID] = u
	}
	switch u.receive(int64(ev.Data.Version)) {
	case gap:
		r.counts.Gaps++
	case outOfOrder:
		r.counts.OutOfOrder++
	case inOrder, fillsGap: // as promised; a filled gap was counted when it opened
	}
	return http.StatusNoContent
}

// measuring says whether t is within the measurement: between Begin and
// End, or anywhere before Begin is called.
func (r *Receiver) measuring(t time.Time) bool {
	m := r.measure
	return m.begin.IsZero() || !t.Before(m.begin) && (m.end.IsZero() || t.Before(m.end))
}

// Result is what the receiver has received so far.
func (r *Receiver) Result() report.Webhooks {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := r.counts
	res.ByType = make(map[string]int64, len(r.counts.ByType))
	for t, n := range r.counts.ByType {
		res.ByType[t] = n
	}
	res.Users = len(r.users)
	for _, u := range r.users {
		res.Missing += int64(len(u.missing))
	}
	res.Lag = report.LatencyPercentiles(r.lag)
	m := r.measure
	from, to := m.begin, m.end
	if from.IsZero() {
		from = m.first
	}
	if to.IsZero() {
		to = m.last
	}
	if d := to.Sub(from).Seconds(); d > 0 {
		res.EventsPerS = float64(m.events) / d
	}
	return res
}

// versions are one user's versions as received: the highest, and the
// versions skipped below it that have not arrived since.
type versions struct {
	last    int64
	missing map[int64]bool
}

// arrival is what an event's version makes of its user's order.
type arrival int

const (
	inOrder    arrival = iota // the next version
	gap                       // versions skipped before it
	fillsGap                  // one skipped before, arrived since (a redelivery)
	outOfOrder                // at or below the last, and not one skipped
)

func (u *versions) receive(v int64) arrival {
	switch {
	case v == u.last+1:
		u.last = v
		return inOrder
	case v > u.last+1:
		if u.missing == nil {
			u.missing = map[int64]bool{}
		}
		for m := u.last + 1; m < v; m++ {
			u.missing[m] = true
		}
		u.last = v
		return gap
	case u.missing[v]:
		delete(u.missing, v)
		return fillsGap
	default:
		return outOfOrder
	}
}
