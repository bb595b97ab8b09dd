package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/pointledger/pointledger/internal/ledger"
)

// Body returns the body of an event as Standard Webhooks shapes it:
// {"type": T, "timestamp": <RFC 3339>, "data": data}. data is sent as
// given (compacted, not re-escaped): for an entry's event it is
// {event_id, user_id, version, entry}, with the entry as the API returns
// it. ts is the entry's create_time, written as the API writes a
// timestamp (UTC, 0, 3, 6 or 9 fractional digits), so that both read the
// same.
func Body(t ledger.EventType, ts time.Time, data json.RawMessage) ([]byte, error) {
	return AppendBody(make([]byte, 0, len(`{"type":"","timestamp":"2006-01-02T15:04:05.000000000Z","data":}`)+len(t)+len(data)), t, ts, data)
}

// AppendBody appends Body(t, ts, data) to b: the same bytes, written into
// one buffer, data compacted once as it is copied (it is what
// encoding/json made of it before: the body's bytes are what receivers
// verify, and TestBodyIsEncodingJSONs holds them alike).
func AppendBody(b []byte, t ledger.EventType, ts time.Time, data json.RawMessage) ([]byte, error) {
	if i := firstNonSpace(data); i == len(data) || data[i] != '{' {
		return b, fmt.Errorf("event body: data is not a JSON object")
	}
	start := len(b)
	b, _ = appendBodyHead(b, t, ts)
	buf := bytes.NewBuffer(b)
	if err := json.Compact(buf, data); err != nil {
		return b[:start], fmt.Errorf("event body: data is not a JSON object")
	}
	return append(buf.Bytes(), '}'), nil
}

// appendBodyHead appends what a body has before its data, and says where
// the data starts.
func appendBodyHead(b []byte, t ledger.EventType, ts time.Time) ([]byte, int) {
	b = append(b, `{"type":`...)
	b = appendJSONString(b, string(t))
	b = append(b, `,"timestamp":"`...)
	b = AppendTimestamp(b, ts)
	b = append(b, `","data":`...)
	return b, len(b)
}

func firstNonSpace(b []byte) int {
	i := 0
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// EventData is the one shape of every event's data, an entry's or a
// notice's: {event_id, user_id, version, ...}. version is a decimal
// string, as the API writes an int64 (an Entry's version) in JSON, for
// every type: a typed receiver reads every event with one struct. An
// entry's event has entry (the Entry as the API returns it); a
// points.expiring notice has expire_time, amount and balance instead.
type EventData struct {
	EventID string `json:"event_id"`
	UserID  string `json:"user_id"`
	// Version is the entry's version, or the account's version a notice
	// was decided at.
	Version    string          `json:"version"`
	Entry      json.RawMessage `json:"entry,omitempty"`       // entry events
	ExpireTime string          `json:"expire_time,omitempty"` // points.expiring: when the bucket expires
	Amount     string          `json:"amount,omitempty"`      // points.expiring: what the bucket holds
	Balance    string          `json:"balance,omitempty"`     // points.expiring: the spendable balance
	Kind       string          `json:"kind,omitempty"`        // points.expiring: the bucket's point kind
}

// NewEventData is the data of user's event id at version.
func NewEventData(id, user string, version int64) EventData {
	return EventData{EventID: id, UserID: user, Version: strconv.FormatInt(version, 10)}
}

// JSON is d compacted, with the entry's text (its metadata is the
// caller's) kept as the API writes it: <, > and & not escaped.
func (d EventData) JSON() (json.RawMessage, error) {
	n := 64 + len(d.EventID) + len(d.UserID) + len(d.Version) + len(d.Entry) + len(d.ExpireTime) + len(d.Amount) + len(d.Balance) + len(d.Kind)
	return d.AppendJSON(make([]byte, 0, n))
}

// AppendJSON appends d.JSON() to b: the bytes encoding/json gave (fields
// in order, those marked omitempty left out when empty, the entry
// compacted), written without its reflection (TestEventDataIsEncodingJSONs).
func (d EventData) AppendJSON(b []byte) ([]byte, error) {
	start := len(b)
	b = append(b, `{"event_id":`...)
	b = appendJSONString(b, d.EventID)
	b = append(b, `,"user_id":`...)
	b = appendJSONString(b, d.UserID)
	b = append(b, `,"version":`...)
	b = appendJSONString(b, d.Version)
	if len(d.Entry) > 0 {
		b = append(b, `,"entry":`...)
		buf := bytes.NewBuffer(b)
		if err := json.Compact(buf, d.Entry); err != nil {
			return b[:start], fmt.Errorf("event data: entry: %w", err)
		}
		b = buf.Bytes()
	}
	for _, f := range [...]struct{ name, value string }{
		{`,"expire_time":`, d.ExpireTime}, {`,"amount":`, d.Amount}, {`,"balance":`, d.Balance}, {`,"kind":`, d.Kind},
	} {
		if f.value != "" {
			b = append(b, f.name...)
			b = appendJSONString(b, f.value)
		}
	}
	return append(b, '}'), nil
}

// appendJSONString writes s as encoding/json does with HTML escaping off
// (as the API's JSON and the bodies always were): plain printable ASCII as
// it is, anything else by encoding/json itself.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			_ = enc.Encode(s) // a string always encodes
			return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// FormatTimestamp writes t in UTC as RFC 3339 with 0, 3, 6 or 9 fractional
// digits: the form protojson gives a google.protobuf.Timestamp, which is
// how the API writes an entry's create_time.
func FormatTimestamp(t time.Time) string {
	return string(AppendTimestamp(make([]byte, 0, len("2006-01-02T15:04:05.000000000Z")), t))
}

// AppendTimestamp appends FormatTimestamp(t) to b.
func AppendTimestamp(b []byte, t time.Time) []byte {
	start := len(b)
	b = t.UTC().AppendFormat(b, "2006-01-02T15:04:05.000000000")
	for _, suffix := range [...]string{"000", "000", ".000"} {
		if n := len(b); n-start >= len(suffix) && string(b[n-len(suffix):]) == suffix {
			b = b[:n-len(suffix)]
		}
	}
	return append(b, 'Z')
}
