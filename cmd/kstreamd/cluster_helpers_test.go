package main

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/checkpoint/s3store"
	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/sink"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// The helpers of the cluster-mode tests (docs/scale-out.md): the broker in
// a process of its own (this test binary re-executed), cluster configs,
// daemons of the built binary, who holds which unit, and the oracle every
// cluster test checks.

// ---- The broker in its own process ----

// testBrokerEnv, when set in the environment of this test binary, makes
// TestMain run a kfake broker instead of the tests: "<port>;<topic>:<n>,..."
// (topics seeded with n partitions). The broker prints one line
// "init_producer_id <transactional id>" per InitProducerId request it
// receives, and runs until SIGTERM.
const testBrokerEnv = "KSTREAMD_TEST_BROKER"

// runTestBroker is the broker process of testBrokerEnv; it returns the exit
// status.
func runTestBroker(spec string) int {
	port, topics, _ := strings.Cut(spec, ";")
	portN, err := strconv.Atoi(port)
	if err != nil {
		fmt.Fprintln(os.Stderr, "test broker: port:", err)
		return 2
	}
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.Ports(portN)}
	for _, tp := range strings.Split(topics, ",") {
		if name, n, ok := strings.Cut(tp, ":"); ok {
			parts, err := strconv.Atoi(n)
			if err != nil {
				fmt.Fprintln(os.Stderr, "test broker: topic", tp, err)
				return 2
			}
			opts = append(opts, kfake.SeedTopics(int32(parts), name))
		}
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "test broker:", err)
		return 1
	}
	out := make(chan string, 1024)
	c.ControlKey(int16(kmsg.InitProducerID), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if r := req.(*kmsg.InitProducerIDRequest); r.TransactionalID != nil {
			out <- *r.TransactionalID
		}
		return nil, nil, false
	})
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	fmt.Println("listening", c.ListenAddrs()[0])
	for {
		select {
		case id := <-out:
			fmt.Println("init_producer_id", id)
		case <-stop:
			c.Close()
			return 0
		}
	}
}

// testBroker is a kfake broker in a child process (runTestBroker).
type testBroker struct {
	addr string
	cmd  *exec.Cmd
	out  *testkit.SyncBuffer
	done chan struct{}
}

// startTestBroker starts the broker process with topics (name: partition
// count) and waits until it accepts connections; it is stopped at cleanup.
func startTestBroker(t *testing.T, topics map[string]int) *testBroker {
	t.Helper()
	addr := testkit.FreeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	var spec []string
	for name, n := range topics {
		spec = append(spec, fmt.Sprintf("%s:%d", name, n))
	}
	b := &testBroker{addr: addr, out: &testkit.SyncBuffer{}, done: make(chan struct{})}
	b.cmd = exec.Command(os.Args[0], "-test.run=^$")
	b.cmd.Env = append(os.Environ(), testBrokerEnv+"="+port+";"+strings.Join(spec, ","))
	b.cmd.Stdout, b.cmd.Stderr = b.out, b.out
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = b.cmd.Wait(); close(b.done) }()
	t.Cleanup(func() {
		_ = b.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-b.done:
		case <-time.After(15 * time.Second):
			_ = b.cmd.Process.Kill()
			<-b.done
		}
	})
	if !testkit.Poll(20*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	}) {
		t.Fatalf("the test broker did not listen on %s within 20s:\n%s", addr, b.out.String())
	}
	return b
}

// inits returns how many InitProducerId requests the broker received, by
// transactional id.
func (b *testBroker) inits() map[string]int {
	m := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(b.out.String()))
	for sc.Scan() {
		if id, ok := strings.CutPrefix(sc.Text(), "init_producer_id "); ok {
			m[id]++
		}
	}
	return m
}

// ---- Cluster configs and daemons ----

// clusterJob describes the cluster-mode config of a test: by default the
// two-stage keyed count clicks -hash(user)-> per_user -> counts.
type clusterJob struct {
	// Units per stage; Session the group session timeout (default 6s).
	Units   int
	Session time.Duration
	// Key is per_user's key_by (default user); a daemon with another key
	// runs another graph.
	Key string
	// TxnTimeout is the sink's transaction_timeout (default 2m).
	TxnTimeout string
	// Pipeline, if not empty, replaces the sources/operators/sinks.
	Pipeline string
	// Output is the output topic of Pipeline (default counts).
	Output string
	// Retained is checkpoints.retained (default 3): a test that must see
	// every HEAD and file a daemon ever wrote sets it above the number of
	// checkpoints of the test, so that no owner deletes any.
	Retained int
	// Store is cluster.store.kind: "filesystem" (default; a directory of
	// the test) or "s3" (an S3 server the test starts, bucket chk, prefix
	// team/; the daemons get its credentials in their environment).
	Store string
}

// config returns the YAML of j for member, its files under dir, the
// cluster.store section store (its lines, indented by 4), the broker at
// broker and /metrics at metrics.
func (j clusterJob) config(dir, store, broker, metrics, member string) string {
	session := j.Session
	if session == 0 {
		session = 6 * time.Second
	}
	key := j.Key
	if key == "" {
		key = "user"
	}
	txn := j.TxnTimeout
	if txn == "" {
		txn = "2m"
	}
	retained := j.Retained
	if retained == 0 {
		retained = 3
	}
	pipe := j.Pipeline
	if pipe == "" {
		pipe = fmt.Sprintf(`sources:
  - name: clicks
    topic: clicks
operators:
  - name: per_user
    type: keyed_count
    input: clicks
    key_by: %s
sinks:
  - name: counts
    input: per_user
    topic: counts
    delivery: exactly-once
    transaction_timeout: %s
`, key, txn)
	}
	return fmt.Sprintf(`job:
  name: clicks
  max_parallelism: 24
data_dir: %s
kafka:
  brokers: [%s]
metrics:
  address: %s
log:
  format: json
checkpoints:
  interval: 200ms
  timeout: 10s
  retained: %d
state:
  backend: hashmap
cluster:
  enabled: true
  member_id: %s
  units: %d
  session_timeout: %s
  rebalance_timeout: 20s
  revoke_timeout: 5s
  takeover_timeout: 10s
  purge_repartitions: false # the oracle reads the whole repartition topic
  store:
%s
`, dir, broker, metrics, retained, member, j.Units, session, store) + pipe
}

// outTopic is the job's output topic: counts, or clusterJob.Output.
func (c *cluster) outTopic() string { return cmp.Or(c.job.Output, "counts") }

// cluster is the daemons of one cluster-mode job on one broker and store.
type cluster struct {
	t     *testing.T
	job   clusterJob
	root  string
	store string // the filesystem store's directory (clusterJob.Store filesystem)
	// chk is the units' store (filesystem or S3), storeYAML the
	// cluster.store section of the configs and env the daemons'
	// environment additions (S3 credentials).
	chk       checkpoint.Store
	storeYAML string
	env       []string
	s3        string // the S3 server's endpoint (clusterJob.Store s3)
	empties   int    // the empty S3 stores emptyStoreYAML named
	broker    string
	procs     map[string]*proc // the current process of each member
	killed    map[*proc]bool   // the processes the test killed
	old       []*proc          // every process started, killed or not
}

func newCluster(t *testing.T, job clusterJob, broker string) *cluster {
	root := t.TempDir()
	c := &cluster{t: t, job: job, root: root, store: filepath.Join(root, "store"), broker: broker, procs: map[string]*proc{}, killed: map[*proc]bool{}}
	c.chk, c.storeYAML = checkpoint.FileStore{Root: c.store}, "    dir: "+c.store
	switch job.Store {
	case "", "filesystem":
	case "s3":
		endpoint := testkit.S3Server(t, "chk", true)
		s, err := s3store.New(s3store.Config{Endpoint: endpoint, Bucket: "chk", Prefix: "team/", Region: "us-east-1",
			PathStyle: true, AccessKey: testkit.S3AccessKey, SecretKey: testkit.S3SecretKey})
		if err != nil {
			t.Fatal(err)
		}
		c.chk, c.s3 = s, endpoint
		c.storeYAML = c.s3YAML("team/")
		c.env = []string{"AWS_ACCESS_KEY_ID=" + testkit.S3AccessKey, "AWS_SECRET_ACCESS_KEY=" + testkit.S3SecretKey}
	default:
		t.Fatalf("clusterJob.Store %q: want filesystem or s3", job.Store)
	}
	return c
}

// s3YAML is the cluster.store section of the bucket chk of the cluster's
// S3 server under prefix.
func (c *cluster) s3YAML(prefix string) string {
	return fmt.Sprintf("    kind: s3\n    s3:\n      endpoint: %s\n      bucket: chk\n      prefix: %s\n      tls: false", c.s3, prefix)
}

// emptyStoreYAML returns the cluster.store section of a store of the
// cluster's kind that holds nothing: a new directory, or a new prefix of
// the cluster's S3 bucket.
func (c *cluster) emptyStoreYAML() string {
	if c.s3 != "" {
		c.empties++
		return c.s3YAML(fmt.Sprintf("empty-%d/", c.empties))
	}
	return "    dir: " + c.t.TempDir()
}

// start starts (or restarts) the daemon of member.
func (c *cluster) start(member string) *proc {
	c.t.Helper()
	dir := filepath.Join(c.root, member)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.t.Fatal(err)
	}
	addr := testkit.FreeAddr(c.t)
	p := startProcEnv(c.t, dir, c.job.config(dir, c.storeYAML, c.broker, addr, member), c.broker, addr, c.env)
	c.procs[member] = p
	c.old = append(c.old, p)
	return p
}

// kill kills member's daemon with -9.
func (c *cluster) kill(member string) {
	c.t.Helper()
	p := c.procs[member]
	p.kill(c.t)
	c.killed[p] = true
}

// stopped records that the test stopped p (it must not count as a daemon
// that exited by itself, nor hold units).
func (c *cluster) stopped(p *proc) { c.killed[p] = true }

// logs returns every log of every process started, for failure messages.
func (c *cluster) logs() string {
	var b strings.Builder
	for m, p := range c.procs {
		fmt.Fprintf(&b, "---- %s:\n%s\n", m, p.out.String())
	}
	return b.String()
}

// stages is the number of stages of the job (2 for the keyed count).
const clusterStages = 2

// owners returns the owner the newest HEAD of every unit names
// ("<stage>/<unit>" -> member), "" for a unit without a HEAD.
func (c *cluster) owners() map[string]string {
	c.t.Helper()
	out := map[string]string{}
	for s := range clusterStages {
		for u := range c.job.Units {
			h, err := checkpoint.Heads{Store: c.chk, Prefix: checkpoint.UnitPrefix("clicks", s, u)}.Latest(context.Background())
			if err != nil {
				c.t.Fatal(err)
			}
			out[fmt.Sprintf("%d/%d", s, u)] = h.Owner
		}
	}
	return out
}

// logLine is one JSON log line of a daemon.
type logLine struct {
	Msg          string `json:"msg"`
	Stage        *int   `json:"stage"`
	Unit         *int   `json:"unit"`
	RestoredFrom string `json:"restored_from"`
}

// logLines returns the JSON log lines of p whose msg is msg.
func logLines(p *proc, msg string) []logLine {
	var out []logLine
	sc := bufio.NewScanner(strings.NewReader(p.out.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l logLine
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == msg {
			out = append(out, l)
		}
	}
	return out
}

// running returns the units p runs now ("<stage>/<unit>"): started ("unit
// running") and not stopped since ("unit stopped", "unit taken over").
func running(p *proc) map[string]bool {
	out := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(p.out.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l logLine
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.Stage == nil || l.Unit == nil {
			continue
		}
		u := fmt.Sprintf("%d/%d", *l.Stage, *l.Unit)
		switch {
		case l.Msg == "unit running":
			out[u] = true
		case l.Msg == "unit stopped" || strings.HasPrefix(l.Msg, "unit taken over"):
			delete(out, u)
		}
	}
	return out
}

// held returns, for every live member, the units both its log and the
// HEADs say it holds, and whether every unit is held by exactly one live
// member.
func (c *cluster) held() (map[string][]string, bool) {
	c.t.Helper()
	owners := c.owners()
	by := map[string][]string{}
	n := map[string]int{}
	for m, p := range c.procs {
		if c.killed[p] || p.exited() {
			continue
		}
		for u := range running(p) {
			if owners[u] == m {
				by[m] = append(by[m], u)
				n[u]++
			}
		}
	}
	for s := range clusterStages {
		for u := range c.job.Units {
			if n[fmt.Sprintf("%d/%d", s, u)] != 1 {
				return by, false
			}
		}
	}
	return by, true
}

// signal sends s to member's daemon.
func (c *cluster) signal(member string, s syscall.Signal) {
	c.t.Helper()
	if err := c.procs[member].cmd.Process.Signal(s); err != nil {
		c.t.Fatalf("%s: %v: %v", member, s, err)
	}
}

// namespace returns the key prefix of unit's namespace ("<stage>/<unit>")
// in the units' store: checkpoint.UnitPrefix of the job clicks.
func (c *cluster) namespace(unit string) string {
	stage, index, _ := strings.Cut(unit, "/")
	s, _ := strconv.Atoi(stage)
	u, _ := strconv.Atoi(index)
	return checkpoint.UnitPrefix("clicks", s, u)
}

// files returns every object of unit's namespace in the units' store
// (filesystem or S3: checkpoint.Store.List, which leaves out the
// temporary files of a create in flight), by its key relative to the
// namespace, with the SHA-256 of its content.
func (c *cluster) files(unit string) map[string]string {
	c.t.Helper()
	ctx := context.Background()
	ns := c.namespace(unit)
	keys, err := c.chk.List(ctx, ns)
	if err != nil {
		c.t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		b, err := c.chk.Read(ctx, k)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted since the listing (the owner's retention)
		}
		if err != nil {
			c.t.Fatalf("unit %s: %s: %v", unit, k, err)
		}
		out[strings.TrimPrefix(k, ns)] = fmt.Sprintf("%x", sha256.Sum256(b))
	}
	return out
}

// heads returns every HEAD of unit's chain in the units' store, HEAD-1
// first; it fails the test unless the chain is dense from HEAD-1 (the job
// must retain every HEAD: clusterJob.Retained).
func (c *cluster) heads(unit string) []checkpoint.Head {
	c.t.Helper()
	ctx := context.Background()
	chain := checkpoint.Heads{Store: c.chk, Prefix: c.namespace(unit)}
	// The newest HEAD first, then every HEAD up to it: the owner may
	// create more meanwhile, but none of HEAD-1..newest may be missing.
	last, err := chain.Latest(ctx)
	if err != nil {
		c.t.Fatalf("unit %s: %v", unit, err)
	}
	var out []checkpoint.Head
	for k := int64(1); k <= last.Seq; k++ {
		h, err := chain.Read(ctx, k)
		if err != nil {
			c.t.Fatalf("unit %s: the chain up to the newest %+v: HEAD-%d: %v", unit, last, k, err)
		}
		out = append(out, h)
	}
	return out
}

// checkChains checks every unit's HEAD chain: each HEAD that is not a
// takeover claim was written by the owner of the HEAD before it (an owner
// whose unit was taken over never writes another HEAD of it), and every
// claim names the checkpoint of the HEAD before it. Each checkpoint HEAD
// names the claim it was written under (a claim HEAD of its owner), and
// the checkpoint's owner marker names that claim and owner: chk-<n>/_claim
// (HEAD checkpoint_claim) or, for a checkpoint whose only object is its
// _metadata, the _metadata's claim (HEAD metadata_claim) (the job retains
// every checkpoint: clusterJob.Retained).
func (c *cluster) checkChains() {
	c.t.Helper()
	ctx := context.Background()
	for s := range clusterStages {
		for u := range c.job.Units {
			unit := fmt.Sprintf("%d/%d", s, u)
			hs := c.heads(unit)
			for i := 1; i < len(hs); i++ {
				prev, h := hs[i-1], hs[i]
				switch {
				case !h.Claim && h.Owner != prev.Owner:
					c.t.Errorf("unit %s: HEAD-%d is a checkpoint of %s, but HEAD-%d is %s's: a zombie committed", unit, h.Seq, h.Owner, prev.Seq, prev.Owner)
				case h.Claim && (h.CheckpointID != prev.CheckpointID || h.CheckpointClaim != prev.CheckpointClaim || h.MetadataClaim != prev.MetadataClaim):
					c.t.Errorf("unit %s: claim HEAD-%d names checkpoint %d of claim %d/%d, HEAD-%d names %d of claim %d/%d", unit, h.Seq, h.CheckpointID, h.CheckpointClaim, h.MetadataClaim, prev.Seq, prev.CheckpointID, prev.CheckpointClaim, prev.MetadataClaim)
				}
			}
			for _, h := range hs {
				if h.Claim || h.CheckpointID == 0 {
					continue
				}
				k := h.CheckpointClaim
				if h.MetadataClaim != 0 {
					k = h.MetadataClaim
				}
				if (h.CheckpointClaim == 0) == (h.MetadataClaim == 0) || k < 1 || k >= h.Seq || !hs[k-1].Claim || hs[k-1].Owner != h.Owner {
					c.t.Errorf("unit %s: HEAD-%d of %s names claim HEAD-%d/%d, not one of its owner's claims", unit, h.Seq, h.Owner, h.CheckpointClaim, h.MetadataClaim)
					continue
				}
				want := fmt.Sprintf(`{"claim":%d,"owner":%q}`, k, h.Owner)
				if h.MetadataClaim != 0 {
					b, err := c.chk.Read(ctx, fmt.Sprintf("%schk-%d/%s", c.namespace(unit), h.CheckpointID, checkpoint.MetadataFile))
					var m checkpoint.Metadata
					if err == nil {
						err = json.Unmarshal(b, &m)
					}
					var got []byte
					if err == nil && m.Claim != nil {
						got, _ = json.Marshal(m.Claim)
					}
					if err != nil || string(got) != want {
						c.t.Errorf("unit %s: chk-%d (HEAD-%d) has a _metadata naming the claim %s (%v), want %s", unit, h.CheckpointID, h.Seq, got, err, want)
					}
					continue
				}
				b, err := c.chk.Read(ctx, fmt.Sprintf("%schk-%d/%s", c.namespace(unit), h.CheckpointID, checkpoint.ClaimFile))
				if err != nil || string(b) != want {
					c.t.Errorf("unit %s: chk-%d (HEAD-%d) has the owner marker %s (%v), want %s", unit, h.CheckpointID, h.Seq, b, err, want)
				}
			}
		}
	}
}

// ---- The keyed count's input and the oracle ----

// clickRecord is input record i: user u<i%users>, id i/2 (every id twice,
// for a dedup keyed by id).
func clickRecord(i, users int) *kgo.Record {
	return &kgo.Record{Topic: "clicks", Key: fmt.Appendf(nil, "%d", i), Value: fmt.Appendf(nil, `{"user":"u%d","i":%d,"id":%d}`, i%users, i, i/2)}
}

// committedCounts reads the counts topic read_committed.
func committedCounts(t *testing.T, broker string) []*kgo.Record {
	return testkit.ReadTopicWith(t, []kgo.Opt{kgo.SeedBrokers(broker)}, kgo.ReadCommitted(), "counts", 30*time.Second)
}

// checkOracle checks what every cluster test of the keyed count asserts
// once the input records 0..users*perUser-1 are processed: the
// read_committed output holds, per key, exactly the counts 1..perUser in
// order (no pair twice), users*perUser records in all; and checkExchange.
func (c *cluster) checkOracle(users, perUser int) {
	c.t.Helper()
	checkExactCounts(c.t, committedCounts(c.t, c.broker), users, perUser)
	c.checkExchange(users*perUser, "i")
}

// checkDedupOracle is checkOracle of the dedup keyed by id: the
// read_committed output holds each id of the input records 0..total-1
// exactly once; and checkExchange.
func (c *cluster) checkDedupOracle(total int) {
	t := c.t
	t.Helper()
	out := committedCounts(t, c.broker)
	seen := map[int]int{}
	for _, r := range out {
		var v struct {
			ID int `json:"id"`
		}
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatalf("output record %s: %v", r.Value, err)
		}
		seen[v.ID]++
	}
	for id := range total / 2 {
		if seen[id] != 1 {
			t.Errorf("id %d is in the output %d times, want once", id, seen[id])
		}
	}
	if len(out) != total/2 {
		t.Errorf("the output holds %d records, want %d", len(out), total/2)
	}
	c.checkExchange(total, "i")
}

// checkExchange checks, once the input records 0..total-1 (numbered by
// their JSON field field) are processed: the repartition topic holds each
// input record once, in the partition of its key group's unit; and
// checkSettled on the output and the repartition topic.
func (c *cluster) checkExchange(total int, field string) {
	t := c.t
	t.Helper()
	opts := []kgo.Opt{kgo.SeedBrokers(c.broker)}
	rep := testkit.WithoutMarkers(testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), "clicks-1-repartition", 30*time.Second))
	seen := map[int]int{}
	for _, r := range rep {
		var v map[string]any
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatalf("repartition record %s: %v", r.Value, err)
		}
		n, _ := v[field].(float64)
		seen[int(n)]++
		if want := keygroup.OperatorIndex(keygroup.Assign(r.Key, 24), 24, c.job.Units); int(r.Partition) != want {
			t.Errorf("repartition record %s in partition %d, want %d", r.Value, r.Partition, want)
		}
	}
	for i := range total {
		if seen[i] != 1 {
			t.Errorf("input record %d is in the repartition topic %d times, want once", i, seen[i])
		}
	}
	if len(rep) != total {
		t.Errorf("repartition topic holds %d records, want %d", len(rep), total)
	}
	c.checkSettled(c.outTopic(), "clicks-1-repartition")
}

// checkSettled checks that no transaction is left open on topics (their
// last stable offsets reach their high watermarks), that no daemon lost
// output and that no daemon the test did not kill exited.
func (c *cluster) checkSettled(topics ...string) {
	t := c.t
	t.Helper()
	cl := newClient(t, c.broker)
	adm := kadm.NewClient(cl)
	var lso, hwm kadm.ListedOffsets
	if !testkit.Poll(time.Minute, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err1, err2 error
		lso, err1 = adm.ListCommittedOffsets(ctx, topics...)
		hwm, err2 = adm.ListEndOffsets(ctx, topics...)
		if err1 != nil || err2 != nil || lso.Error() != nil || hwm.Error() != nil {
			return false
		}
		ok := true
		hwm.Each(func(o kadm.ListedOffset) {
			if l, _ := lso.Lookup(o.Topic, o.Partition); l.Offset != o.Offset {
				ok = false
			}
		})
		return ok
	}) {
		t.Errorf("a transaction stays open: last stable offsets %v, high watermarks %v", lso, hwm)
	}
	for _, p := range c.old {
		if strings.Contains(p.out.String(), "lost output") {
			t.Errorf("a daemon lost output:\n%s", p.out.String())
		}
		if !c.killed[p] && p.exited() {
			t.Errorf("a daemon the test did not kill exited (%v):\n%s", p.cmd.ProcessState, p.out.String())
		}
	}
}

// unitLogs counts, per unit ("<stage>/<unit>"), the lines of p's log whose
// msg is msg.
func unitLogs(p *proc, msg string) map[string]int {
	out := map[string]int{}
	for _, l := range logLines(p, msg) {
		if l.Stage != nil && l.Unit != nil {
			out[fmt.Sprintf("%d/%d", *l.Stage, *l.Unit)]++
		}
	}
	return out
}

// unitTxnIDs returns the transactional ids of unit ("<stage>/<unit>") of
// the keyed count, one per slot of the sink's pool (the default for the
// default checkpoints.tolerable_failures 3, sink.PoolSizeFor(3)):
// the repartition sink's of a stage-0 unit, the counts sink's of a stage-1
// unit.
func unitTxnIDs(unit string) []string {
	stage, index, _ := strings.Cut(unit, "/")
	prefix := "kstreamd-clicks-counts-1-" + index + "-"
	if stage == "0" {
		prefix = "kstreamd-clicks-repartition.1-0-" + index + "-"
	}
	var out []string
	for slot := range sink.PoolSizeFor(3) {
		out = append(out, prefix+strconv.Itoa(slot))
	}
	return out
}

// fenced returns the fewest InitProducerId requests any transactional id
// of unit got between the broker counts before and after: a unit's start
// initialises every id twice, once by its recovery's fence and once by its
// sink's producer (sink.KafkaTxnCommitter), and a running unit none. A
// moved unit's ids were fenced when it is at least 1; a unit that stayed
// was started again (a fence) when it is at least 2 (one alone can be the
// producers' half of the start a snapshot fell into).
func fenced(unit string, before, after map[string]int) int {
	least := -1
	for _, id := range unitTxnIDs(unit) {
		if n := after[id] - before[id]; least < 0 || n < least {
			least = n
		}
	}
	return least
}
