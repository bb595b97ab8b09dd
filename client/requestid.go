package client

import (
	"crypto/rand"

	"github.com/oklog/ulid/v2"
)

// NewRequestID returns a new request_id: a ULID (26 characters, sortable by
// time) with 80 random bits from crypto/rand, so that ids made at once by
// many processes do not collide. Make one per operation, not per attempt.
func NewRequestID() string {
	return ulid.MustNew(ulid.Now(), rand.Reader).String()
}
