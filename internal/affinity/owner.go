package affinity

// Owner returns the peer that owns user among peers (base URLs, in any
// order), by rendezvous hashing (highest random weight): each peer weighs
// the user by a hash of the two, and the heaviest owns it. Every instance
// that knows the same peers names the same owner; a peer that leaves gives
// its users to the others, spread evenly, and no other user moves; a peer
// that joins takes its share from every other, and only that. "" when
// there is no peer.
func Owner(user string, peers []string) string {
	var owner string
	var most uint64
	for _, p := range peers {
		w := weight(p, user)
		if owner == "" || w > most || w == most && p < owner {
			owner, most = p, w
		}
	}
	return owner
}

// weight is peer's weight for user: FNV-1a over the peer, a separator and
// the user, then SplitMix64's finalizer, so that users whose ids differ in
// their last character, and peers whose URLs differ in one digit, weigh
// independently. Stable across processes, versions and machines: it is
// what every instance must agree on.
func weight(peer, user string) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := range len(peer) {
		h ^= uint64(peer[i])
		h *= prime
	}
	h *= prime // the separator, a zero byte: ("ab", "c") is not ("a", "bc")
	for i := range len(user) {
		h ^= uint64(user[i])
		h *= prime
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}
