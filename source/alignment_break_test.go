package source

import (
	"errors"
	"io"
	"log/slog"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// pausedParts returns the partitions of "items" franz-go has paused.
func pausedParts(cl *kgo.Client) []int32 {
	ps := cl.PauseFetchPartitions(nil)["items"]
	slices.Sort(ps)
	return ps
}

// TestAlignmentUnavailablePausesKept checks that watermark alignment and
// partition unavailability, which both pause a partition's fetches in
// franz-go, do not undo each other's pause: a partition held by alignment
// that goes unavailable and comes back stays paused (else franz-go fetches
// it again and its held records grow past one fetch while the group's
// least stands still), and a partition unavailable while alignment
// releases it stays paused until it is available again (else it is
// fetched again at once, the busy loop markUnavailable's pause avoids).
func TestAlignmentUnavailablePausesKept(t *testing.T) {
	opts := alignTopic(t, []int{1, 1}, []int64{0, 0}, []int64{1, 1})
	s := New(Config{
		Name: "src", Topic: "items", Partitions: 2, Parallelism: 1,
		Alignment:  WatermarkAlignment{MaxDrift: 10 * time.Millisecond},
		ClientOpts: opts,
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err := s.assign(); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	s.cl = cl
	now := time.Now()
	// Both partitions have records left (end offset 10, position 0);
	// partition 0 runs 1s ahead of partition 1 and has a record held.
	s.wms.assign(0, alignBase+1000, now)
	s.wms.assign(1, alignBase, now)
	clear(s.lookups)
	for p := range int32(2) {
		s.pos[p] = 0
		s.align.hwm[p] = 10
	}
	s.align.held[0] = []*kgo.Record{{Topic: "items", Partition: 0, Offset: 0, Timestamp: time.UnixMilli(alignBase + 1001)}}
	s.align.update(s, now)
	if got := pausedParts(cl); !slices.Equal(got, []int32{0}) {
		t.Fatalf("after alignment held partition 0: paused %v, want [0]", got)
	}

	// Partition 0 goes unavailable and comes back while still held.
	s.markUnavailable(0, errors.New("no leader"))
	s.markAvailable(0)
	if got := pausedParts(cl); !slices.Equal(got, []int32{0}) {
		t.Errorf("held partition 0 back from unavailable: paused %v, want [0] (alignment still holds %d records of it)", got, len(s.align.held[0]))
	}
	s.align.update(s, now)
	if got := pausedParts(cl); !slices.Equal(got, []int32{0}) {
		t.Errorf("after the next update: paused %v, want [0]", got)
	}

	// Partition 1 goes unavailable; partition 0's held record is emitted
	// elsewhere (dropped here) and partition 1 catches up, so alignment
	// releases partition 0 but must not resume the unavailable 1.
	s.markUnavailable(1, errors.New("no leader"))
	if got := pausedParts(cl); !slices.Equal(got, []int32{0, 1}) {
		t.Fatalf("partition 1 unavailable: paused %v, want [0 1]", got)
	}
	s.align.paused[1] = true // as if alignment had paused it before
	delete(s.align.held, 0)
	s.wms.maxTs[1] = alignBase + 1000
	s.align.update(s, now)
	if got := pausedParts(cl); !slices.Equal(got, []int32{1}) {
		t.Errorf("alignment released both, 1 unavailable: paused %v, want [1]", got)
	}
	if got := slices.Sorted(maps.Keys(s.align.paused)); len(got) != 0 {
		t.Errorf("alignment still counts %v paused", got)
	}
	s.markAvailable(1)
	if got := pausedParts(cl); len(got) != 0 {
		t.Errorf("every partition available and released: paused %v, want none", got)
	}
}
