package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

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
	if !json.Valid(data) || !bytes.HasPrefix(bytes.TrimSpace(data), []byte("{")) {
		return nil, fmt.Errorf("event body: data is not a JSON object")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	// The entry's metadata is the caller's text: keep <, > and & as they
	// are, as the API's JSON does.
	enc.SetEscapeHTML(false)
	err := enc.Encode(struct {
		Type      ledger.EventType `json:"type"`
		Timestamp string           `json:"timestamp"`
		Data      json.RawMessage  `json:"data"`
	}{t, FormatTimestamp(ts), data})
	if err != nil {
		return nil, fmt.Errorf("event body: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
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
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(d); err != nil {
		return nil, fmt.Errorf("event data: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// FormatTimestamp writes t in UTC as RFC 3339 with 0, 3, 6 or 9 fractional
// digits: the form protojson gives a google.protobuf.Timestamp, which is
// how the API writes an entry's create_time.
func FormatTimestamp(t time.Time) string {
	s := t.UTC().Format("2006-01-02T15:04:05.000000000")
	s = strings.TrimSuffix(s, "000")
	s = strings.TrimSuffix(s, "000")
	s = strings.TrimSuffix(s, ".000")
	return s + "Z"
}
