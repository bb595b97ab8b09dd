package pagetoken_test

import (
	"testing"

	"github.com/pointledger/pointledger/internal/ledger"
)

// TestKeyTokens: a key token gives back its key, for its scope and key
// only; a version token is not read as one, nor altered one accepted.
func TestKeyTokens(t *testing.T) {
	t.Parallel()
	c := newCodec(t, 1)
	key := "D#01JEP#user-1\x00V#00000000000000000007\x0001JEVENT"
	token := c.EncodeKey(key, "ListWebhookDeliveries", "ep")
	if got, err := c.DecodeKey(token, "ListWebhookDeliveries", "ep"); err != nil || got != key {
		t.Fatalf("DecodeKey = %q, %v; want the key back", got, err)
	}
	altered := []byte(token)
	altered[len(altered)/2] ^= 1
	for name, bad := range map[string]func() error{
		"other scope": func() error { _, err := c.DecodeKey(token, "ListWebhookDeliveries", "other"); return err },
		"other key":   func() error { _, err := newCodec(t, 2).DecodeKey(token, "ListWebhookDeliveries", "ep"); return err },
		"altered":     func() error { _, err := c.DecodeKey(string(altered), "ListWebhookDeliveries", "ep"); return err },
		"version token": func() error {
			_, err := c.DecodeKey(c.Encode(7, "ListWebhookDeliveries", "ep"), "ListWebhookDeliveries", "ep")
			return err
		},
		"as version": func() error { _, err := c.Decode(token, "ListWebhookDeliveries", "ep"); return err },
		"short":      func() error { _, err := c.DecodeKey("k1.AAAA", "ListWebhookDeliveries", "ep"); return err },
	} {
		if err := bad(); ledger.ReasonOf(err) != ledger.ReasonInvalidPageToken {
			t.Errorf("%s: %v, want %s", name, err, ledger.ReasonInvalidPageToken)
		}
	}
}
