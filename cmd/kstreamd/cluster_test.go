package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/checkpoint/s3store"
	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// clusterConfig is a two-stage keyed count (clicks -hash(key)-> per_user)
// in cluster mode with 4 units per stage, member id member, keyed by key
// (the daemon with another key runs another graph).
func clusterConfig(dir, store, broker, metrics, member, key string) string {
	return clusterConfigWith(dir, "    dir: "+store, broker, metrics, member, key)
}

// clusterConfigWith is clusterConfig with store the lines of the
// cluster.store section (indented by 4).
func clusterConfigWith(dir, store, broker, metrics, member, key string) string {
	return fmt.Sprintf(`job:
  name: clicks
  max_parallelism: 16
data_dir: %s
kafka:
  brokers: [%s]
metrics:
  address: %s
checkpoints:
  interval: 200ms
  timeout: 10s
state:
  backend: hashmap
cluster:
  enabled: true
  member_id: %s
  units: 4
  session_timeout: 6s
  rebalance_timeout: 20s
  revoke_timeout: 5s
  takeover_timeout: 10s
  store:
%s
sources:
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
    transaction_timeout: 2m
`, dir, broker, metrics, member, store, key)
}

// unitOwners returns the owner named by the newest HEAD of every unit of
// the clicks job in the filesystem store in directory store, "" for a
// unit without a HEAD.
func unitOwners(t *testing.T, store string) map[string]string {
	t.Helper()
	return unitOwnersIn(t, checkpoint.FileStore{Root: store})
}

// unitOwnersIn is unitOwners of any store.
func unitOwnersIn(t *testing.T, store checkpoint.Store) map[string]string {
	t.Helper()
	out := map[string]string{}
	for s := range 2 {
		for u := range 4 {
			h, err := checkpoint.Heads{Store: store, Prefix: checkpoint.UnitPrefix("clicks", s, u)}.Latest(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			out[fmt.Sprintf("%d/%d", s, u)] = h.Owner
		}
	}
	return out
}

// TestClusterTakeover is issue 13's multi-daemon acceptance test: two
// daemons (processes of the built binary) run the two stages of a keyed
// count as 8 units on one broker, with exactly-once; a third daemon with
// another graph joins the group and gets no units; one of the two is
// killed with -9 while records flow and the other takes its units over
// (claims the next HEAD of each, commits the restored transactions, fences
// those units' transactional ids and no other). The read_committed output
// holds, per key, exactly the counts 1..n; the repartition topic holds
// each input record once, in the partition of its key group's unit. It
// runs on the filesystem store and on an S3 server the test starts (each
// daemon staging its checkpoints in its own data_dir).
func TestClusterTakeover(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"filesystem", "s3"} {
		t.Run(kind, func(t *testing.T) { clusterTakeover(t, kind) })
	}
}

func clusterTakeover(t *testing.T, kind string) {
	kc, broker := startKfake(t, []string{"clicks", "counts"})
	var fenceMu sync.Mutex
	inits := map[string]int{}
	kc.ControlKey(22, func(req kmsg.Request) (kmsg.Response, error, bool) { // InitProducerId
		kc.KeepControl()
		if r := req.(*kmsg.InitProducerIDRequest); r.TransactionalID != nil {
			fenceMu.Lock()
			inits[*r.TransactionalID]++
			fenceMu.Unlock()
		}
		return nil, nil, false
	})
	snapshot := func() map[string]int {
		fenceMu.Lock()
		defer fenceMu.Unlock()
		m := map[string]int{}
		for k, v := range inits {
			m[k] = v
		}
		return m
	}
	root := t.TempDir()
	storeDir := filepath.Join(root, "store")
	var store checkpoint.Store = checkpoint.FileStore{Root: storeDir}
	storeYAML, env := "    dir: "+storeDir, []string(nil)
	if kind == "s3" {
		endpoint := testkit.S3Server(t, "chk", true)
		s, err := s3store.New(s3store.Config{Endpoint: endpoint, Bucket: "chk", Prefix: "team/", Region: "us-east-1",
			PathStyle: true, AccessKey: testkit.S3AccessKey, SecretKey: testkit.S3SecretKey})
		if err != nil {
			t.Fatal(err)
		}
		store = s
		storeYAML = fmt.Sprintf("    kind: s3\n    s3:\n      endpoint: %s\n      bucket: chk\n      prefix: team/\n      tls: false", endpoint)
		env = []string{"AWS_ACCESS_KEY_ID=" + testkit.S3AccessKey, "AWS_SECRET_ACCESS_KEY=" + testkit.S3SecretKey}
	}
	start := func(member, key string) *proc {
		dir := filepath.Join(root, member)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		addr := testkit.FreeAddr(t)
		return startProcEnv(t, dir, clusterConfigWith(dir, storeYAML, broker, addr, member, key), broker, addr, env)
	}
	const users, perUser = 6, 40
	total := users * perUser
	prod := newClient(t, broker, kgo.DefaultProduceTopic("clicks"))
	send := func(from, to int) {
		for i := from; i < to; i++ {
			produce(t, prod, &kgo.Record{Key: fmt.Appendf(nil, "%d", i), Value: fmt.Appendf(nil, `{"user":"u%d","page":"p%d","i":%d}`, i%users, i%3, i)})
		}
	}
	opts := []kgo.Opt{kgo.SeedBrokers(broker)}
	committed := func() []*kgo.Record {
		return testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), "counts", 5*time.Second)
	}

	send(0, total/2)
	a := start("a", "user")
	b := start("b", "user")
	var owners map[string]string
	if !testkit.Poll(2*time.Minute, func() bool {
		owners = unitOwnersIn(t, store)
		n := map[string]int{}
		for _, o := range owners {
			n[o]++
		}
		return n["a"] == 4 && n["b"] == 4 && len(committed()) >= total/2
	}) {
		t.Fatalf("units never spread 4/4 over a and b with the first half committed: owners %v\na:\n%s\nb:\n%s", owners, a.out.String(), b.out.String())
	}
	// Each daemon holds 2 units of each stage.
	for s := range 2 {
		n := map[string]int{}
		for u := range 4 {
			n[owners[fmt.Sprintf("%d/%d", s, u)]]++
		}
		if n["a"] != 2 || n["b"] != 2 {
			t.Errorf("stage %d units: %v, want 2 on a and 2 on b", s, n)
		}
	}

	// A daemon with another graph joins the group: it gets no units.
	c := start("c", "page")
	if !testkit.Poll(time.Minute, func() bool { return strings.Contains(c.out.String(), "units assigned") }) {
		t.Fatalf("c never finished joining:\n%s", c.out.String())
	}
	if strings.Contains(c.out.String(), "unit running") {
		t.Errorf("the daemon with another graph runs units:\n%s", c.out.String())
	}
	if got := unitOwnersIn(t, store); fmt.Sprint(got) != fmt.Sprint(owners) {
		t.Errorf("owners after c joined: %v, want %v", got, owners)
	}

	// kill -9 a while records flow; b takes a's units over.
	spread, before := owners, snapshot()
	a.kill(t)
	send(total/2, total)
	if !testkit.Poll(2*time.Minute, func() bool {
		owners = unitOwnersIn(t, store)
		for _, o := range owners {
			if o != "b" {
				return false
			}
		}
		return len(committed()) >= total
	}) {
		t.Fatalf("b never took every unit over with the whole output committed: owners %v, %d records\nb:\n%s", owners, len(committed()), b.out.String())
	}
	out := committed()
	got := map[string][]int64{}
	for _, r := range out {
		var v struct {
			Key   string `json:"key"`
			Count int64  `json:"count"`
		}
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatalf("output %s: %v", r.Value, err)
		}
		got[v.Key] = append(got[v.Key], v.Count)
	}
	for u := range users {
		key := fmt.Sprintf("u%d", u)
		if want := fmt.Sprint(seq(perUser)); fmt.Sprint(got[key]) != want {
			t.Errorf("key %s: counts %v, want %s", key, got[key], want)
		}
	}
	if len(out) != total {
		t.Errorf("output holds %d records, want %d", len(out), total)
	}
	rep := testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), "clicks-1-repartition", 5*time.Second)
	if len(rep) != total {
		t.Errorf("repartition topic holds %d records, want %d", len(rep), total)
	}
	for _, r := range rep {
		if want := keygroup.OperatorIndex(keygroup.Assign(r.Key, 16), 16, 4); int(r.Partition) != want {
			t.Errorf("repartition record with key %s in partition %d, want %d", r.Key, r.Partition, want)
		}
	}
	// b fenced the ids of the units it took from a, and re-initialised none
	// of the units it held all along.
	after := snapshot()
	ids := func(s, u int) []string {
		if s == 0 {
			return []string{fmt.Sprintf("kstreamd-clicks-repartition.1-0-%d-0", u)}
		}
		return []string{fmt.Sprintf("kstreamd-clicks-counts-1-%d-0", u)}
	}
	for s := range 2 {
		for u := range 4 {
			unit := fmt.Sprintf("%d/%d", s, u)
			for _, id := range ids(s, u) {
				switch {
				case spread[unit] == "a" && after[id] <= before[id]:
					t.Errorf("unit %s moved from a to b but b never fenced %s (InitProducerId %d before the kill, %d after)", unit, id, before[id], after[id])
				case spread[unit] == "b" && after[id] != before[id]:
					t.Errorf("unit %s stayed on b but %s was re-initialised (InitProducerId %d before the kill, %d after)", unit, id, before[id], after[id])
				}
			}
		}
	}
	if strings.Contains(c.out.String(), "unit running") {
		t.Errorf("the daemon with another graph ran units after a was killed:\n%s", c.out.String())
	}
	if c.exited() || b.exited() {
		t.Errorf("a daemon the test did not kill exited: b %v, c %v", b.exited(), c.exited())
	}
}

func seq(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(i + 1)
	}
	return out
}
