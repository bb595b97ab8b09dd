package dispatchtest

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/api"
	"github.com/pointledger/pointledger/internal/dispatch"
	"github.com/pointledger/pointledger/internal/ledger"
)

// typedEvent is an event as a typed receiver reads it: one struct for
// every type, entry or notice, as docs/events.md shows it. It is written
// here, not taken from package webhook, so that a change of the shape the
// dispatcher sends fails this test.
type typedEvent struct {
	Type      string `json:"type"`
	Timestamp string `json:"timestamp"`
	Data      struct {
		EventID    string `json:"event_id"`
		UserID     string `json:"user_id"`
		Version    string `json:"version"`
		Entry      *typedEntry
		ExpireTime string `json:"expire_time"`
		Amount     string `json:"amount"`
		Balance    string `json:"balance"`
		Kind       string `json:"kind"`
	} `json:"data"`
}

// typedEntry is the fields of an Entry the test checks; the entry is the
// API's (api.EntryJSON), whose every int64 is a string.
type typedEntry struct {
	EntryID string `json:"entry_id"`
	Version string `json:"version"`
	Type    string `json:"type"`
}

func (e *typedEvent) UnmarshalJSON(b []byte) error {
	type plain typedEvent
	var aux struct {
		plain
		Data struct {
			EventID    string          `json:"event_id"`
			UserID     string          `json:"user_id"`
			Version    string          `json:"version"`
			Entry      json.RawMessage `json:"entry"`
			ExpireTime string          `json:"expire_time"`
			Amount     string          `json:"amount"`
			Balance    string          `json:"balance"`
			Kind       string          `json:"kind"`
		} `json:"data"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&aux); err != nil {
		return err
	}
	*e = typedEvent(aux.plain)
	d := aux.Data
	e.Data.EventID, e.Data.UserID, e.Data.Version = d.EventID, d.UserID, d.Version
	e.Data.ExpireTime, e.Data.Amount, e.Data.Balance, e.Data.Kind = d.ExpireTime, d.Amount, d.Balance, d.Kind
	if d.Entry != nil {
		e.Data.Entry = new(typedEntry)
		return json.Unmarshal(d.Entry, e.Data.Entry)
	}
	return nil
}

// TestEveryEventTypeHasOneBodyShape: an event of every type (the ten
// entry types and the points.expiring notice), as delivered by the
// dispatcher with the API's entry JSON, decodes into one typed struct
// with no unknown field, its version a decimal string like the entry's.
// (Before issue 31 an entry's event sent version as a JSON number and a
// notice's as a string.)
func testEveryEventTypeHasOneBodyShape(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	var mu sync.Mutex
	bodies := map[string][]byte{} // by type
	rcv := newReceiver(t, nil)
	rcv.raw = func(typ string, body []byte) { mu.Lock(); bodies[typ] = body; mu.Unlock() }
	f.endpoint(rcv)
	d := f.dispatcher(dispatch.Options{EncodeEntry: api.EntryJSON})

	const u = "alice"
	now := f.clk.Now()
	apply := func(typ ledger.EntryType, r ledger.Request) {
		t.Helper()
		r.UserID = u
		f.apply(typ, r)
	}
	apply(ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "100", Expire: now.Add(48 * time.Hour)})
	apply(ledger.EntryGrant, ledger.Request{RequestID: "pending", Amount: "10", Effective: now.Add(time.Minute)})
	apply(ledger.EntryReversal, ledger.Request{RequestID: "rv", Amount: "3", GrantRequestID: "pending"})
	apply(ledger.EntryPurchase, ledger.Request{RequestID: "p", Amount: "20", OrderID: "o-1"})
	apply(ledger.EntryRefund, ledger.Request{RequestID: "r", Amount: "5", PurchaseRequestID: "p"})
	apply(ledger.EntryAdjustment, ledger.Request{RequestID: "a", Amount: "2", Reason: "goodwill"})
	apply(ledger.EntryHold, ledger.Request{RequestID: "h1", Amount: "10", Expire: now.Add(3 * time.Hour)})
	apply(ledger.EntryCapture, ledger.Request{RequestID: "c1", HoldRequestID: "h1", Amount: "4"})
	apply(ledger.EntryHold, ledger.Request{RequestID: "h2", Amount: "3", Expire: now.Add(3 * time.Hour)})
	apply(ledger.EntryRelease, ledger.Request{RequestID: "v2", HoldRequestID: "h2"})
	apply(ledger.EntryGrant, ledger.Request{RequestID: "short", Amount: "5", Expire: now.Add(time.Hour)}) // after the spending: it expires whole
	f.clk.Add(2 * time.Hour)                                                                              // the pending grant matures, the short grant expires
	if _, err := f.store.Expire(context.Background(), u); err != nil {                                    // both, in one sweep
		t.Fatal(err)
	}
	// The notice of the 48-hour grant (the short one has expired) (a 7-day lead), decided and handed
	// to the dispatcher as ledgerd does.
	notices := 0
	if f.env.NoticePass != nil {
		if err := f.env.NoticePass(context.Background(), f.clk.Now, d.Notify); err != nil {
			t.Fatal(err)
		}
		notices = 1
	}
	entries := f.entries(u)
	f.feed(entries, d)

	var wantTypes []string
	if notices > 0 {
		wantTypes = append(wantTypes, "points.expiring")
	}
	for _, e := range entries {
		wantTypes = append(wantTypes, string(ledger.EventTypeOf(e.Type)))
	}
	for typ := range ledger.EntryTypes {
		if !slices.Contains(wantTypes, string(ledger.EventTypeOf(typ))) {
			t.Fatalf("the test wrote no %s entry", typ)
		}
	}
	waitFor(t, "every event", func() bool { return rcv.ackedCount() == len(entries)+notices })
	rcv.check()
	mu.Lock()
	defer mu.Unlock()
	for _, typ := range wantTypes {
		body := bodies[typ]
		var ev typedEvent
		if err := json.Unmarshal(body, &ev); err != nil {
			t.Errorf("%s: %v in %s", typ, err, body)
			continue
		}
		if _, err := strconv.ParseInt(ev.Data.Version, 10, 64); err != nil || ev.Data.UserID != u || ev.Data.EventID == "" || ev.Type != typ {
			t.Errorf("%s: data %+v: want version a decimal string, user %s, an event id", typ, ev.Data, u)
		}
		switch {
		case typ == "points.expiring":
			if ev.Data.Entry != nil || ev.Data.ExpireTime == "" || ev.Data.Amount == "" || ev.Data.Balance == "" || ev.Data.Kind == "" {
				t.Errorf("notice %s: want expire_time, amount, balance and kind, no entry", body)
			}
		case ev.Data.Entry == nil || ev.Data.Entry.Version != ev.Data.Version || ev.Data.Entry.EntryID != ev.Data.EventID:
			t.Errorf("%s: %s: want its entry, of the same version and id", typ, body)
		}
	}
}
