// Package pagetoken makes the page tokens of the paged reads (ListEntries,
// ListHistory, ListHolds) and checks the ones clients send back; List
// (page.go) pages any of them around a store's read.
//
// A token is "v1." and then, in unpadded base64url, the position (the last
// version the previous page returned: 8 bytes, big-endian) and an
// HMAC-SHA256 of the prefix, the scope and the position. The scope is what
// the token pages through: the read, the user and the read's filters. It is
// in the MAC but not in the token, so:
//
//   - a token cannot be made or altered without the key;
//   - a token is good only for the read, user and filters it was given for,
//     and shows none of them;
//   - the prefix names the format, so a later format can be told apart, and a
//     token of an unknown format is refused, never misread.
//
// Tokens do not expire: a position stays valid as long as the key does.
//
// A list paged by a table key rather than a version (the webhook
// deliveries) uses key tokens (key.go): "k1.", the key and the MAC, with
// the same rules.
package pagetoken

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash"
	"strings"

	"github.com/pointledger/pointledger/internal/ledger"
)

// prefix names the token format; a change of format gets a new one.
const prefix = "v1."

const (
	positionSize = 8
	macSize      = sha256.Size
)

// MinKeySize is the least number of bytes of a key: HMAC-SHA256 is as strong
// as its key up to the hash's size.
const MinKeySize = 32

// Codec makes and checks page tokens with one key. Every instance of a
// deployment must use the same key, or a page token given by one is refused
// by another.
type Codec struct {
	key []byte
}

// New returns a Codec with key, which has at least MinKeySize bytes.
func New(key []byte) (*Codec, error) {
	if len(key) < MinKeySize {
		return nil, fmt.Errorf("page token key has %d bytes, want at least %d", len(key), MinKeySize)
	}
	return &Codec{key: append([]byte(nil), key...)}, nil
}

// Derived returns a Codec whose key is derived from names every instance of
// a deployment shares (its table names) and a constant of the project, so
// its tokens survive a restart and work on every instance without
// configuration. Anyone who knows the names can derive the key too: it
// keeps out garbage and tokens of other deployments, not a determined
// forger. Production should configure a secret key (New).
func Derived(names ...string) *Codec {
	mac := hmac.New(sha256.New, []byte("pointledger page token key, derived"))
	writeScope(mac, names)
	return &Codec{key: mac.Sum(nil)}
}

// Encode returns the token of the page after version, for scope (what is
// paged: the read, the user, the filters).
func (c *Codec) Encode(version int64, scope ...string) string {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, positionSize+macSize), uint64(version))
	b = append(b, c.mac(b, scope)...)
	return prefix + base64.RawURLEncoding.EncodeToString(b)
}

// Decode returns the version of a token Encode made with this key and this
// scope. Any other token is refused with an error of kind
// ledger.KindInvalid and reason ledger.ReasonInvalidPageToken.
func (c *Codec) Decode(token string, scope ...string) (int64, error) {
	rest, ok := strings.CutPrefix(token, prefix)
	if !ok {
		return 0, ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidPageToken,
			"page_token is not in a format this service gives (it may be older); start again from the first page")
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(rest)
	if err != nil || len(b) != positionSize+macSize || !hmac.Equal(b[positionSize:], c.mac(b[:positionSize], scope)) {
		return 0, ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidPageToken,
			"page_token is not one this service gave for this user and these filters")
	}
	return int64(binary.BigEndian.Uint64(b[:positionSize])), nil
}

// mac is the MAC of a token's position in scope.
func (c *Codec) mac(position []byte, scope []string) []byte {
	mac := hmac.New(sha256.New, c.key)
	mac.Write([]byte(prefix))
	writeScope(mac, scope)
	mac.Write(position)
	return mac.Sum(nil)
}

// writeScope writes the number of names and each name with its length
// first, so that no two scopes write the same bytes ("ab", "c" and "a", "bc"
// differ). w is a hash, whose Write never fails.
func writeScope(w hash.Hash, names []string) {
	w.Write(binary.AppendUvarint(nil, uint64(len(names))))
	for _, s := range names {
		w.Write(binary.AppendUvarint(nil, uint64(len(s))))
		w.Write([]byte(s))
	}
}
