// Package projection builds each user's history from the ledger table's
// DynamoDB stream, and rebuilds it from the ledger itself.
//
// What holds, for each user:
//
//   - History has exactly the ledger's entries, with the same attributes,
//     ordered by version. The state item records the last applied version;
//     history items and the state are written in one transaction guarded by
//     that version, so an entry is applied once however often its record is
//     read (after a crash, a lease takeover, or by two projectors at once).
//   - Versions are applied in order. A record whose version is past the next
//     one does not wait: the gap is filled from the ledger by a consistent
//     Query. A record at or below the state's version is a duplicate.
//   - A purchase's refunded_amount in history is the sum of its refunds
//     applied so far: each refund entry adds to it in the transaction that
//     applies the refund. So it needs no MODIFY record of the stream, and
//     agrees with the ledger once history has caught up.
//   - The stream is read by a stream.Consumer (named "projection") whose
//     handler is the History: a shard by the one projector holding its
//     lease, after its parent shard is finished; the checkpoint moves only
//     after its records are applied. Records the stream no longer keeps are
//     recovered by a catch-up from the ledger (History.CatchUp). Package
//     stream states those invariants; the lease table is its.
//
// History trails the ledger by the projection lag; anything that decides
// money reads the ledger, never the history.
package projection
