package sink

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kstreamd/kstreamd/internal/kafkaretry"
)

// RecoverConfig configures RecoverTransactions.
type RecoverConfig struct {
	// Name is the sink's name.
	Name string
	// ClientOpts are the job's franz-go options.
	ClientOpts []kgo.Opt
	// Committables are every committable the restored checkpoint holds for
	// the sink (all old subtasks).
	Committables []Committable
	// TransactionalIDPrefix and PoolSize give the sink's transactional ids.
	TransactionalIDPrefix string
	PoolSize              int
	// Subtasks is the number of subtasks whose ids are fenced: the larger of
	// the old and the new parallelism, so ids of subtasks that no longer
	// exist after a downscale are fenced too.
	Subtasks int
	// TransactionTimeout is sent with the fencing InitProducerId requests.
	TransactionTimeout time.Duration
	// IgnoreLost logs a lost committable instead of failing.
	IgnoreLost bool
	// FenceOnly, if not nil, are the only transactional ids fenced, and
	// ongoing transactions are not listed: a cluster-mode unit fences
	// exactly its own ids, never another unit's live transactions under the
	// same prefix (docs/scale-out.md, takeover).
	FenceOnly []string
	// Metrics may be nil.
	Metrics *Metrics
	Logger  *slog.Logger
}

// RecoverTransactions runs before the sink subtasks start, as Flink's
// recoverAndCommit and abort-lingering-transactions do, in this order:
//  1. every restored committable is committed with a raw EndTxn carrying the
//     transactional id, producer id and epoch recorded at pre-commit (a
//     transaction that was already committed commits again harmlessly);
//  2. every transactional id the sink may have used is fenced with
//     InitProducerId, which aborts its open transaction, so read_committed
//     readers are not held back by a previous run's transactions: the ids
//     <prefix>-<subtask>-<slot> of the configured prefix and of every
//     prefix a restored committable was written under (the prefix may have
//     changed since), for every subtask below the larger of Subtasks and
//     the committables' subtasks and every slot below the larger of
//     PoolSize and the committables' slots, plus every other id of those
//     prefixes the brokers list as ongoing.
//
// Each fenced id counts as kstreamd_sink_transactions_total{result="fenced"},
// and each open transaction a fence aborted as {result="aborted"} (an id is
// known to hold one when the brokers listed it as ongoing just before).
//
// Committing first matters: an InitProducerId would abort the very
// transactions the checkpoint must commit. A committable that can no longer
// be committed returns a *LostOutputError unless IgnoreLost.
func RecoverTransactions(ctx context.Context, cfg RecoverConfig) error {
	cs := slices.Clone(cfg.Committables)
	slices.SortFunc(cs, func(a, b Committable) int { return int(a.CheckpointID - b.CheckpointID) })
	for _, c := range cs {
		if c.Records == 0 {
			continue
		}
		already, err := commitRecovered(ctx, cfg.ClientOpts, c)
		var le *LostOutputError
		if errors.As(err, &le) {
			cfg.Metrics.transaction(cfg.Name, "lost")
			if !cfg.IgnoreLost {
				return err
			}
			cfg.Logger.Error("lost output ignored (ignore_lost_transactions)", "transactional_id", c.TransactionalID, "checkpoint_id", c.CheckpointID, "err", le.Err)
			continue
		}
		if err != nil {
			return fmt.Errorf("sink %s: commit restored transaction %s of checkpoint %d: %w", cfg.Name, c.TransactionalID, c.CheckpointID, err)
		}
		if already {
			cfg.Logger.Info("restored transaction was already committed", "transactional_id", c.TransactionalID, "checkpoint_id", c.CheckpointID, "records", c.Records)
			continue
		}
		cfg.Metrics.transaction(cfg.Name, "committed")
		cfg.Logger.Info("committed restored transaction", "transactional_id", c.TransactionalID, "checkpoint_id", c.CheckpointID, "records", c.Records)
	}
	cl, err := kgo.NewClient(cfg.ClientOpts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	if cfg.FenceOnly != nil {
		// Which of the unit's ids hold an open transaction is asked first,
		// so the aborts the fences cause are counted (best effort, as
		// below).
		open, err := ongoingAmong(ctx, cl, cfg.FenceOnly)
		if err != nil {
			cfg.Logger.Warn("could not list ongoing transactions; the aborts of the unit's fences are not counted", "err", err)
		}
		aborted := 0
		for _, id := range cfg.FenceOnly {
			if err := fence(ctx, cl, id, cfg.TransactionTimeout); err != nil {
				return fmt.Errorf("sink %s: fence transactional id %s: %w", cfg.Name, id, err)
			}
			cfg.Metrics.transaction(cfg.Name, "fenced")
			if open[id] {
				aborted++
				cfg.Metrics.transaction(cfg.Name, "aborted")
				cfg.Logger.Info("fenced and aborted an open transaction of the unit's previous owner", "transactional_id", id)
			}
		}
		cfg.Logger.Info("fenced the unit's transactional ids", "sink", cfg.Name, "fenced", len(cfg.FenceOnly), "aborted", aborted)
		return nil
	}
	known := knownIDs(cfg)
	// Which ids hold an open transaction is asked before fencing, so the
	// aborts the fences cause are counted; the list also finds ids outside
	// the known ranges: a larger parallelism or pool size of a run that
	// crashed before its first checkpoint, or one whose checkpoint is not
	// the one restored (ListTransactions, Kafka 3.0+; best effort: a broker
	// that cannot list them leaves them to the transaction timeout, and
	// their aborts uncounted).
	ongoing, err := ongoingTransactions(ctx, cl, known.prefixes)
	if err != nil {
		cfg.Logger.Warn("could not list ongoing transactions; transactions of ids outside the fenced range are left to the transaction timeout",
			"prefixes", known.prefixes, "err", err)
	}
	ids := known.ids()
	inRange := map[string]bool{}
	for _, id := range ids {
		inRange[id] = true
	}
	for _, id := range ongoing {
		if !inRange[id] {
			ids = append(ids, id)
		}
	}
	isOngoing := map[string]bool{}
	for _, id := range ongoing {
		isOngoing[id] = true
	}
	aborted := 0
	for _, id := range ids {
		if err := fence(ctx, cl, id, cfg.TransactionTimeout); err != nil {
			return fmt.Errorf("sink %s: fence transactional id %s: %w", cfg.Name, id, err)
		}
		cfg.Metrics.transaction(cfg.Name, "fenced")
		if isOngoing[id] {
			aborted++
			cfg.Metrics.transaction(cfg.Name, "aborted")
			cfg.Logger.Info("fenced and aborted an open transaction of a previous run", "transactional_id", id, "in_range", inRange[id])
		}
	}
	cfg.Logger.Info("fenced the sink's transactional ids", "sink", cfg.Name, "prefixes", known.prefixes,
		"subtasks", known.subtasks, "pool_size", known.pool, "fenced", len(ids), "aborted", aborted)
	return nil
}

// transactionalIDs are the transactional ids a restore fences: every
// <prefix>-<subtask>-<slot> for each prefix, subtask below subtasks and
// slot below pool.
type transactionalIDs struct {
	prefixes       []string // the configured prefix first, then the committables' others, sorted
	subtasks, pool int
}

// transactionalIDPattern splits a transactional id <prefix>-<subtask>-<slot>.
var transactionalIDPattern = regexp.MustCompile(`^(.*)-([0-9]+)-([0-9]+)$`)

// knownIDs returns the ids every start fences: those of the configured
// prefix and of every prefix the restored committables were written under
// (a changed transactional_id_prefix leaves the old prefix's open
// transaction holding read_committed readers back until its timeout
// otherwise), over the larger of cfg.Subtasks and the committables'
// subtasks, and the larger of cfg.PoolSize and the committables' slots.
func knownIDs(cfg RecoverConfig) transactionalIDs {
	k := transactionalIDs{prefixes: []string{cfg.TransactionalIDPrefix}, subtasks: cfg.Subtasks, pool: cfg.PoolSize}
	var others []string
	for _, c := range cfg.Committables {
		m := transactionalIDPattern.FindStringSubmatch(c.TransactionalID)
		if m == nil {
			continue
		}
		sub, err1 := strconv.Atoi(m[2])
		slot, err2 := strconv.Atoi(m[3])
		if err1 != nil || err2 != nil {
			continue
		}
		k.subtasks, k.pool = max(k.subtasks, sub+1), max(k.pool, slot+1)
		if m[1] != cfg.TransactionalIDPrefix && !slices.Contains(others, m[1]) {
			others = append(others, m[1])
		}
	}
	slices.Sort(others)
	k.prefixes = append(k.prefixes, others...)
	return k
}

// ids lists the ids in prefix, subtask, slot order.
func (k transactionalIDs) ids() []string {
	var out []string
	for _, p := range k.prefixes {
		for sub := 0; sub < k.subtasks; sub++ {
			for slot := 0; slot < k.pool; slot++ {
				out = append(out, TransactionalID(p, sub, slot))
			}
		}
	}
	return out
}

// ongoingTransactions returns the transactional ids <prefix>-<n>-<m> of
// any of prefixes the brokers list as Ongoing, sorted.
func ongoingTransactions(ctx context.Context, cl *kgo.Client, prefixes []string) ([]string, error) {
	quoted := make([]string, len(prefixes))
	for i, p := range prefixes {
		quoted[i] = regexp.QuoteMeta(p)
	}
	re := regexp.MustCompile(`^(` + strings.Join(quoted, "|") + `)-[0-9]+-[0-9]+$`)
	listed, err := kadm.NewClient(cl).ListTransactions(ctx, nil, []string{"Ongoing"})
	var ids []string
	for _, t := range listed.Sorted() {
		if t.State == "Ongoing" && re.MatchString(t.TxnID) {
			ids = append(ids, t.TxnID)
		}
	}
	return ids, err
}

// ongoingAmong returns which of ids the brokers list as holding an
// ongoing transaction (ListTransactions, Kafka 3.0+).
func ongoingAmong(ctx context.Context, cl *kgo.Client, ids []string) (map[string]bool, error) {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	listed, err := kadm.NewClient(cl).ListTransactions(ctx, nil, []string{"Ongoing"})
	out := map[string]bool{}
	for _, t := range listed.Sorted() {
		if t.State == "Ongoing" && want[t.TxnID] {
			out[t.TxnID] = true
		}
	}
	return out, err
}

// CommitRecovered commits a committable whose producer is gone with a raw
// EndTxn request. It retries while the coordinator is busy and returns a
// *LostOutputError when the transaction cannot be committed: the broker
// aborted it. A transaction that was already committed (by an earlier
// restore of the same checkpoint) is success.
func CommitRecovered(ctx context.Context, opts []kgo.Opt, c Committable) error {
	_, err := commitRecovered(ctx, opts, c)
	return err
}

// commitRecovered is CommitRecovered; already reports a transaction that
// was committed before.
//
// Kafka answers an EndTxn(commit) carrying the epoch recorded at
// pre-commit with success while the transaction is open, and also for a
// repeated commit as long as the transactional id was not used since
// (transaction version 1: same epoch, state CompleteCommit; version 2,
// KIP-890: the commit bumped the epoch by one and the request is taken for
// a retry). Once the id moved on (the fencing InitProducerId of an earlier
// restore, a later transaction on the id) the answer is PRODUCER_FENCED,
// and a transaction the coordinator aborted after its timeout is
// PRODUCER_FENCED (version 1) or INVALID_TXN_STATE (version 2 before
// KAFKA-20785) — the same answers for a committed and for a lost
// transaction. The transaction's end marker in the partition of its
// recorded record settles it: COMMIT or ABORT from the same producer id.
func commitRecovered(ctx context.Context, opts []kgo.Opt, c Committable) (already bool, err error) {
	if c.Records == 0 {
		return false, nil
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return false, err
	}
	defer cl.Close()
	err = retryTxn(ctx, func() error {
		req := kmsg.NewPtrEndTxnRequest()
		req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = c.TransactionalID, c.ProducerID, c.Epoch, true
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return classify(c, err)
		}
		return nil
	})
	return settleEnded(ctx, opts, c, err)
}

// settleEnded settles err, the answer to a commit of c: a
// *LostOutputError (classify: the broker says the transaction can no
// longer be committed) is checked against the transaction's end marker
// (transactionOutcome), since the broker gives the same answers for a
// transaction that was committed (by an earlier commit or restore, or by
// a new owner's recovery) as for one it aborted. committed reports a
// COMMIT marker (err is then nil); otherwise the *LostOutputError is
// returned saying why, and any other error as it is.
func settleEnded(ctx context.Context, opts []kgo.Opt, c Committable, err error) (committed bool, _ error) {
	le, ok := errors.AsType[*LostOutputError](err)
	if !ok {
		return false, err
	}
	committed, how := transactionOutcome(ctx, opts, c)
	if committed {
		return true, nil
	}
	le.Err = fmt.Errorf("%w (%s)", le.Err, how)
	return false, le
}

// transactionOutcome reads the partition of c's recorded record, without
// isolation and with control records, from that record to the end marker
// of c's producer id: true for COMMIT. Otherwise it says why not (an
// ABORT marker, or the outcome cannot be read).
func transactionOutcome(ctx context.Context, opts []kgo.Opt, c Committable) (bool, string) {
	if c.Topic == "" {
		return false, "the committable does not locate a record of the transaction, so whether an earlier start committed it is unknown"
	}
	where := fmt.Sprintf("%s[%d] offset %d", c.Topic, c.Partition, c.Offset)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	adm, err := kgo.NewClient(opts...)
	if err != nil {
		return false, err.Error()
	}
	defer adm.Close()
	starts, err := kadm.NewClient(adm).ListStartOffsets(ctx, c.Topic)
	if err == nil {
		err = starts.Error()
	}
	ends, err2 := kadm.NewClient(adm).ListEndOffsets(ctx, c.Topic)
	if err2 == nil {
		err2 = ends.Error()
	}
	if err = errors.Join(err, err2); err != nil {
		return false, fmt.Sprintf("cannot read the outcome from %s: %v", where, err)
	}
	start, ok1 := starts.Lookup(c.Topic, c.Partition)
	end, ok2 := ends.Lookup(c.Topic, c.Partition)
	if !ok1 || !ok2 || c.Offset < start.Offset || c.Offset >= end.Offset {
		return false, fmt.Sprintf("the transaction's record at %s is no longer in the log", where)
	}
	cl, err := kgo.NewClient(append(slices.Clone(opts),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{c.Topic: {c.Partition: kgo.NewOffset().At(c.Offset)}}),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.KeepControlRecords())...)
	if err != nil {
		return false, err.Error()
	}
	defer cl.Close()
	first := true
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return false, fmt.Sprintf("no end marker of producer %d found after %s: %v", c.ProducerID, where, ctx.Err())
		}
		var (
			done    bool
			outcome bool
			why     string
		)
		fs.EachRecord(func(r *kgo.Record) {
			if done {
				return
			}
			if first {
				first = false
				if r.Offset != c.Offset || r.ProducerID != c.ProducerID {
					done, why = true, fmt.Sprintf("the record at %s is not the transaction's (producer %d at offset %d)", where, r.ProducerID, r.Offset)
					return
				}
			}
			if r.Attrs.IsControl() && r.ProducerID == c.ProducerID && len(r.Key) >= 4 {
				// Control record key: version int16, type int16 (0 ABORT, 1 COMMIT).
				switch binary.BigEndian.Uint16(r.Key[2:4]) {
				case 1:
					done, outcome = true, true
				case 0:
					done, why = true, fmt.Sprintf("the broker aborted it: ABORT marker at offset %d after %s", r.Offset, where)
				}
				return
			}
			if r.Offset+1 >= end.Offset {
				done, why = true, fmt.Sprintf("no end marker of producer %d between %s and the end offset %d", c.ProducerID, where, end.Offset)
			}
		})
		if done {
			return outcome, why
		}
	}
}

// fence sends InitProducerId for id: the broker aborts the id's open
// transaction and bumps its epoch.
func fence(ctx context.Context, cl *kgo.Client, id string, timeout time.Duration) error {
	return retryTxn(ctx, func() error {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID = &id
		req.TransactionTimeoutMillis = int32(timeout.Milliseconds())
		req.ProducerID, req.ProducerEpoch = -1, -1
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		return kerr.ErrorForCode(resp.ErrorCode)
	})
}

// retryTxn retries fn while it fails with a transient broker error
// (kafkaretry.IsTransient: coordinator loading or moving, concurrent
// transactions, a broker that cannot be dialled or times out), backing off
// from 50 ms to 1 s, until ctx ends.
func retryTxn(ctx context.Context, fn func() error) error {
	backoff := 50 * time.Millisecond
	for {
		err := fn()
		if err == nil || !kafkaretry.IsTransient(err) || ctx.Err() != nil {
			return err
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		}
		backoff = min(2*backoff, time.Second)
	}
}

// ErrTransactionTimeout is wrapped by CheckTransactionTimeout's error.
var ErrTransactionTimeout = errors.New("sink: transaction timeout does not fit")

// CheckTransactionTimeout reads the brokers' transaction.max.timeout.ms and
// refuses timeout when it exceeds it (the broker would refuse every
// transaction), naming both values.
func CheckTransactionTimeout(ctx context.Context, opts []kgo.Opt, sinkName string, timeout time.Duration) error {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	// Describe each broker by id: the resource "" answers only the
	// cluster-wide dynamic defaults, never a static broker config such as
	// transaction.max.timeout.ms (Kafka; kfake is lenient here).
	adm := kadm.NewClient(cl)
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return fmt.Errorf("sink %s: read the brokers' transaction.max.timeout.ms: %w", sinkName, err)
	}
	rcs, err := adm.DescribeBrokerConfigs(ctx, md.Brokers.NodeIDs()...)
	if err != nil {
		return fmt.Errorf("sink %s: read the brokers' transaction.max.timeout.ms: %w", sinkName, err)
	}
	for _, rc := range rcs {
		for _, c := range rc.Configs {
			if c.Key != "transaction.max.timeout.ms" || c.Value == nil {
				continue
			}
			ms, err := strconv.ParseInt(*c.Value, 10, 64)
			if err != nil {
				continue
			}
			if max := time.Duration(ms) * time.Millisecond; timeout > max {
				return fmt.Errorf("%w: sink %s: transaction_timeout %v exceeds the broker's transaction.max.timeout.ms %v", ErrTransactionTimeout, sinkName, timeout, max)
			}
		}
	}
	return nil
}
