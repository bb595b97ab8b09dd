package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/webhook"
)

// EntryJSON writes entries itself (appendMessage), not through protojson:
// for every entry type, with every field the API shows set and unset, and
// text of every sort in its strings, it gives the bytes the API's JSON
// codec gives for the same entry, and it writes them itself (not by
// falling back to the codec) for every entry the ledger writes. The
// event's data and body made of it are those made before (checkEventBody).
func TestEntryJSONIsTheCodecsJSON(t *testing.T) {
	t.Parallel()
	if entryPlan == nil {
		t.Fatal("appendMessage does not know every field of Entry: every entry goes through protojson (add the field's kind to planOf)")
	}
	texts := []string{"", "plain", `quote " and \ backslash`, "<b>&amp;</b>", "tab\tnew\nline\r\f\b", "\x00\x01\x1f\x7f",
		"é ü 日本 🎉", "line\u2028sep\u2029", "\ufffd replacement", "a/b", "'single'"}
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	times := []time.Time{{}, at, at.Add(100 * time.Millisecond), at.Add(123_456 * time.Nanosecond), at.Add(time.Nanosecond), at.Add(120 * time.Microsecond),
		at.In(time.FixedZone("X", -5*3600)), time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC)}
	amounts := []decimal.Decimal{decimal.Zero, decimal.NewFromInt(-10), decimal.RequireFromString("12.345"), decimal.RequireFromString("-0.001"), decimal.NewFromInt(1 << 40)}
	types := []ledger.EntryType{ledger.EntryGrant, ledger.EntryPurchase, ledger.EntryRefund, ledger.EntryAdjustment, ledger.EntryExpiration,
		ledger.EntryHold, ledger.EntryCapture, ledger.EntryRelease, ledger.EntryMaturation, ledger.EntryReversal}
	rng := rand.New(rand.NewPCG(37, 1))
	pick := func(n int) int { return rng.IntN(n) }
	entries := 0
	for _, typ := range types {
		for i := range 300 {
			e := ledger.Entry{
				ID: "01J" + strings.Repeat("0", 22) + fmt.Sprint(i%10), UserID: "user-" + fmt.Sprint(i), Version: int64(i + 1), Type: typ,
				Amount: amounts[pick(len(amounts))], BalanceAfter: amounts[pick(len(amounts))],
				RequestID: texts[pick(len(texts))], OrderID: texts[pick(len(texts))], CreateTime: times[pick(len(times))],
				RefundedAmount: amounts[pick(len(amounts))], PurchaseRequestID: texts[pick(len(texts))], Reason: texts[pick(len(texts))],
				ExplainsBalance: pick(2) == 0, ExpireTime: times[pick(len(times))], Kind: []string{"", "standard", "bonus", texts[pick(len(texts))]}[pick(4)],
				MerchantID: texts[pick(len(texts))], Category: texts[pick(len(texts))],
				HeldChange: amounts[pick(len(amounts))], HeldAfter: amounts[pick(len(amounts))], HoldRequestID: texts[pick(len(texts))],
				PendingChange: amounts[pick(len(amounts))], PendingAfter: amounts[pick(len(amounts))], EffectiveTime: times[pick(len(times))],
				GrantRequestID: texts[pick(len(texts))], ReversedAmount: amounts[pick(len(amounts))], BudgetID: texts[pick(len(texts))],
			}
			if pick(2) == 0 {
				e.Metadata = map[string]string{}
				for range pick(5) {
					e.Metadata[texts[pick(len(texts))]+fmt.Sprint(pick(3))] = texts[pick(len(texts))]
				}
			}
			for range pick(4) {
				e.Draws = append(e.Draws, ledger.Draw{Expire: times[pick(len(times))], Amount: amounts[pick(len(amounts))], Kind: []string{"", "bonus", texts[pick(len(texts))]}[pick(3)]})
			}
			want, err := entryJSONByCodec(entryToProto(e))
			if err != nil {
				t.Fatalf("the codec refuses %+v: %v", e, err)
			}
			got, err := EntryJSON(e)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Fatalf("%s entry:\nEntryJSON %s\nthe codec %s", typ, got, want)
			}
			if _, ok := appendMessage(nil, entryToProto(e).ProtoReflect(), entryPlan); !ok {
				t.Errorf("appendMessage leaves a valid %s entry to the codec: %s", typ, want)
			}
			checkEventBody(t, e, want)
			entries++
		}
	}
	t.Logf("%d entries alike", entries)
}

// checkEventBody checks that the event the dispatcher makes of e (its
// entryEvent: EntryJSON, then webhook.NewEntryEvent; sent as Body()) has
// the data and the body it had before: the entry by the codec (codecJSON),
// the data and the body by encoding/json.
func checkEventBody(t *testing.T, e ledger.Entry, codecJSON json.RawMessage) {
	t.Helper()
	encode := func(v any) []byte {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
		return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	}
	data := webhook.NewEventData(e.ID, e.UserID, e.Version)
	data.Entry = codecJSON
	wantData := encode(data)
	wantBody := encode(struct {
		Type      ledger.EventType `json:"type"`
		Timestamp string           `json:"timestamp"`
		Data      json.RawMessage  `json:"data"`
	}{ledger.EventTypeOf(e.Type), webhook.FormatTimestamp(e.CreateTime), wantData})
	entry, err := EntryJSON(e)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := webhook.NewEntryEvent(e.ID, ledger.EventTypeOf(e.Type), e.UserID, e.Version, e.CreateTime, entry)
	if err != nil {
		t.Fatal(err)
	}
	body, err := ev.Body()
	if err != nil || string(ev.Data) != string(wantData) || string(body) != string(wantBody) {
		t.Fatalf("%s entry's event: data\n%s\nbody\n%s (%v)\nwant\n%s\n%s", e.Type, ev.Data, body, err, wantData, wantBody)
	}
}

// What protojson refuses, EntryJSON refuses: a string that is not UTF-8.
func TestEntryJSONRefusesWhatTheCodecRefuses(t *testing.T) {
	t.Parallel()
	e := ledger.Entry{ID: "01J", UserID: "alice", Version: 1, Type: ledger.EntryGrant, Metadata: map[string]string{"note": "bad \xff byte"}, CreateTime: time.Now()}
	if b, err := EntryJSON(e); err == nil {
		t.Errorf("EntryJSON = %s, want protojson's error for a string not UTF-8", b)
	}
	if _, err := entryJSONByCodec(entryToProto(e)); err == nil {
		t.Error("the codec took a string not UTF-8")
	}
}
