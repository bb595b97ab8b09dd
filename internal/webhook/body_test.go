package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/ledger"
)

func TestBody(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 25, 15, 4, 5, 123_000_000, time.FixedZone("CET", 3600))
	data := json.RawMessage(`{
		"event_id": "01JDX", "user_id": "alice", "version": "3",
		"entry": {"type": "ENTRY_TYPE_GRANT", "amount": "50", "metadata": {"note": "<b>&</b>"}}
	}`)
	got, err := Body(ledger.EventPointsGranted, at, data)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"points.granted","timestamp":"2026-11-25T14:04:05.123Z","data":{"event_id":"01JDX","user_id":"alice","version":"3","entry":{"type":"ENTRY_TYPE_GRANT","amount":"50","metadata":{"note":"<b>&</b>"}}}}`
	if string(got) != want {
		t.Errorf("Body =\n%s\nwant\n%s", got, want)
	}
	for _, bad := range []string{``, `nul`, `"a string"`, `[1]`, `{"a":}`} {
		if b, err := Body(ledger.EventPointsGranted, at, json.RawMessage(bad)); err == nil {
			t.Errorf("Body with data %q = %s, want an error", bad, b)
		}
	}
}

// The body's timestamp is written as protojson writes a Timestamp (the
// API's create_time): UTC, fractional digits in groups of three, none if
// whole seconds.
func TestFormatTimestamp(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 3, 31, 23, 59, 59, 0, time.UTC)
	tests := []struct {
		at   time.Time
		want string
	}{
		{base, "2026-03-31T23:59:59Z"},
		{base.Add(100 * time.Millisecond), "2026-03-31T23:59:59.100Z"},
		{base.Add(123_456 * time.Nanosecond), "2026-03-31T23:59:59.000123456Z"},
		{base.Add(120 * time.Microsecond), "2026-03-31T23:59:59.000120Z"},
		{base.Add(time.Nanosecond), "2026-03-31T23:59:59.000000001Z"},
		{base.In(time.FixedZone("X", -5*3600)), "2026-03-31T23:59:59Z"},
	}
	for _, tt := range tests {
		if got := FormatTimestamp(tt.at); got != tt.want {
			t.Errorf("FormatTimestamp(%s) = %s, want %s", tt.at, got, tt.want)
		}
	}
}

// bodyByEncoder and eventDataByEncoder are Body and EventData.JSON as they
// were written before they appended into one buffer: by encoding/json,
// the reference the bodies receivers verify were made by.
func bodyByEncoder(t ledger.EventType, ts time.Time, data json.RawMessage) ([]byte, error) {
	if !json.Valid(data) || !bytes.HasPrefix(bytes.TrimSpace(data), []byte("{")) {
		return nil, errors.New("event body: data is not a JSON object")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(struct {
		Type      ledger.EventType `json:"type"`
		Timestamp string           `json:"timestamp"`
		Data      json.RawMessage  `json:"data"`
	}{t, formatTimestampByTrim(ts), data})
	if err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func eventDataByEncoder(d EventData) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(d); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func formatTimestampByTrim(t time.Time) string {
	s := t.UTC().Format("2006-01-02T15:04:05.000000000")
	s = strings.TrimSuffix(s, "000")
	s = strings.TrimSuffix(s, "000")
	s = strings.TrimSuffix(s, ".000")
	return s + "Z"
}

var oddTexts = []string{"", "plain", "01JDX0000000000000000000000", `quote " and \ backslash`, "<b>&amp;</b>", "tab\tnew\nline\r",
	"\x00\x01\x1f\x7f", "é ü 日本 🎉", "line\u2028sep\u2029", "bad \xff byte", "\ufffd"}

// Body and EventData.JSON write the bytes encoding/json wrote, for every
// event type, any text in the data's fields, entries spaced or compact,
// and any timestamp: a receiver verifies the same body as before.
func TestBodyIsEncodingJSONs(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 25, 15, 4, 5, 0, time.FixedZone("CET", 3600))
	times := []time.Time{at, at.Add(100 * time.Millisecond), at.Add(123_456 * time.Nanosecond), at.Add(time.Nanosecond), {}, time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC)}
	entries := []json.RawMessage{nil, json.RawMessage(`{"entry_id":"01J","metadata":{"note":"<b>&</b> \u2028 é"},"draws":[]}`),
		json.RawMessage("{ \"a\" : [1, 2,\n\t3], \"b\": {\"c\": \"x y\"} }"), json.RawMessage(`{}`)}
	types := []ledger.EventType{ledger.EventPointsGranted, ledger.EventPointsSpent, ledger.EventType("odd \"type\" <é>")}
	checked := 0
	for i := range 2000 {
		d := EventData{
			EventID: oddTexts[i%len(oddTexts)], UserID: oddTexts[(i/3)%len(oddTexts)], Version: oddTexts[(i/7)%len(oddTexts)],
			Entry: entries[i%len(entries)],
		}
		if i%5 == 0 {
			d.ExpireTime, d.Amount, d.Balance, d.Kind = oddTexts[(i/11)%len(oddTexts)], oddTexts[(i/13)%len(oddTexts)], oddTexts[(i/2)%len(oddTexts)], oddTexts[(i/17)%len(oddTexts)]
		}
		wantData, err := eventDataByEncoder(d)
		if err != nil {
			t.Fatal(err)
		}
		gotData, err := d.JSON()
		if err != nil || string(gotData) != string(wantData) {
			t.Fatalf("EventData%+v.JSON() =\n%s, %v\nwant\n%s", d, gotData, err, wantData)
		}
		for _, data := range []json.RawMessage{wantData, json.RawMessage(" \n" + string(wantData) + "\t")} {
			typ, ts := types[i%len(types)], times[i%len(times)]
			want, err := bodyByEncoder(typ, ts, data)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Body(typ, ts, data)
			if err != nil || string(got) != string(want) {
				t.Fatalf("Body(%q, %s, %s) =\n%s, %v\nwant\n%s", typ, ts, data, got, err, want)
			}
			checked++
		}
	}
	// A prefix kept, and nothing of a refused body left behind.
	got, err := AppendBody([]byte("prefix"), ledger.EventPointsGranted, at, json.RawMessage(`{"a":1}`))
	if want := `prefix{"type":"points.granted","timestamp":"2026-11-25T14:04:05Z","data":{"a":1}}`; err != nil || string(got) != want {
		t.Errorf("AppendBody = %s, %v; want %s", got, err, want)
	}
	if got, err := AppendBody([]byte("prefix"), ledger.EventPointsGranted, at, json.RawMessage(`{"a":}`)); err == nil || string(got) != "prefix" {
		t.Errorf("AppendBody of bad data = %q, %v; want the prefix alone and an error", got, err)
	}
	t.Logf("%d bodies alike", checked)
}

// An entry's event carries the data and the body encoding/json made, the
// body built once with the data; an event whose data, type or time were
// changed since gets the body of what it now holds.
func TestNewEntryEventBuildsTheBodyWithTheData(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 25, 15, 4, 5, 120_000, time.UTC)
	for i, entry := range []json.RawMessage{json.RawMessage(`{"entry_id":"01J","metadata":{"note":"<b>&</b> é"}}`), json.RawMessage("{ \"a\" :\n [1, 2] }")} {
		ev, err := NewEntryEvent(oddTexts[2], ledger.EventPointsSpent, oddTexts[i+1], int64(i+7), at, entry)
		if err != nil {
			t.Fatal(err)
		}
		d := NewEventData(oddTexts[2], oddTexts[i+1], int64(i+7))
		d.Entry = entry
		wantData, err := eventDataByEncoder(d)
		if err != nil {
			t.Fatal(err)
		}
		if string(ev.Data) != string(wantData) || ev.ID != oddTexts[2] || ev.UserID != oddTexts[i+1] || ev.Version != int64(i+7) || !ev.Time.Equal(at) || ev.Type != ledger.EventPointsSpent {
			t.Errorf("NewEntryEvent = %+v, data %s; want data %s", ev, ev.Data, wantData)
		}
		check := func(what string, ev Event) {
			t.Helper()
			want, err := bodyByEncoder(ev.Type, ev.Time, ev.Data)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := ev.Body(); err != nil || string(got) != string(want) {
				t.Errorf("%s: Body() = %s, %v; want %s", what, got, err, want)
			}
		}
		check("as built", ev)
		other := ev
		other.Data = json.RawMessage(`{"event_id":"other"}`)
		check("other data", other)
		other = ev
		other.Type = ledger.EventPointsGranted
		check("another type", other)
		other = ev
		other.Time = at.Add(time.Second)
		check("another time", other)
		other = ev
		other.Data = append(ev.Data[:len(ev.Data):len(ev.Data)], ' ') // a copy, spaced
		check("data copied", other)
	}
	if ev, err := NewEntryEvent("01J", ledger.EventPointsSpent, "alice", 1, at, json.RawMessage(`{"a":`)); err == nil {
		t.Errorf("NewEntryEvent of a broken entry = %+v, want an error", ev)
	}
}
