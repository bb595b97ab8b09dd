package dynamo

import (
	"fmt"
	"hash/fnv"
)

// ExpiryShards is how many partitions the index of due users spreads over,
// so that no index partition is hot and sweepers can share them by lease.
const ExpiryShards = 16

// expiryShard is the index partition of a user's next expiry.
func expiryShard(user string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(user))
	return fmt.Sprintf("X#%02d", h.Sum32()%ExpiryShards)
}
