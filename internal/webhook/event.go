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
}
