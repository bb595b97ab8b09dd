// Package auth decides who may call ledgerd, and for whom.
//
// Every RPC carries `Authorization: Bearer <token>`. A token resolves to an
// Identity {Role, Subject}:
//
//   - service: a trusted backend; an opaque random secret whose SHA-256 is in
//     the credentials file. May call every LedgerService RPC for any user.
//   - admin: an opaque secret like a service token. The only role allowed on
//     AdminService; on LedgerService it may read (GetBalance, ListEntries,
//     ListHistory) but not move points: an admin moves points with Adjust,
//     which demands a reason.
//   - user: an HS256 JWT signed with a key of the credentials file, with a
//     required `exp` (a number, at most MaxLifetime ahead), issuer and
//     audience; its `sub` is the user id. May read its own balance, entries
//     and history, and purchase for itself; nothing else. Not refund: a
//     refund is the shop's decision (service), else a user could undo a
//     purchase and keep the goods.
//   - support: an opaque secret like an admin token, one per person (its
//     name is the operator): reads what an admin reads, voids holds,
//     freezes and unfreezes, and adjusts by an amount within SupportLimits
//     (per adjustment, per operator per day through Allowances, shared by
//     every instance); the interceptor puts the operator on the metadata
//     of each entry it writes.
//   - peer: an opaque secret like a service token, which the instances of
//     one deployment send each other when one forwards a mutation to the
//     instance that owns its user (package affinity). May call the
//     mutations that queue per user (Grant, Purchase, Refund, Authorize,
//     Capture, Void, ReverseGrant, Adjust) for any user, and is not rate limited: the
//     instance it came through authenticated, authorized and limited the
//     caller. A peer's call is never forwarded again (Forwarded).
//
// Invariants: no secret is compiled in; opaque tokens are compared by hash
// in constant time; a procedure missing from the policy is refused (a path
// that names no procedure never gets here: api.KnownProcedures answers it
// unimplemented, with no token needed); the
// identity is checked twice, before the body is read (HTTP middleware:
// authentication, role per procedure, rate limit) and on the decoded message
// (Connect interceptor: the user id a user token may act for), and the
// interceptor refuses a request that did not pass the middleware.
package auth
