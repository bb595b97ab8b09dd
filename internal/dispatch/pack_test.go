package dispatch

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/webhook"
)

// Packs without a store: which rows go in packs, the packs' bounds, the
// window that finds an event's packs, and an event's row and packed
// occurrences taken together.

// idAt is a ULID event id of time t.
func idAt(t time.Time, n int) string {
	return ulid.MustNew(ulid.Timestamp(t), constEntropy(n)).String()
}

type constEntropy int

func (c constEntropy) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 0
	}
	p[len(p)-1] = byte(c)
	p[len(p)-2] = byte(c >> 8)
	return len(p), nil
}

func okRow(endpointID, user string, version int64, id string, at time.Time) Row {
	return Row{
		EndpointID: endpointID, Event: webhook.Event{ID: id, Type: ledger.EventPointsGranted, UserID: user, Version: version},
		State: DeliverySucceeded, Attempts: 1, Status: 204, Attempt: Attempt{Time: at, Status: 204},
	}
}

func TestSplitPackedKeepsFailuresAndBounds(t *testing.T) {
	t.Parallel()
	var rows []Row
	// 1,300 first-attempt 2xx over 3.2 s of ids, two endpoints.
	for i := range 1300 {
		at := t0.Add(time.Duration(i) * 2500 * time.Microsecond)
		rows = append(rows, okRow([]string{"E1", "E2"}[i%2], fmt.Sprint("u", i%7), int64(i+1), idAt(at, i), at))
	}
	retried := okRow("E1", "r", 1, idAt(t0, 9000), t0)
	retried.Attempts = 2
	failed := okRow("E1", "f", 1, idAt(t0, 9001), t0)
	failed.State, failed.Status = DeliveryPending, 500
	notice := okRow("E1", "n", 1, idAt(t0, 9002), t0)
	notice.Notice = true
	noULID := okRow("E1", "x", 1, "01JNOTICE0000000000000000A", t0)
	rows = append(rows, retried, failed, notice, noULID)

	kept, packs := splitPacked(rows)
	if len(kept) != 4 {
		t.Errorf("kept %d rows, want the 4 not answered 2xx at a first attempt, a notice's, one without a ULID: %+v", len(kept), kept)
	}
	seen := map[string]int{}
	for _, p := range packs {
		if n := len(p.Events); n == 0 || n > PackMost {
			t.Errorf("pack of %d events, want 1 to %d", n, PackMost)
		}
		lo, _ := ulid.ParseStrict(p.Low())
		hi, _ := ulid.ParseStrict(p.High())
		if hi.Time()-lo.Time() >= 1000 {
			t.Errorf("pack %s..%s: not within one span", p.Low(), p.High())
		}
		for _, e := range p.Events {
			seen[e.EventID]++
			if p.EndpointID != rows[e.Version-1].EndpointID {
				t.Errorf("event %s of %s in a pack of %s", e.EventID, rows[e.Version-1].EndpointID, p.EndpointID)
			}
		}
	}
	for _, r := range rows[:1300] {
		if seen[r.Event.ID] != 1 {
			t.Errorf("%s in %d packs, want 1", r.Event.ID, seen[r.Event.ID])
		}
	}
	for _, p := range packs {
		for _, e := range p.Events {
			from, to, ok := PackWindow(e.EventID)
			key := p.High() + "#S"
			if !ok || key < from || key > to || p.Low() > e.EventID {
				t.Errorf("event %s: its pack %s is outside its window %s..%s", e.EventID, key, from, to)
			}
			if below := packsBelow(e.EventID); key >= below && e.EventID < p.High() {
				t.Errorf("event %s below %s: its pack %s not below %s", e.EventID, p.High(), key, below)
			}
		}
	}
}

func TestPackKeyFromIsBelowLaterPacks(t *testing.T) {
	t.Parallel()
	at := t0.Add(1500 * time.Millisecond)
	if from := PackKeyFrom(at); idAt(at, 0)+"#S" < from || idAt(at.Add(-time.Millisecond), 0)+"#S" >= from {
		t.Errorf("PackKeyFrom(%v) = %s: want packs of that millisecond on at or above it, earlier ones below", at, from)
	}
}

func TestMergedTakesTheLatestAttempt(t *testing.T) {
	t.Parallel()
	id := idAt(t0, 1)
	failedRow := &Delivery{
		EndpointID: "E", EventID: id, Type: ledger.EventPointsGranted, UserID: "u", Version: 3,
		State: DeliveryFailed, Attempts: 3, LastStatusCode: 503, LastError: "the receiver answered 503",
		Log: []Attempt{{Time: t0, Status: 503}, {Time: t0.Add(time.Second), Status: 503}, {Time: t0.Add(2 * time.Second), Status: 503}},
	}
	later := Packed{EventID: id, Type: ledger.EventPointsGranted, UserID: "u", Version: 3, Attempt: Attempt{Time: t0.Add(time.Hour), Status: 200}}
	earlier := later
	earlier.Attempt = Attempt{Time: t0.Add(-time.Hour), Status: 204}
	for _, c := range []struct {
		name     string
		row      *Delivery
		occ      []Packed
		state    DeliveryState
		attempts int
		status   int
		log      []int
	}{
		{"packed only", nil, []Packed{later}, DeliverySucceeded, 1, 200, []int{200}},
		{"packed twice", nil, []Packed{later, earlier}, DeliverySucceeded, 1, 200, []int{204, 200}},
		{"row then packed", failedRow, []Packed{later}, DeliverySucceeded, 1, 200, []int{503, 503, 503, 200}},
		{"packed then row", failedRow, []Packed{earlier}, DeliveryFailed, 3, 503, []int{204, 503, 503, 503}},
		{"row only", failedRow, nil, DeliveryFailed, 3, 503, []int{503, 503, 503}},
	} {
		got := merged("E", c.row, c.occ)
		var log []int
		for _, a := range got.Log {
			log = append(log, a.Status)
		}
		if got.State != c.state || got.Attempts != c.attempts || got.LastStatusCode != c.status || !slices.Equal(log, c.log) ||
			got.EventID != id || got.Version != 3 || got.UserID != "u" || got.EndpointID != "E" {
			t.Errorf("%s: %+v (log %v), want %s, %d attempts, last %d, log %v", c.name, got, log, c.state, c.attempts, c.status, c.log)
		}
		if (got.State == DeliverySucceeded) != (got.LastError == "") {
			t.Errorf("%s: state %s with error %q", c.name, got.State, got.LastError)
		}
	}
	if len(failedRow.Log) != 3 {
		t.Errorf("merged changed the row's log: %+v", failedRow.Log)
	}
	var many []Packed
	for i := range MaxAttemptLog + 5 {
		p := later
		p.Attempt.Time = t0.Add(time.Duration(i) * time.Minute)
		many = append(many, p)
	}
	if got := merged("E", failedRow, many); len(got.Log) != MaxAttemptLog || !got.Log[MaxAttemptLog-1].Time.Equal(many[len(many)-1].Attempt.Time) {
		t.Errorf("log of %d, last %v: want the last %d attempts", len(got.Log), got.Log[len(got.Log)-1].Time, MaxAttemptLog)
	}
}
