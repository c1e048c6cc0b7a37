package job_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/job"
	"github.com/kstreamd/kstreamd/pipeline"
	"github.com/kstreamd/kstreamd/runtime"
)

// memoStore is where the test sink type memo publishes: a two-phase
// commit over memory. Pre-committed epochs are pending under a key until
// committed; committing is idempotent.
type memoStore struct {
	mu        sync.Mutex
	pending   map[string][]string
	committed map[string]bool
	published []string
	// failCommits makes that many commits by a running sink fail (the job
	// then fails after its checkpoint completed, before it published).
	failCommits int
	// recovered are the committables each Recover got (nil entries are
	// empty epochs), with the old parallelism.
	recovered [][]string
	oldP      []int
}

func (s *memoStore) publish(key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.committed[key] {
		return nil
	}
	recs, ok := s.pending[key]
	if !ok {
		return fmt.Errorf("no pending epoch %s", key)
	}
	s.committed[key] = true
	s.published = append(s.published, recs...)
	return nil
}

func (s *memoStore) snapshot() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.published)
}

// memoCommitter is one memo sink subtask's connector.Committer.
type memoCommitter struct {
	store *memoStore
	name  string
	sub   int
	open  []string
}

func (c *memoCommitter) BeginTransaction(context.Context) error { c.open = nil; return nil }
func (c *memoCommitter) Write(_ context.Context, rec runtime.Record) error {
	c.open = append(c.open, string(rec.Value))
	return nil
}
func (c *memoCommitter) PreCommit(_ context.Context, id int64) ([]byte, error) {
	if len(c.open) == 0 {
		return nil, nil
	}
	key := fmt.Sprintf("%s-%d-%d", c.name, c.sub, id)
	c.store.mu.Lock()
	c.store.pending[key] = c.open
	c.store.mu.Unlock()
	return json.Marshal(key)
}
func (c *memoCommitter) Commit(_ context.Context, _ int64, data []byte) error {
	c.store.mu.Lock()
	fail := c.store.failCommits > 0
	if fail {
		c.store.failCommits--
	}
	c.store.mu.Unlock()
	if fail {
		return errors.New("injected commit failure")
	}
	var key string
	if err := json.Unmarshal(data, &key); err != nil {
		return err
	}
	return c.store.publish(key)
}
func (c *memoCommitter) AbortOpen(context.Context) error { c.open = nil; return nil }
func (c *memoCommitter) Close() error                    { return nil }

// upperFormat is the test format upper: Decode turns a value of letters
// into {"w":"<LETTERS>"} and refuses anything else with reason not_letters;
// Encode prefixes "enc:".
type upperFormat struct{}

func (upperFormat) Decode(_ context.Context, rec *runtime.Record) error {
	for _, c := range string(rec.Value) {
		if c < 'a' || c > 'z' {
			return &runtime.RecordError{Reason: "not_letters", Detail: fmt.Sprintf("%q at offset %d", c, rec.Origin.Offset)}
		}
	}
	rec.Value = fmt.Appendf(nil, `{"w":%q}`, strings.ToUpper(string(rec.Value)))
	rec.Format = runtime.FormatJSON
	return nil
}

func (upperFormat) Encode(_ context.Context, topic string, rec *runtime.Record) error {
	rec.Value = append([]byte("enc:"), rec.Value...)
	return nil
}

// seamConnectors returns the built-in connectors plus the memo sink (over
// store) and the upper format.
func seamConnectors(t *testing.T, store *memoStore) *connector.Registry {
	t.Helper()
	r := job.NewBuiltinConnectors()
	if err := r.RegisterSink(connector.SinkFactory{
		Type: "memo", Doc: "test: memory, two-phase commit", Formats: true,
		Deliveries: []graph.Delivery{graph.DeliveryExactlyOnce},
		Recover: func(ctx context.Context, rc connector.RecoverContext) error {
			var keys []string
			for _, c := range rc.Committables {
				if c == nil {
					keys = append(keys, "")
					continue
				}
				var key string
				if err := json.Unmarshal(c, &key); err != nil {
					return err
				}
				keys = append(keys, key)
				if err := store.publish(key); err != nil {
					return err
				}
			}
			store.mu.Lock()
			store.recovered = append(store.recovered, keys)
			store.oldP = append(store.oldP, rc.OldParallelism)
			store.mu.Unlock()
			return nil
		},
		New: func(ctx connector.SinkContext) (runtime.Operator, error) {
			return connector.NewTwoPhaseCommitSink("memo", ctx.Sink.Name, ctx.Subtask,
				&memoCommitter{store: store, name: ctx.Sink.Name, sub: ctx.Subtask}, ctx.Logger).WithFormat(ctx.Format, ctx.Sink.Topic), nil
		},
	}); err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterFormat(connector.FormatFactory{
		Type: "upper", Doc: "test", Reasons: []string{"not_letters"},
		New: func(connector.FormatContext) (connector.Format, error) { return upperFormat{}, nil },
	}); err != nil {
		t.Fatal(err)
	}
	return r
}

const seamYAML = `
job:
  name: seam
kafka:
  brokers: [localhost:9092]
checkpoints:
  interval: 100ms
  timeout: 1m
sources:
  - name: in
    topic: in
    format: upper
    parallelism: 1
    on_error: dead-letter
    dead_letter_topic: dlq
sinks:
  - name: out
    type: memo
    input: in
    format: upper
    delivery: exactly-once
`

// TestCustomSinkAndFormat: a sink type and a format registered by the
// program run behind the seam exactly as the built-ins do. The format's
// Decode transforms each value at the source ("abc" -> {"w":"ABC"}) and
// its refusal meets on_error with its own reason (the dead letter of
// "d1" carries "not_letters: ..."); its Encode runs at the sink
// ("enc:" prefix). The memo sink is exactly-once: its first commit fails
// after the checkpoint completed, so the job fails with nothing published;
// the next Build hands the checkpoint's committables (the envelope of
// type memo: one, of subtask 0) to the type's Recover, which publishes them, and the job
// goes on: the published output is exactly enc:{"w":"ABC"},
// enc:{"w":"XYZ"}, enc:{"w":"QQ"}, once each.
func TestCustomSinkAndFormat(t *testing.T) {
	store := &memoStore{pending: map[string][]string{}, committed: map[string]bool{}, failCommits: 1}
	reg := seamConnectors(t, store)
	_, opts := newKafka(t, kfake.SeedTopics(1, "in", "dlq"))
	produce := func(values ...string) {
		var recs []produced
		for _, v := range values {
			recs = append(recs, produced{value: v})
		}
		produceAll(t, opts, "in", recs)
	}
	produce("abc", "d1", "xyz")
	cfg, err := pipeline.ParseWith("seam.yaml", []byte(seamYAML), pipeline.Registries{Connectors: reg})
	if err != nil {
		t.Fatal(err)
	}
	g, err := cfg.Plan()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	set := cfg.Settings()
	set.CheckpointDir, set.StateDir, set.StateBackend = filepath.Join(dir, "chk"), filepath.Join(dir, "state"), "hashmap"
	deps := job.Deps{ClientOpts: opts, Connectors: cfg.Connectors()}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	j, err := job.Build(ctx, g, set, deps)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Run(ctx); err == nil || !strings.Contains(err.Error(), "injected commit failure") {
		t.Fatalf("first run: %v, want the injected commit failure", err)
	}
	if got := store.snapshot(); len(got) != 0 {
		t.Fatalf("published before the restore: %q", got)
	}

	j, err = job.Build(ctx, g, set, deps)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`enc:{"w":"ABC"}`, `enc:{"w":"XYZ"}`}
	if got := store.snapshot(); !slices.Equal(got, want) {
		t.Fatalf("published by Recover: %q, want %q", got, want)
	}
	// Recover runs at every start: with nothing at the fresh one, then
	// with the committable of the failed commit.
	if len(store.recovered) != 2 || len(store.recovered[0]) != 0 || store.oldP[0] != 0 ||
		len(store.recovered[1]) != 1 || !strings.HasPrefix(store.recovered[1][0], "out-0-") || store.oldP[1] != 1 {
		t.Fatalf("Recover got %q (old parallelism %v), want nothing, then the one committable of the failed commit", store.recovered, store.oldP)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- j.Run(runCtx) }()
	produce("qq")
	want = append(want, `enc:{"w":"QQ"}`)
	if !testkit.Poll(30*time.Second, func() bool { return len(store.snapshot()) >= len(want) }) {
		t.Fatalf("published %q, want %q", store.snapshot(), want)
	}
	time.Sleep(300 * time.Millisecond) // more checkpoints: nothing more may be published
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := store.snapshot(); !slices.Equal(got, want) {
		t.Fatalf("published %q, want exactly %q", got, want)
	}
	dlq := testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), "dlq", 10*time.Second)
	if len(dlq) != 1 || string(dlq[0].Value) != "d1" {
		t.Fatalf("dead letters %d, want the one record d1", len(dlq))
	}
	var reason string
	for _, h := range dlq[0].Headers {
		if h.Key == "kstreamd.error" {
			reason = string(h.Value)
		}
	}
	if reason != `not_letters: '1' at offset 1` {
		t.Fatalf("dead letter error header %q, want the format's reason and detail", reason)
	}
}
