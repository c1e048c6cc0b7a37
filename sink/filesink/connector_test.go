package filesink

import (
	"slices"
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/operators"
	"github.com/kstreamd/kstreamd/runtime"
)

func TestParamsCheck(t *testing.T) {
	expr, err := operators.CompileExpression(`region`)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		p    Params
		want []string
	}{
		{"local json lines", Params{Path: "/out"}, nil},
		{"s3 parquet by time", Params{S3: S3Params{Endpoint: "h:9000", Bucket: "b"}, Format: FormatParquet,
			Columns: []ColumnParams{{Name: "a", Type: ColumnInt64}}, Bucket: BucketParams{Time: "2006/01/02", TimeZone: "Europe/Berlin", TimeSource: "processing"}}, nil},
		{"no output", Params{}, []string{"path: required: a local directory, or s3 instead"}},
		{"two outputs", Params{Path: "/o", S3: S3Params{Endpoint: "h:1", Bucket: "b"}}, []string{"s3: only one of path and s3"}},
		{"bad s3", Params{S3: S3Params{Endpoint: "http://h:1"}}, []string{
			`s3.endpoint: must be host:port without scheme or path (use s3.tls), got "http://h:1"`, "s3.bucket: required"}},
		{"parquet without columns", Params{Path: "/o", Format: FormatParquet}, []string{"columns: format parquet needs at least one column"}},
		{"columns for json lines", Params{Path: "/o", Columns: []ColumnParams{{Name: "a", Type: ColumnString}}}, []string{"columns: only for format parquet"}},
		{"bad format and columns", Params{Path: "/o", Format: "csv", Columns: []ColumnParams{{Name: "a", Type: "int"}, {Name: "a", Type: ColumnJSON}, {Type: ColumnJSON}}}, []string{
			`format: must be json_lines or parquet, got "csv"`,
			`columns[0].type: must be one of [string int64 double boolean timestamp json], got "int"`,
			`columns[1].name: duplicate column "a"`,
			"columns[2].name: required"}},
		{"bucket both", Params{Path: "/o", Bucket: BucketParams{Time: "2006", Expression: expr}}, []string{"bucket: only one of time and expression"}},
		{"bucket hidden layout", Params{Path: "/o", Bucket: BucketParams{Time: ".2006"}}, []string{
			`bucket.time: bucket ".1970" is not a relative path of plain names (no empty, hidden, . or .. segments)`}},
		{"bucket zone without time", Params{Path: "/o", Bucket: BucketParams{TimeZone: "Mars/Olympus", TimeSource: "wall"}}, []string{
			"bucket.time: required with time_zone or time_source", "bucket.time_zone: unknown time zone Mars/Olympus", `bucket.time_source: must be event or processing, got "wall"`}},
		{"names", Params{Path: "/o", PartPrefix: ".p", PartSuffix: "a/b", Rolling: RollingParams{MaxPartBytes: -1}}, []string{
			`part_prefix: must be a plain file name start (no '/', not hidden), got ".p"`, `part_suffix: must not hold '/', got "a/b"`, "rolling: sizes and intervals must not be negative"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			tc.p.CheckParams(func(field, msg string) { got = append(got, field+": "+msg) })
			if !slices.Equal(got, tc.want) {
				t.Fatalf("problems\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

func TestFactoryWritesAndRecovers(t *testing.T) {
	dir := t.TempDir()
	f := Factory()
	if err := connector.NewRegistry().RegisterSink(f); err != nil {
		t.Fatal(err)
	}
	if f.Supports(graph.DeliveryAtLeastOnce) || !f.Supports(graph.DeliveryExactlyOnce) {
		t.Fatal("the file sink supports exactly-once only")
	}
	expr, err := operators.CompileExpression(`region`)
	if err != nil {
		t.Fatal(err)
	}
	p := f.Params().(*Params)
	p.Path, p.Bucket.Expression = dir, expr // part_prefix: the sink's name, files
	sk := &graph.Sink{Name: "files", Type: Type, Params: p, Parallelism: 1, Delivery: graph.DeliveryExactlyOnce}
	op, err := f.New(connector.SinkContext{Sink: sk, Subtask: 0, Parallelism: 1, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	s := op.(*Sink)
	for _, v := range []string{`{"region":"eu","n":1}`, `{"region":"us","n":2}`} {
		if err := s.ProcessRecord(ctx, 0, runtime.Record{Value: []byte(v)}); err != nil {
			t.Fatal(err)
		}
	}
	fin := must(s.SnapshotState(ctx, &runtime.Barrier{CheckpointID: 3}))
	cs := committables(t, fin)
	var data [][]byte
	for _, c := range cs {
		data = append(data, must(MarshalCommittable(c)))
	}
	data = append(data, nil) // an empty epoch of another subtask
	// kill -9 before the commit; the restore publishes.
	if err := f.Recover(ctx, connector.RecoverContext{Sink: sk, Committables: data, OldParallelism: 2, Parallelism: 1, Logger: discardLogger()}); err != nil {
		t.Fatal(err)
	}
	pub, hidden := split(localFiles(t, dir))
	if got := lines(pub); !slices.Equal(got, []string{`{"region":"eu","n":1}`, `{"region":"us","n":2}`}) || len(hidden) != 0 {
		t.Fatalf("published %v hidden %v", pub, hidden)
	}
	for k := range pub {
		if !strings.HasPrefix(k, "eu/files-") && !strings.HasPrefix(k, "us/files-") {
			t.Errorf("part %s: want eu/files-* or us/files-* (the sink's name as part prefix)", k)
		}
	}
	// An empty snapshot still holds one (empty) entry.
	if cs := committables(t, must(s.SnapshotState(ctx, &runtime.Barrier{CheckpointID: 4}))); len(cs) != 2 {
		t.Fatalf("committables %+v: want checkpoint 3's two parts still pending (never notified)", cs)
	}
	if err := s.NotifyCheckpointComplete(ctx, 4); err != nil {
		t.Fatal(err)
	}
	if cs := committables(t, must(s.SnapshotState(ctx, &runtime.Barrier{CheckpointID: 5}))); len(cs) != 0 {
		t.Fatalf("committables %+v: want none (the helper checks the single empty entry)", cs)
	}
	bad := append(slices.Clone(data), []byte(`{"v":9}`))
	if err := f.Recover(ctx, connector.RecoverContext{Sink: sk, Committables: bad, Logger: discardLogger()}); err == nil || !strings.Contains(err.Error(), "committable version 9") {
		t.Fatalf("recover of a bad committable: %v", err)
	}
}
