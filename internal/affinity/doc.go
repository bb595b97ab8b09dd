// Package affinity keeps each user's mutations on one ledgerd of a
// deployment, so that its write path commits them in groups instead of
// several processes racing for the user's account item.
//
// Each instance knows its peers (a static list, or a DNS name that resolves
// to every instance) and checks their health; a user's owner is chosen by
// rendezvous hashing of the user id over the live peers, this instance
// included (Owner). A mutation that reaches an instance which does not own
// its user is forwarded to the owner over the Connect API, with the peer
// role's token, once the caller was authenticated and authorized here.
//
// Invariants:
//   - Correctness never depends on routing. Two instances that both believe
//     they own a user (views of the peers that differ, a partition) commit
//     under the write path's conditions, which keep every invariant; they
//     only retry more.
//   - One hop at most: a forwarded call is committed where it lands, never
//     forwarded again (auth.Forwarded).
//   - The owner's answer is the caller's: its code, message and error
//     details pass back unchanged.
//   - An owner that cannot be reached, or does not answer within the
//     forward timeout, is marked down until its health check passes again,
//     and the mutation is committed here instead. That is safe even if the
//     owner applied it after all: request ids are idempotent, so one of the
//     two commits is the other's replay.
//   - Off when no peers are configured: nothing here runs.
package affinity
