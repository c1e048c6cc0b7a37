// Package s3store is the checkpoint.Store of cluster-mode units on an
// S3-compatible object store (AWS S3, MinIO, Ceph RGW, ...), through
// minio-go. The create-only write that fences a zombie (docs/scale-out.md,
// invariant 1) is a PUT with If-None-Match: *; a store answering 412
// Precondition Failed says the key exists. A store that ignores the header
// is refused by checkpoint.SelfTest at start.
package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/kstreamd/kstreamd/checkpoint"

	"github.com/kstreamd/kstreamd/internal/atomicfile"
)

// Config is where the store is and how to reach it.
type Config struct {
	// Endpoint is "host:port", without scheme.
	Endpoint string
	// Bucket holds the objects; it must exist.
	Bucket string
	// Prefix starts every key ("" for none; a prefix meant as a folder
	// ends with '/').
	Prefix string
	// Region is the bucket's region, e.g. "us-east-1".
	Region string
	// TLS talks HTTPS; PathStyle addresses the bucket in the URL path
	// rather than in the host name.
	TLS, PathStyle bool
	// AccessKey and SecretKey are the credentials (AWS_ACCESS_KEY_ID,
	// AWS_SECRET_ACCESS_KEY).
	AccessKey, SecretKey string
	// Transport, if not nil, replaces the HTTP transport (tests).
	Transport http.RoundTripper
}

// Store is a checkpoint.Store in one bucket: key k is the object
// Prefix+k. Safe for concurrent use.
type Store struct {
	cfg Config
	cl  *minio.Client
}

var _ checkpoint.Store = (*Store)(nil)

// New returns the store of cfg. It does not contact the endpoint
// (checkpoint.SelfTest does, at start).
func New(cfg Config) (*Store, error) {
	cl, err := NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("s3store: %w", err)
	}
	return &Store{cfg: cfg, cl: cl}, nil
}

// NewClient returns a minio-go client for cfg's endpoint, credentials,
// TLS, region, addressing style and transport (the one the store and the
// file sink's S3 storage use). It errors when the endpoint, the bucket or
// the credentials are empty; it does not contact the endpoint.
func NewClient(cfg Config) (*minio.Client, error) {
	if cfg.Endpoint == "" || cfg.Bucket == "" {
		return nil, fmt.Errorf("endpoint and bucket are required")
	}
	if cfg.AccessKey == "" || cfg.SecretKey == "" {
		return nil, fmt.Errorf("credentials are required")
	}
	lookup := minio.BucketLookupDNS
	if cfg.PathStyle {
		lookup = minio.BucketLookupPath
	}
	return minio.New(cfg.Endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure: cfg.TLS, Region: cfg.Region, BucketLookup: lookup, Transport: cfg.Transport,
	})
}

// String implements checkpoint.Store: "s3 <bucket>/<prefix> at <endpoint>".
func (s *Store) String() string {
	return "s3 " + s.cfg.Bucket + "/" + s.cfg.Prefix + " at " + s.cfg.Endpoint
}

// putOptions are the options of every write: create-only, one PUT (the
// conditional header applies to a single PUT; checkpoint files are far
// below the 5 GiB a single PUT takes).
func putOptions() minio.PutObjectOptions {
	opts := minio.PutObjectOptions{DisableMultipart: true, ContentType: "application/octet-stream"}
	opts.SetMatchETagExcept("*") // If-None-Match: *
	return opts
}

// wrap maps the store's answers to the errors checkpoint.Store promises:
// 412 Precondition Failed to fs.ErrExist, NoSuchKey to fs.ErrNotExist.
func (s *Store) wrap(op, key string, err error) error {
	if err == nil {
		return nil
	}
	resp := minio.ToErrorResponse(err)
	switch {
	case resp.StatusCode == http.StatusPreconditionFailed || resp.Code == minio.PreconditionFailed:
		return fmt.Errorf("s3store: %s %s in %s: %w", op, key, s, fs.ErrExist)
	case resp.Code == minio.NoSuchKey || resp.StatusCode == http.StatusNotFound && resp.Code != minio.NoSuchBucket:
		return fmt.Errorf("s3store: %s %s in %s: %w", op, key, s, fs.ErrNotExist)
	}
	return fmt.Errorf("s3store: %s %s in %s: %w", op, key, s, err)
}

// Create implements checkpoint.Store: a PUT with If-None-Match: *.
func (s *Store) Create(ctx context.Context, key string, data []byte) error {
	_, err := s.cl.PutObject(ctx, s.cfg.Bucket, s.cfg.Prefix+key, bytes.NewReader(data), int64(len(data)), putOptions())
	return s.wrap("create", key, err)
}

// Upload implements checkpoint.Store: a PUT of the file with
// If-None-Match: *.
func (s *Store) Upload(ctx context.Context, key, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("s3store: upload %s: %w", key, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("s3store: upload %s: %w", key, err)
	}
	_, err = s.cl.PutObject(ctx, s.cfg.Bucket, s.cfg.Prefix+key, f, st.Size(), putOptions())
	return s.wrap("upload", key, err)
}

// Read implements checkpoint.Store.
func (s *Store) Read(ctx context.Context, key string) ([]byte, error) {
	obj, err := s.cl.GetObject(ctx, s.cfg.Bucket, s.cfg.Prefix+key, minio.GetObjectOptions{})
	if err != nil {
		return nil, s.wrap("read", key, err)
	}
	defer obj.Close()
	b, err := io.ReadAll(obj)
	if err != nil {
		return nil, s.wrap("read", key, err)
	}
	return b, nil
}

// Download implements checkpoint.Store: the object goes to a temporary
// file beside path, renamed into place when complete (atomicfile.Write
// without fsyncs: a restore's working copy, which a crash makes worthless).
func (s *Store) Download(ctx context.Context, key, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("s3store: download %s: %w", key, err)
	}
	obj, err := s.cl.GetObject(ctx, s.cfg.Bucket, s.cfg.Prefix+key, minio.GetObjectOptions{})
	if err != nil {
		return s.wrap("download", key, err)
	}
	defer obj.Close()
	err = atomicfile.Write(path, atomicfile.Options{TempPattern: ".download-*", NoSync: true}, func(w io.Writer) error {
		_, err := io.Copy(w, obj)
		return err
	})
	if err != nil {
		return s.wrap("download", key, err)
	}
	return nil
}

// List implements checkpoint.Store.
func (s *Store) List(ctx context.Context, prefix string) ([]string, error) {
	var out []string
	for obj := range s.cl.ListObjects(ctx, s.cfg.Bucket, minio.ListObjectsOptions{Prefix: s.cfg.Prefix + prefix, Recursive: true}) {
		if obj.Err != nil {
			return nil, s.wrap("list", prefix, obj.Err)
		}
		if k, ok := strings.CutPrefix(obj.Key, s.cfg.Prefix); ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Delete implements checkpoint.Store (one request per object: not every
// S3 clone takes multi-object deletes).
func (s *Store) Delete(ctx context.Context, keys ...string) error {
	var errs []error
	for _, k := range keys {
		if err := s.cl.RemoveObject(ctx, s.cfg.Bucket, s.cfg.Prefix+k, minio.RemoveObjectOptions{}); err != nil {
			if werr := s.wrap("delete", k, err); !errors.Is(werr, fs.ErrNotExist) {
				errs = append(errs, werr)
			}
		}
	}
	return errors.Join(errs...)
}
