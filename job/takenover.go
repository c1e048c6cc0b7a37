package job

import (
	"errors"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/sink"
)

// takenOver reports whether a unit's failure err says another claim took
// the unit over: its checkpoint found that claim's HEAD
// (checkpoint.ErrHeadExists), or its sink's commit found the transaction
// committed by a newer producer of the id (sink.ErrFenced: in cluster mode
// only a new claim's recovery initialises a unit's transactional ids,
// after committing the restored committables). Either way the unit stops
// and is claimed again only once the group confirms it is still assigned
// here (a zombie must not claim it back), and nothing is reported lost.
func takenOver(err error) bool {
	return errors.Is(err, checkpoint.ErrHeadExists) || errors.Is(err, sink.ErrFenced)
}
