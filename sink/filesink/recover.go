package filesink

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
)

// RecoverConfig configures Recover.
type RecoverConfig struct {
	// Name is the sink's name.
	Name string
	// Storage is the sink's output.
	Storage Storage
	// PartPrefix is the sink's part prefix ("" means "part"): Recover
	// deletes the in-progress and pending parts of this prefix.
	PartPrefix string
	// Committables are every committable the restored checkpoint holds for
	// the sink (all old subtasks); none for a start without a checkpoint.
	Committables []Committable
	// Logger is required.
	Logger *slog.Logger
}

// RecoverResult says what Recover did.
type RecoverResult struct {
	// Published counts the parts Recover published; Already those an
	// earlier start had published.
	Published, Already int
	// Deleted lists the in-progress and pending parts deleted.
	Deleted []string
}

// Recover runs before the sink's subtasks start, as Flink's FileSink
// committer recovery does, in this order:
//  1. every restored committable is published, in checkpoint order (one
//     an earlier start already published counts as Already);
//  2. every in-progress and pending part of the prefix left in the output
//     is deleted: none of them is in the restored checkpoint, so their
//     records come after it and are written again.
//
// A part that is lost (neither pending nor published) returns an error
// wrapping ErrLostPart. For S3Storage the local spool is emptied too.
func Recover(ctx context.Context, cfg RecoverConfig) (RecoverResult, error) {
	var res RecoverResult
	prefix := cfg.PartPrefix
	if prefix == "" {
		prefix = "part"
	}
	cs := slices.Clone(cfg.Committables)
	slices.SortStableFunc(cs, func(a, b Committable) int { return int(a.CheckpointID - b.CheckpointID) })
	for _, c := range cs {
		already, err := cfg.Storage.Publish(ctx, c.Pending, c.Final)
		if err != nil {
			return res, fmt.Errorf("filesink: sink %s: publish restored part of checkpoint %d: %w", cfg.Name, c.CheckpointID, err)
		}
		if already {
			res.Already++
		} else {
			res.Published++
		}
	}
	hidden, err := cfg.Storage.Hidden(ctx, prefix)
	if err != nil {
		return res, fmt.Errorf("filesink: sink %s: %w", cfg.Name, err)
	}
	if err := cfg.Storage.Delete(ctx, hidden...); err != nil {
		return res, fmt.Errorf("filesink: sink %s: delete parts after the checkpoint: %w", cfg.Name, err)
	}
	res.Deleted = hidden
	if s3, ok := cfg.Storage.(*S3Storage); ok {
		if err := s3.CleanSpool(prefix); err != nil {
			return res, fmt.Errorf("filesink: sink %s: clean spool: %w", cfg.Name, err)
		}
	}
	cfg.Logger.Info("file sink recovered", "sink", cfg.Name, "storage", cfg.Storage.String(),
		"published", res.Published, "already_published", res.Already, "deleted", len(hidden))
	return res, nil
}
