// Package consumerstatus is what a consumer of the ledger's stream reports
// about itself (the projector's status on the operations port, in
// GetProjectionStatus and in the metrics), in a package of its own that
// imports nothing: package stream fills it in, and what reads it (the
// API, history's readers, metrics) needs no SDK for it.
package consumerstatus

import "time"

// Status is what a stream consumer reports about itself.
type Status struct {
	Owner         string        `json:"owner"`
	Shards        []string      `json:"shards"`    // held now
	CaughtUp      bool          `json:"caught_up"` // every held shard's last read found nothing new
	Applied       int64         `json:"entries_applied"`
	NewestApplied time.Time     `json:"newest_applied_entry_time"`
	Lag           time.Duration `json:"lag_ns"` // newest applied entry: applied time minus create time
	LagText       string        `json:"lag"`
	LastPass      time.Time     `json:"last_pass"`
}
