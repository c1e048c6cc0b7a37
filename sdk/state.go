package sdk

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"

	"github.com/kstreamd/kstreamd/job"
	"github.com/kstreamd/kstreamd/pipeline"
)

// stateUsage is the usage of `kstreamd state`.
const stateUsage = `usage: kstreamd state <command> [flags] DIR

DIR is a checkpoint (chk-<n>) or savepoint directory, of either backend,
incremental Pebble checkpoints included; it is read as a restore reads it.

commands:
  ls [--json] DIR         list the operators and their states: keyed states
                          with kind, serializer, TTL, entries and bytes,
                          operator list states and broadcast states;
                          --json prints the summary GET /api/v1/checkpoints/{id}
                          answers
  dump [filters] DIR      print every keyed state entry as one JSON line:
                          operator, subtask, state, kind, key_group, key,
                          user_key (maps), value decoded by the state's
                          serializer (else value_base64 and serializer)
  count [filters] DIR     print the entries and bytes per operator and key
                          group

--config FILE (every command): the job's pipeline FILE; when its
state.remote section puts remote state on an S3 store (store: s3, with
AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY set), the checkpoint's remote
objects are verified and read there instead of in DIR's ../remote.

filters (dump, count):
  --operator NAME         an operator's name or uid
  --state NAME            a keyed state
  --key-group N           one key group
  --key KEY               one key (its serialized bytes, as key_by selects)
`

// runState runs `kstreamd state ls|dump|count` and returns the exit status:
// 0 done, 1 the checkpoint cannot be read (or is inconsistent), 2 a usage
// error.
func runState(args []string, stdout, stderr io.Writer, reg *Registry) int {
	if len(args) == 0 || isHelp(args[0]) {
		if len(args) == 0 {
			fmt.Fprint(stderr, stateUsage)
			return 2
		}
		fmt.Fprint(stdout, stateUsage)
		return 0
	}
	cmd := args[0]
	if cmd != "ls" && cmd != "dump" && cmd != "count" {
		fmt.Fprintf(stderr, "kstreamd state: unknown command %q\n%s", cmd, stateUsage)
		return 2
	}
	fs := flag.NewFlagSet("kstreamd state "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	asJSON := false
	var f job.StateFilter
	config := fs.String("config", "", "the job's pipeline `FILE` (its state.remote store holds the checkpoint's remote state)")
	var key, kg string
	hasKey := false
	synopsis := "kstreamd state " + cmd + " [--config FILE] [--operator NAME] [--state NAME] [--key-group N] [--key KEY] DIR"
	if cmd == "ls" {
		fs.BoolVar(&asJSON, "json", false, "print the summary as JSON (GET /api/v1/checkpoints/{id}'s answer)")
		synopsis = "kstreamd state ls [--config FILE] [--json] DIR"
	} else {
		fs.StringVar(&f.Operator, "operator", "", "only the operator with this `NAME` or uid")
		fs.StringVar(&f.State, "state", "", "only the keyed state `NAME`")
		fs.StringVar(&kg, "key-group", "", "only key group `N`")
		fs.Func("key", "only the serialized `KEY`", func(s string) error { key, hasKey = s, true; return nil })
	}
	// Flags may come before or after DIR.
	var dirs []string
	rest := args[1:]
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				printUsage(fs, stdout, synopsis)
				return 0
			}
			fmt.Fprintf(stderr, "kstreamd state %s: %v\n", cmd, err)
			printUsage(fs, stderr, synopsis)
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		dirs = append(dirs, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(dirs) != 1 {
		printUsage(fs, stderr, synopsis+"   (one chk-<n> or savepoint directory)")
		return 2
	}
	if kg != "" {
		n, err := strconv.Atoi(kg)
		if err != nil || n < 0 {
			fmt.Fprintf(stderr, "kstreamd state %s: --key-group %q: want a key group, an integer >= 0\n", cmd, kg)
			return 2
		}
		f.KeyGroup, f.HasKeyGroup = n, true
	}
	if hasKey {
		f.Key = []byte(key)
	}
	dir := dirs[0]
	r, err := stateReader(*config, reg)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	switch cmd {
	case "ls":
		err = stateList(stdout, r, dir, asJSON)
	case "dump":
		enc := json.NewEncoder(stdout)
		enc.SetEscapeHTML(false)
		err = r.Dump(dir, f, func(e job.DumpedEntry) error { return enc.Encode(e) })
	case "count":
		err = stateCount(stdout, r, dir, f)
	}
	if err != nil {
		fmt.Fprintf(stderr, "kstreamd state %s: %v\n", cmd, err)
		return 1
	}
	return 0
}

// stateReader returns the checkpoint reader of `kstreamd state`: with the
// remote state store of the pipeline config at path (its state.remote
// section with store s3), or of the filesystem when path is empty or the
// config has no S3 remote state. The config is decoded as run decodes it
// (errors with FILE:LINE:COL).
func stateReader(path string, reg *Registry) (job.CheckpointReader, error) {
	var r job.CheckpointReader
	if path == "" {
		return r, nil
	}
	cfg, err := pipeline.LoadWith(path, reg.pipelineRegistries())
	if err != nil {
		return r, err
	}
	if rs := cfg.Settings().RemoteState; rs != nil {
		r.RemoteStore = rs.Store // nil for the filesystem store
	}
	return r, nil
}

// stateList prints the summary of the checkpoint in dir: JSON, or a header
// line and one row per operator and state.
func stateList(w io.Writer, r job.CheckpointReader, dir string, asJSON bool) error {
	s, err := r.Summarize(dir)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(s)
	}
	kind := "checkpoint"
	if s.Savepoint {
		kind = "savepoint"
	}
	fmt.Fprintf(w, "%s %d of job %s (metadata version %d, max parallelism %d, %d bytes, %d shared files)\n",
		kind, s.CheckpointID, s.Job, s.Version, s.MaxParallelism, s.Bytes, s.SharedFiles)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OPERATOR\tUID\tPARALLELISM\tSTATE\tKIND\tSERIALIZER\tTTL\tENTRIES\tBYTES")
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range s.Operators {
			if !yield(n) {
				return
			}
		}
	}) {
		op := s.Operators[name]
		uid := op.UID
		if uid == "" {
			uid = name
		}
		row := func(st, kind, ser, ttl string, entries, bytes int64) {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%d\t%d\n", name, uid, op.Parallelism, st, kind, ser, ttl, entries, bytes)
		}
		rows := 0
		for _, ks := range op.KeyedStates {
			row(ks.Name, "keyed "+ks.Kind+" ("+op.Backend+")", ks.Serializer, strconv.FormatBool(ks.TTL), ks.Entries, ks.Bytes)
			rows++
		}
		type agg struct {
			mode           string
			entries, bytes int64
		}
		lists, bcast := map[string]*agg{}, map[string]int64{}
		for _, sub := range op.Subtasks {
			for ln, l := range sub.OperatorStates {
				a := lists[ln]
				if a == nil {
					a = &agg{mode: l.Mode}
					lists[ln] = a
				}
				a.entries += int64(len(l.Entries))
				a.bytes += l.Bytes
			}
			if sub.Subtask == 0 {
				for bn, b := range sub.Broadcast {
					var m map[string]json.RawMessage
					_ = json.Unmarshal(b, &m)
					bcast[bn] = int64(len(m))
				}
			}
		}
		for _, ln := range slices.Sorted(func(yield func(string) bool) {
			for n := range lists {
				if !yield(n) {
					return
				}
			}
		}) {
			a := lists[ln]
			row(ln, "operator list ("+a.mode+")", "-", "-", a.entries, a.bytes)
			rows++
		}
		for _, bn := range slices.Sorted(func(yield func(string) bool) {
			for n := range bcast {
				if !yield(n) {
					return
				}
			}
		}) {
			row(bn, "broadcast", "json", "-", bcast[bn], 0)
			rows++
		}
		if rows == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%d\t-\t(stateless)\t-\t-\t0\t0\n", name, uid, op.Parallelism)
		}
	}
	return tw.Flush()
}

// stateCount prints the keyed entries and bytes per operator and key group
// f selects, and a total per operator.
func stateCount(w io.Writer, r job.CheckpointReader, dir string, f job.StateFilter) error {
	counts, err := r.Count(dir, f)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "OPERATOR\tKEY_GROUP\tENTRIES\tBYTES\t")
	var total, totalBytes int64
	for i, c := range counts {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t\n", c.Operator, c.KeyGroup, c.Entries, c.Bytes)
		total, totalBytes = total+c.Entries, totalBytes+c.Bytes
		if i == len(counts)-1 || counts[i+1].Operator != c.Operator {
			fmt.Fprintf(tw, "%s\ttotal\t%d\t%d\t\n", c.Operator, total, totalBytes)
			total, totalBytes = 0, 0
		}
	}
	return tw.Flush()
}
