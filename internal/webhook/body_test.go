package webhook

import (
	"encoding/json"
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
