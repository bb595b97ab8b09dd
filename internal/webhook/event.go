package webhook

import (
	"encoding/json"
	"time"

	"github.com/pointledger/pointledger/internal/ledger"
)

// Event is what one delivery sends: an entry's event, or a notice.
type Event struct {
	ID      string           // webhook-id: the entry's entry_id, or the notice's id
	Type    ledger.EventType //
	UserID  string           //
	Version int64            // the entry's version; for a notice, the version it was decided at
	Time    time.Time        // the body's timestamp: the entry's create_time, or when the notice was decided
	Data    json.RawMessage  // the body's data object

	// body is the body NewEntryEvent built with Data (Data is inside it),
	// for Body: nil for any other event.
	body []byte
}

// NewEntryEvent is the event of an entry: webhook-id id, data {event_id,
// user_id, version, entry} (EventData.JSON's bytes), its body (Body's
// bytes) built in the same buffer, around the data, so that each of the
// entry's attempts sends it without encoding it again.
func NewEntryEvent(id string, t ledger.EventType, user string, version int64, at time.Time, entry json.RawMessage) (Event, error) {
	b := make([]byte, 0, len(`{"type":"","timestamp":"2006-01-02T15:04:05.000000000Z","data":{"event_id":"","user_id":"","version":"-9223372036854775808","entry":}}`)+
		len(t)+len(id)+len(user)+len(entry))
	b, k := appendBodyHead(b, t, at)
	data := NewEventData(id, user, version)
	data.Entry = entry
	b, err := data.AppendJSON(b)
	if err != nil {
		return Event{}, err
	}
	b = append(b, '}')
	return Event{ID: id, Type: t, UserID: user, Version: version, Time: at, Data: b[k : len(b)-1 : len(b)-1], body: b}, nil
}

// Body is the event's body, Body(ev.Type, ev.Time, ev.Data): the one
// NewEntryEvent built, while the event's Data, Type and Time are still
// those it was built with, else made now.
func (ev Event) Body() ([]byte, error) {
	if k := len(ev.body) - 1 - len(ev.Data); ev.body != nil && len(ev.Data) > 0 && k > 0 && &ev.body[k] == &ev.Data[0] {
		if head, _ := appendBodyHead(make([]byte, 0, 96), ev.Type, ev.Time); string(head) == string(ev.body[:k]) {
			return ev.body, nil
		}
	}
	return Body(ev.Type, ev.Time, ev.Data)
}
