package checkpoint

import "context"

// ClaimUpgrade is Claim for a graph that may restore HEADs another graph
// wrote (a state-compatible upgrade of a cluster-mode job,
// docs/scale-out.md "Upgrades"): when the newest HEAD records another
// graph fingerprint, restores decides: nil claims the unit as Claim does
// (the owner's HEADs record fingerprint from then on), an error refuses
// it, wrapped with the unit and the HEAD, before anything is written. A
// nil restores refuses every other fingerprint, as Claim does.
func ClaimUpgrade(ctx context.Context, ns Namespace, member, fingerprint string, units, retained int, restores func(prev Head) error) (*Owner, Head, error) {
	return claimWith(ctx, ns, member, fingerprint, units, retained, nil, restores)
}
