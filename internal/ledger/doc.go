// Package ledger is the domain of pointledger: amounts, entries and their
// types (EntryTypes), the account aggregate with its buckets of expiring
// points, its open holds (checkout) and its pending grants, the decisions (Decide, DecideExpiry: account + mutation + time ->
// entries and the account after, or a refusal), the one fold of entries into
// an account (Account.Apply, Totals, Fold), the one audit of what a store
// keeps of a user (Audit of a Partition), mutations and their errors, and
// the Store every store implements. It imports no transport and no SDK; the
// DynamoDB store lives in package dynamo beside it, an in-memory one in
// package memory, and ledgertest.Contract is what both must pass.
//
// Invariants every store must keep, for each user:
//
//   - Entries are immutable. Entry N has version N; versions run 1, 2, 3, ...
//     without gaps, and the account's version is the number of entries.
//   - The account's balance is the fold of its entries (Fold), and it is never
//     negative: a debit commits only under a condition that the account is
//     the one it was decided on (version, balance, status). That condition,
//     not a prior read, prevents double spending.
//   - The account's buckets and its open holds sum to its balance; nothing is
//     spent or held from a bucket at or past its expire_time. A bucket is
//     points of one kind and expiry (kind.go); a purchase or a hold draws
//     only buckets its merchant and category may spend, lower priority
//     first, then soonest expiry, then kind id; a refund, a capture, a
//     void and a release give back to exactly the buckets drawn; a
//     reversal takes only points of its grant's kind. Entries written
//     before kinds (no kind) are standard. Expired points leave the balance by an
//     EXPIRATION entry, written before the user's next mutation or by the
//     sweeper.
//   - Held is the sum of the open holds, and never more than the balance:
//     every debit, hold or purchase, is checked against what is available
//     (balance less held). A hold resolves exactly once (CAPTURE, or RELEASE
//     by a void or by its expiry, which is written as bucket expiry is), in
//     the same transaction as its entry, under a condition on the state it
//     leaves; a capture never spends more than its hold.
//   - Pending points (a grant with an effective time) are outside the
//     balance, in the account's pending lots, which sum to its pending;
//     exactly at their effective time a MATURATION entry, written as
//     expirations are, puts them in their bucket. A reversal takes from
//     its grant's lot first, then spendable points as a debit; the
//     reversals of a grant never sum to more than the grant.
//   - A request_id is used at most once per user. Its record is written in the
//     same transaction as its entry and keeps a hash of the request, so a retry
//     of the same request returns the original result and writes nothing.
//   - A refused request_id stays refused: a final refusal (Kind.Final) is
//     recorded under it, and the same request again gets that refusal.
//   - The refunds of a purchase never sum to more than the purchase.
//
// And for each budget (budget.go): granted + remaining = total, granted is
// the sum of what the entries that name it take (Entry.BudgetAmount: its
// grants, pending or not, less the reversals and debit adjustments that
// give back to it), and a grant commits only under a condition that the
// budget (its shard) covers it and is open. Its escrow shards
// (Budget.Shards) never shrink and only grow by a write that moves no
// points: a store that spreads a budget over shards adds empty ones (the
// DynamoDB store doubles them, up to MaxBudgetShards, when DynamoDB has
// throttled them BudgetGrowth.Throttles times within its Window), under a
// condition on the count it read, so that two growers end with one count
// and every shard the count names exists; the invariants above hold
// throughout, and BUDGET_EXHAUSTED is decided on all the shards there are.
package ledger
