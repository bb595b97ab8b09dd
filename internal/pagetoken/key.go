package pagetoken

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strings"

	"github.com/pointledger/pointledger/internal/ledger"
)

// keyPrefix names the format of a token whose position is a key (text)
// rather than a version: the lists of the webhooks table (the webhook
// deliveries) and the budgets (by budget_id), whose rows have no version
// of their own to page by.
const keyPrefix = "k1."

// EncodeKey returns the token of the page after the item at key, for
// scope. The key is in the token as it is (base64url): a list's keys are
// what its items show anyway; the MAC keeps them from being made up.
func (c *Codec) EncodeKey(key string, scope ...string) string {
	b := append([]byte(key), c.keyMAC(key, scope)...)
	return keyPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// DecodeKey returns the key of a token EncodeKey made with this key and
// this scope; any other token is refused as Decode refuses one.
func (c *Codec) DecodeKey(token string, scope ...string) (string, error) {
	rest, ok := strings.CutPrefix(token, keyPrefix)
	if !ok {
		return "", ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidPageToken,
			"page_token is not in a format this service gives (it may be older); start again from the first page")
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(rest)
	if err != nil || len(b) < macSize {
		return "", ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidPageToken,
			"page_token is not one this service gave for these filters")
	}
	key, sum := string(b[:len(b)-macSize]), b[len(b)-macSize:]
	if !hmac.Equal(sum, c.keyMAC(key, scope)) {
		return "", ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidPageToken,
			"page_token is not one this service gave for these filters")
	}
	return key, nil
}

// keyMAC is the MAC of a key token: its own prefix first, so that no
// position of a version token MACs the same.
func (c *Codec) keyMAC(key string, scope []string) []byte {
	mac := hmac.New(sha256.New, c.key)
	mac.Write([]byte(keyPrefix))
	writeScope(mac, scope)
	mac.Write([]byte(key))
	return mac.Sum(nil)
}
