package checkpoint

import (
	"context"
	"errors"
	"io/fs"
)

// ClaimUpgrade is Claim for a graph that may restore HEADs another graph
// wrote (a state-compatible upgrade of a cluster-mode job,
// docs/scale-out.md "Upgrades"): when the newest HEAD records another
// graph fingerprint, restores decides: nil claims the unit as Claim does
// (the owner's HEADs record fingerprint from then on), an error refuses
// it, wrapped with the unit and the HEAD, before anything is written. A
// nil restores refuses every other fingerprint, as Claim does. The graph
// a HEAD records is that of the HEAD that named its checkpoint (Writer):
// a claim HEAD another graph wrote without checkpointing since (its
// restore failed) holds no state of that graph.
func ClaimUpgrade(ctx context.Context, ns Namespace, member, fingerprint string, units, retained int, restores func(prev Head) error) (*Owner, Head, error) {
	return claimWith(ctx, ns, member, fingerprint, units, retained, nil, restores)
}

// writerWalk bounds Writer's walk back over claim HEADs (a unit whose
// restore fails claims again at every restart).
const writerWalk = 64

// Writer returns the HEAD that named hd's checkpoint: hd itself unless
// hd is a claim HEAD naming a checkpoint, else the newest earlier HEAD
// that is not a claim, when it names the same checkpoint. A claim copies
// the checkpoint of the HEAD it read, so its fingerprint is the claimer's
// graph, not the graph that wrote the state; what a restore of hd needs
// is the writer's. hd itself when the writer is not found within
// writerWalk HEADs or was deleted (retention): the claim's graph then
// counts, as before.
func (h Heads) Writer(ctx context.Context, hd Head) (Head, error) {
	if !hd.Claim || hd.CheckpointID == 0 {
		return hd, nil
	}
	for k := hd.Seq - 1; k > 0 && k >= hd.Seq-writerWalk; k-- {
		prev, err := h.Read(ctx, k)
		if errors.Is(err, fs.ErrNotExist) {
			return hd, nil
		}
		if err != nil {
			return Head{}, err
		}
		if prev.Claim {
			if prev.CheckpointID != hd.CheckpointID {
				return hd, nil
			}
			continue
		}
		if prev.CheckpointID == hd.CheckpointID {
			return prev, nil
		}
		return hd, nil
	}
	return hd, nil
}
