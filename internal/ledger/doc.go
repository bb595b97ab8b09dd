// Package ledger is the domain of pointledger: amounts, entries, the account
// aggregate, mutations and their errors. It imports no transport and no SDK;
// the DynamoDB write path lives in package dynamo beside it.
//
// Invariants every store must keep, for each user:
//
//   - Entries are immutable. Entry N has version N; versions run 1, 2, 3, ...
//     without gaps, and the account's version is the number of entries.
//   - The account's balance is the fold of its entries (Fold), and it is never
//     negative: a purchase commits only under a condition that the balance
//     covers it, the version is the one it was computed from and the account
//     is active. That condition, not a prior read, prevents double spending.
//   - A request_id is used at most once per user. Its record is written in the
//     same transaction as its entry and keeps a hash of the request, so a retry
//     of the same request returns the original result and writes nothing.
//   - A refused request_id stays refused: a final refusal (Kind.Final) is
//     recorded under it, and the same request again gets that refusal.
//   - The refunds of a purchase never sum to more than the purchase.
package ledger
