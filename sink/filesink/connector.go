package filesink

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kstreamd/kstreamd/checkpoint/s3store"
	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/operators"
	"github.com/kstreamd/kstreamd/runtime"
)

// Environment variables holding the S3 credentials (as for the cluster
// store).
const (
	EnvS3AccessKey = "AWS_ACCESS_KEY_ID"
	EnvS3SecretKey = "AWS_SECRET_ACCESS_KEY"
)

// Params are the params of a sink of type file (sinks[].params).
type Params struct {
	// Path is the local output directory; exactly one of Path and S3.
	Path string `yaml:"path" doc:"The local output directory (created when missing); exactly one of path and s3."`
	// S3 is the S3-compatible output; exactly one of Path and S3 (set
	// when its endpoint, bucket, prefix or spool_dir is).
	S3 S3Params `yaml:"s3" doc:"An S3-compatible bucket as output (endpoint, bucket, prefix, region, tls, path_style, spool_dir); credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; exactly one of path and s3."`
	// Format is the part file format. Default json_lines.
	Format Format `yaml:"format" doc:"json_lines (default: one JSON value per line) or parquet (needs columns)."`
	// Columns are the Parquet columns (format parquet only).
	Columns []ColumnParams `yaml:"columns" doc:"The Parquet columns, each {name, type, field}: type string, int64, double, boolean, timestamp (milliseconds, UTC) or json; field a path into the value (default: the name), or $key, $timestamp, $value. Every column is optional (null when absent)."`
	// Bucket chooses each record's sub-directory; default none.
	Bucket BucketParams `yaml:"bucket" doc:"The sub-directory of each record: {time: a Go layout such as 2006-01-02--15, time_zone, time_source: event (default) or processing} or {expression: an expression over the record}; default: the output's root."`
	// PartPrefix starts every part name. Default: the sink's name.
	PartPrefix string `yaml:"part_prefix" doc:"The start of every part file name (default: the sink's name): <part_prefix>-<run>-<subtask>-<n><part_suffix>; two file sinks writing one output need different prefixes (a restore deletes the in-progress and pending parts of its prefix)."`
	// PartSuffix ends every part name. Default ".jsonl" or ".parquet".
	PartSuffix string `yaml:"part_suffix" doc:"The end of every part file name (default .jsonl or .parquet)."`
	// Rolling is the rolling policy.
	Rolling RollingParams `yaml:"rolling" doc:"When a part file is closed besides at every checkpoint: max_part_bytes (default 134217728, 128 MiB), rollover_interval (default none), inactivity_interval (default none)."`
}

// S3Params is an S3-compatible output.
type S3Params struct {
	// Endpoint is "host:port" without scheme; required.
	Endpoint string `yaml:"endpoint" doc:"host:port, no scheme; required with s3."`
	// Bucket must exist; required.
	Bucket string `yaml:"bucket" doc:"The bucket (it must exist); required with s3."`
	// Prefix starts every key ("" none).
	Prefix string `yaml:"prefix" doc:"Key prefix (end it with / for a folder); default none."`
	// Region defaults to us-east-1.
	Region string `yaml:"region" doc:"The bucket's region; default us-east-1."`
	// TLS talks HTTPS; default true.
	TLS bool `yaml:"tls" doc:"HTTPS to the endpoint; default true."`
	// PathStyle addresses the bucket in the URL path; default true.
	PathStyle bool `yaml:"path_style" doc:"Path-style bucket addressing (MinIO and most clones); default true."`
	// SpoolDir holds the local in-progress parts; default a directory
	// under the system temporary directory named after the output.
	SpoolDir string `yaml:"spool_dir" doc:"Local directory of the in-progress parts; default a directory under the system temporary directory named after the output."`
}

// set reports whether the S3 output is configured.
func (s S3Params) set() bool {
	return s.Endpoint != "" || s.Bucket != "" || s.Prefix != "" || s.SpoolDir != ""
}

// NewParams returns the params of a file sink holding the defaults (those
// the decoder keeps for fields the config leaves out).
func NewParams() *Params {
	return &Params{S3: S3Params{Region: "us-east-1", TLS: true, PathStyle: true}}
}

// ColumnParams is one Parquet column (Column).
type ColumnParams struct {
	Name  string     `yaml:"name" doc:"The column name; required, unique."`
	Type  ColumnType `yaml:"type" doc:"string, int64, double, boolean, timestamp or json; required."`
	Field string     `yaml:"field" doc:"A path into the value (a.b for nested fields), or $key, $timestamp, $value; default: the name."`
}

// BucketParams chooses a BucketAssigner: Time (DateTimeBucketAssigner) or
// Expression (ExpressionBucketAssigner), or neither (the root).
type BucketParams struct {
	// Time is a Go time layout, e.g. "2006-01-02--15".
	Time string `yaml:"time" doc:"A Go time layout giving the sub-directory, e.g. 2006-01-02--15 or 2006/01/02."`
	// TimeZone is an IANA zone name; default UTC.
	TimeZone string `yaml:"time_zone" doc:"The IANA zone time is formatted in; default UTC."`
	// TimeSource is "event" (the record timestamp; default) or
	// "processing" (the wall clock).
	TimeSource string `yaml:"time_source" doc:"event (the record timestamp; default) or processing (the wall clock)."`
	// Expression yields the bucket, a string or a number.
	Expression operators.Expression `yaml:"expression" doc:"An expression over the record giving the sub-directory (a string or number; / nests); at most one of time and expression."`
}

// RollingParams is a RollingPolicy.
type RollingParams struct {
	// MaxPartBytes rolls a part at this size; default 128 MiB.
	MaxPartBytes int64 `yaml:"max_part_bytes" doc:"Close a part once this big, in bytes (Parquet: an estimate); default 134217728 (128 MiB)."`
	// RolloverInterval rolls a part this long after it opened; 0 none.
	RolloverInterval time.Duration `yaml:"rollover_interval" doc:"Close a part this long after it was opened; default none."`
	// InactivityInterval rolls a part idle this long; 0 none.
	InactivityInterval time.Duration `yaml:"inactivity_interval" doc:"Close a part after this long without a record; default none."`
}

// CheckParams implements operators.ParamsChecker: every problem, with its
// field path.
func (p *Params) CheckParams(report func(field, msg string)) {
	switch {
	case p.Path == "" && !p.S3.set():
		report("path", "required: a local directory, or s3 instead")
	case p.Path != "" && p.S3.set():
		report("s3", "only one of path and s3")
	}
	if s := p.S3; s.set() {
		if s.Endpoint == "" {
			report("s3.endpoint", "required (host:port)")
		} else if strings.Contains(s.Endpoint, "://") || strings.Contains(s.Endpoint, "/") {
			report("s3.endpoint", fmt.Sprintf("must be host:port without scheme or path (use s3.tls), got %q", s.Endpoint))
		}
		if s.Bucket == "" {
			report("s3.bucket", "required")
		}
	}
	switch p.Format {
	case "", FormatJSONLines:
		if len(p.Columns) > 0 {
			report("columns", "only for format parquet")
		}
	case FormatParquet:
		if len(p.Columns) == 0 {
			report("columns", "format parquet needs at least one column")
		}
	default:
		report("format", fmt.Sprintf("must be json_lines or parquet, got %q", p.Format))
	}
	seen := map[string]bool{}
	for i, c := range p.Columns {
		at := fmt.Sprintf("columns[%d]", i)
		if c.Name == "" {
			report(at+".name", "required")
		} else if seen[c.Name] {
			report(at+".name", fmt.Sprintf("duplicate column %q", c.Name))
		}
		seen[c.Name] = true
		if !slices.Contains(ColumnTypes, c.Type) {
			report(at+".type", fmt.Sprintf("must be one of %v, got %q", ColumnTypes, c.Type))
		}
	}
	b := p.Bucket
	if b.Time != "" && b.Expression.IsSet() {
		report("bucket", "only one of time and expression")
	}
	if b.Time != "" {
		if _, err := checkBucket(time.Unix(0, 0).UTC().Format(b.Time)); err != nil {
			report("bucket.time", err.Error())
		}
	} else if b.TimeZone != "" || b.TimeSource != "" {
		report("bucket.time", "required with time_zone or time_source")
	}
	if b.TimeZone != "" {
		if _, err := time.LoadLocation(b.TimeZone); err != nil {
			report("bucket.time_zone", err.Error())
		}
	}
	if b.TimeSource != "" && b.TimeSource != "event" && b.TimeSource != "processing" {
		report("bucket.time_source", fmt.Sprintf("must be event or processing, got %q", b.TimeSource))
	}
	if p.PartPrefix != "" && (strings.ContainsAny(p.PartPrefix, "/\\\x00") || strings.HasPrefix(p.PartPrefix, ".")) {
		report("part_prefix", fmt.Sprintf("must be a plain file name start (no '/', not hidden), got %q", p.PartPrefix))
	}
	if strings.ContainsAny(p.PartSuffix, "/\\\x00") {
		report("part_suffix", fmt.Sprintf("must not hold '/', got %q", p.PartSuffix))
	}
	r := p.Rolling
	if r.MaxPartBytes < 0 || r.RolloverInterval < 0 || r.InactivityInterval < 0 {
		report("rolling", "sizes and intervals must not be negative")
	}
}

// storage returns the storage p names for the sink called sinkName.
func (p *Params) storage(sinkName string) (Storage, error) {
	if !p.S3.set() {
		return LocalStorage{Root: p.Path}, nil
	}
	s := p.S3
	region := s.Region
	if region == "" {
		region = "us-east-1"
	}
	spool := s.SpoolDir
	if spool == "" {
		h := sha256.Sum256([]byte(s.Endpoint + "\x00" + s.Bucket + "\x00" + s.Prefix + "\x00" + p.prefix(sinkName)))
		spool = filepath.Join(os.TempDir(), "kstreamd-file-sink", hex.EncodeToString(h[:8]))
	}
	return NewS3Storage(S3Config{Config: s3store.Config{Endpoint: s.Endpoint, Bucket: s.Bucket, Prefix: s.Prefix, Region: region, TLS: s.TLS, PathStyle: s.PathStyle,
		AccessKey: os.Getenv(EnvS3AccessKey), SecretKey: os.Getenv(EnvS3SecretKey)}, SpoolDir: spool})
}

// prefix is the part prefix of the sink called sinkName: PartPrefix, or
// the sink's name.
func (p *Params) prefix(sinkName string) string {
	if p.PartPrefix == "" {
		return sinkName
	}
	return p.PartPrefix
}

// assigner returns the bucket assigner p names.
func (p *Params) assigner() (BucketAssigner, error) {
	b := p.Bucket
	switch {
	case b.Expression.IsSet():
		return &ExpressionBucketAssigner{prog: b.Expression.Program()}, nil
	case b.Time != "":
		loc := time.UTC
		if b.TimeZone != "" {
			l, err := time.LoadLocation(b.TimeZone)
			if err != nil {
				return nil, err
			}
			loc = l
		}
		return DateTimeBucketAssigner{Layout: b.Time, Location: loc, ProcessingTime: b.TimeSource == "processing"}, nil
	}
	return BasePathBucketAssigner{}, nil
}

// params returns the sink's decoded params.
func params(sk *graph.Sink) (*Params, error) {
	p, ok := sk.Params.(*Params)
	if !ok || p == nil {
		return nil, fmt.Errorf("filesink: sink %s: params are %T, want *filesink.Params", sk.Name, sk.Params)
	}
	return p, nil
}

// Factory returns the connector registration of the sink type file.
// Delivery exactly-once only: the sink always publishes with completed
// checkpoints, and its Recover (which runs only for exactly-once sinks)
// is what publishes or deletes the parts a crash left.
func Factory() connector.SinkFactory {
	return connector.SinkFactory{
		Type:       Type,
		Doc:        "Writes part files (JSON lines or Parquet) to a local directory or an S3-compatible bucket, bucketed by time or an expression, published exactly once when checkpoints complete (Flink's FileSink).",
		Params:     func() any { return NewParams() },
		Deliveries: []graph.Delivery{graph.DeliveryExactlyOnce},
		Recover: func(ctx context.Context, rc connector.RecoverContext) error {
			p, err := params(rc.Sink)
			if err != nil {
				return err
			}
			st, err := p.storage(rc.Sink.Name)
			if err != nil {
				return err
			}
			var cs []Committable
			for _, b := range rc.Committables {
				if b == nil {
					continue // an empty epoch
				}
				c, err := UnmarshalCommittable(b)
				if err != nil {
					return fmt.Errorf("filesink: sink %s: %w", rc.Sink.Name, err)
				}
				cs = append(cs, c)
			}
			_, err = Recover(ctx, RecoverConfig{Name: rc.Sink.Name, Storage: st, PartPrefix: p.prefix(rc.Sink.Name), Committables: cs, Logger: rc.Logger})
			return err
		},
		New: func(sc connector.SinkContext) (runtime.Operator, error) {
			p, err := params(sc.Sink)
			if err != nil {
				return nil, err
			}
			st, err := p.storage(sc.Sink.Name)
			if err != nil {
				return nil, err
			}
			a, err := p.assigner()
			if err != nil {
				return nil, err
			}
			cols := make([]Column, len(p.Columns))
			for i, c := range p.Columns {
				cols[i] = Column(c)
			}
			return New(Config{Name: sc.Sink.Name, Subtask: sc.Subtask, Storage: st, Format: p.Format, Columns: cols, Bucket: a,
				PartPrefix: p.prefix(sc.Sink.Name), PartSuffix: p.PartSuffix,
				Rolling:    RollingPolicy{MaxPartSize: p.Rolling.MaxPartBytes, RolloverInterval: p.Rolling.RolloverInterval, InactivityInterval: p.Rolling.InactivityInterval},
				RecordsOut: sc.RecordsOut, Logger: sc.Logger})
		},
	}
}
