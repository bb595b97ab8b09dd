package dispatch

import (
	"encoding/json"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/webhook"
)

// EntryEvent is entryEvent of a dispatcher that encodes entries with
// encode, for the tests of package dispatch_test (which may import api).
func EntryEvent(encode func(ledger.Entry) (json.RawMessage, error), e ledger.Entry) (webhook.Event, error) {
	d := &Dispatcher{o: Options{EncodeEntry: encode}}
	return d.entryEvent(e)
}
